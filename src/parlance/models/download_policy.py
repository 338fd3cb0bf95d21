"""What a model download request is answered, whichever API asked (LM Studio's
download endpoints, Ollama's pull): the refusals, a failed download as an error, and
the name a downloaded file is served under."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parlance.core.errors import InsufficientStorage, InvalidRequest, ParlanceError
from parlance.models.discovery import scan_models_dir
from parlance.models.download_job import DownloadJob
from parlance.models.downloads import DownloadManager
from parlance.models.hub import HubName

__all__ = ["failure", "link_for", "no_models_dir", "served_name", "start_download"]


def no_models_dir() -> InvalidRequest:
    return InvalidRequest("This server has no models directory to download into "
                          "(parlance serve --models-dir).", code="no_models_dir")


async def start_download(downloads: DownloadManager, url: str, *,
                         followed: bool = False) -> dict[str, Any]:
    """Start or join the download of `url` (`DownloadManager.start`); a URL that is no
    http(s) link to a .gguf file, or that reaches a refused address, is the client's
    mistake (400 naming `model`)."""
    try:
        return await downloads.start(url, followed=followed)
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="model") from exc


async def link_for(downloads: DownloadManager, name: HubName) -> str:
    """The download link of a catalog name (`DownloadManager.link_for`); a catalog
    address the guard refuses is a 400 naming `model`, as a refused URL is."""
    try:
        return await downloads.link_for(name)
    except InvalidRequest:
        raise
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="model") from exc


def failure(job: DownloadJob) -> ParlanceError:
    """A failed download: the URL's fault (400: no such file, no GGUF, unreachable),
    no room on this server's disk (507, with the figures), or this server's (500: the
    file could not be written)."""
    message = job.error or "download failed"
    if job.no_room:
        return InsufficientStorage(message, code="insufficient_storage")
    if job.failed_here:
        return ParlanceError(message, code="download_failed")
    return InvalidRequest(message, param="model", code="download_failed")


def served_name(models_dir: Path, file: Path) -> str | None:
    """The id the model at `file` is served under (a scan of the models directory);
    None: the scan does not list it."""
    return next((m.key for m in scan_models_dir(models_dir) if m.path == file), None)
