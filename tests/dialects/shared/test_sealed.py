"""Sealed `encrypted_content`: what the server wrote reads back; anything else is a 400
naming the parameter; the key outlives a restart through the data directory."""

from __future__ import annotations

import base64

import pytest

from parlance.core.errors import InvalidRequest
from parlance.dialects.shared.sealed import INVALID, Sealer
from parlance.server.sealing import server_sealer


def test_round_trip_and_refusals():
    sealer = Sealer.ephemeral()
    token = sealer.seal("compaction", {"summary": "Ada likes tea. ✓"})
    assert sealer.unseal("compaction", token, param="input[0]") == {
        "summary": "Ada likes tea. ✓"}
    raw = bytearray(base64.urlsafe_b64decode(token))
    raw[-3] ^= 1  # one bit of the payload
    altered = base64.urlsafe_b64encode(bytes(raw)).decode()
    for bad, purpose in [(altered, "compaction"), (token, "reasoning"), ("not base64!", "x"),
                         ("", "compaction"), (12, "compaction"),
                         (Sealer.ephemeral().seal("compaction", {}), "compaction")]:
        with pytest.raises(InvalidRequest) as caught:
            sealer.unseal(purpose, bad, param="input[3].encrypted_content")
        assert caught.value.code == INVALID
        assert caught.value.param == "input[3].encrypted_content"


@pytest.mark.parametrize("body", [b"not json", b"\xff\xfe", b"[1, 2]", b'"text"', b"",
                                  b"[" * 100_000, b'{"p": "compaction"'])
def test_a_valid_tag_over_what_is_no_sealed_object_is_a_400(body):
    """Only a key holder can tag a body; what it tagged is still read as a client's."""
    sealer = Sealer(b"k" * 32)
    token = base64.urlsafe_b64encode(sealer._tag(body) + body).decode()
    with pytest.raises(InvalidRequest) as caught:
        sealer.unseal("compaction", token, param="input[0].encrypted_content")
    assert caught.value.code == INVALID and caught.value.param == "input[0].encrypted_content"


def test_key_kept_in_the_data_directory(tmp_path):
    token = server_sealer(tmp_path).seal("compaction", "summary")
    assert server_sealer(tmp_path).unseal("compaction", token, param="p") == "summary"
    assert (tmp_path / "sealing.key").stat().st_mode & 0o077 == 0
    with pytest.raises(InvalidRequest):  # no data directory: a key of its own
        server_sealer(None).unseal("compaction", token, param="p")
