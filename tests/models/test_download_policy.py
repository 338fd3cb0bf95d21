"""What a download request is answered, for both APIs that download (LM Studio's
download endpoints, Ollama's pull)."""

from __future__ import annotations

import pytest

from parlance.core.errors import InsufficientStorage, InvalidRequest, ParlanceError
from parlance.models.download_job import DownloadJob
from parlance.models.download_policy import (
    failure,
    no_models_dir,
    served_name,
    start_download,
)
from parlance.models.downloads import DownloadManager


def test_a_failed_download_is_the_urls_fault_unless_the_file_could_not_be_written(tmp_path):
    job = DownloadJob("https://example.com/m.gguf", tmp_path / "m.gguf",
                      lambda: None, ())  # (never run: no client is made)
    job.error = "the server answered 404"
    refused = failure(job)
    assert isinstance(refused, InvalidRequest) and refused.param == "model"
    assert (refused.message, refused.code) == ("the server answered 404", "download_failed")
    job.failed_here = True
    ours = failure(job)
    assert type(ours) is ParlanceError and ours.kind == "internal"
    job.error = None
    assert failure(job).message == "download failed"
    job.no_room, job.error = True, "not enough free disk space (it needs 9 more bytes, …)"
    full = failure(job)  # issue 39: was a 500
    assert isinstance(full, InsufficientStorage) and full.status == 507
    assert full.message == job.error


async def test_a_link_that_is_no_gguf_file_is_the_clients_mistake(tmp_path):
    downloads = DownloadManager(tmp_path)
    with pytest.raises(InvalidRequest, match="direct link to a .gguf file") as caught:
        await start_download(downloads, "https://example.com/model.bin")
    assert caught.value.param == "model"
    assert no_models_dir().code == "no_models_dir"


def test_a_downloaded_file_is_served_under_the_id_the_scan_gives_it(tmp_path):
    file = tmp_path / "acme" / "tiny-repo" / "tiny.gguf"
    file.parent.mkdir(parents=True)
    file.write_bytes(b"GGUF")
    assert served_name(tmp_path, file) == "acme/tiny-repo"
    assert served_name(tmp_path, tmp_path / "elsewhere.gguf") is None
