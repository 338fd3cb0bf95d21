"""Opaque content a client carries for us and hands back later (`encrypted_content`
of compaction and reasoning items): a payload Parlance wrote, authenticated so it
reads back only what it wrote itself.

A sealed token is URL-safe base64 of a 32-byte HMAC-SHA256 tag and the JSON of
`{"p": purpose, "v": payload}`. It is authenticated, not encrypted: the client can
decode what it already saw (its own conversation), but cannot forge or alter a
token, nor pass one sealed for one purpose (a reasoning item) as another (a
compaction). The key comes from the server (kept in its data directory, so tokens
outlive a restart).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from typing import Any

from parlance.core.errors import InvalidRequest

KEY_BYTES = 32
_TAG_BYTES = 32
INVALID = "invalid_encrypted_content"


class Sealer:
    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("a sealing key has at least 16 bytes")
        self._key = key

    @classmethod
    def ephemeral(cls) -> Sealer:
        """A key for this process only (a server without a data directory)."""
        return cls(secrets.token_bytes(KEY_BYTES))

    def seal(self, purpose: str, payload: Any) -> str:
        body = json.dumps({"p": purpose, "v": payload}, ensure_ascii=False,
                          separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(self._tag(body) + body).decode("ascii")

    def unseal(self, purpose: str, token: object, *, param: str) -> Any:
        """The payload sealed for `purpose`; a 400 naming `param` for anything else."""
        try:
            raw = base64.urlsafe_b64decode(token.encode("ascii") if isinstance(token, str)
                                           else b"")
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raw = b""
        tag, body = raw[:_TAG_BYTES], raw[_TAG_BYTES:]
        if len(tag) == _TAG_BYTES and hmac.compare_digest(tag, self._tag(body)):
            sealed = _decoded(body)  # (a key holder may have tagged anything)
            if isinstance(sealed, dict) and sealed.get("p") == purpose:
                return sealed.get("v")
        raise InvalidRequest(
            f"The encrypted content in '{param}' could not be read: it was not produced by "
            "this server (or by this server before its key changed), or it was altered.",
            param=param, code=INVALID)

    def _tag(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()


def _decoded(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None
