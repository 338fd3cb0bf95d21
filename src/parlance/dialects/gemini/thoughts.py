"""`thoughtSignature`: the opaque token Gemini puts on the first part after a
model's thoughts, which clients hand back with the turn (Gemini CLI keeps it on its
function calls even where it drops the thought parts). Parlance's carries the thoughts
themselves, so a turn replayed without its thought parts still gives the model its
reasoning. Not sealed: it holds nothing the client was not shown or could not write
into a thought part itself. Standard base64, as Google's are; read back in either
alphabet (the Python SDK returns it URL-safe). A signature Parlance did not write
(another server's, Gemini CLI's `skip_thought_signature_validator`) is ignored."""

from __future__ import annotations

import base64
import binascii

_MARK = b"parlance-thought:"


def signature(reasoning: str) -> str:
    return base64.b64encode(_MARK + reasoning.encode()).decode("ascii")


def reasoning_of(signature: str) -> str | None:
    """The thoughts a signature of Parlance's carries; None for any other string."""
    text = signature.strip().replace("-", "+").replace("_", "/")
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw.startswith(_MARK):
        return None
    try:
        return raw[len(_MARK):].decode()
    except UnicodeDecodeError:
        return None
