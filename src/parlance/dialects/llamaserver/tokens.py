"""`POST /tokenize`, `POST /detokenize` and `/apply-template`'s answer, as llama-server
shapes them (tools/server README, `handle_tokenize`).

`/tokenize`: `content` is a string or a mixed array of strings and token ids (absent:
no tokens); `add_special` (false) adds BOS before the first text, `parse_special`
(true) reads special-token text as those tokens, `with_pieces` (false) answers
`{"id", "piece"}` objects, the piece a string when its bytes are UTF-8, else the
bytes as an array. `/detokenize`: `tokens` → `{"content"}`. `/apply-template` takes a
chat completions body (read by OpenAI's chat dialect) and answers `{"prompt"}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, Field

from parlance.core.errors import ParlanceError
from parlance.core.tokens import DetokenizeRequest, Token, TokenizeRequest
from parlance.dialects.answer_base import Asked, RenderPrompt
from parlance.dialects.base import Call, ErrorResponse, Incoming
from parlance.dialects.shared.llama_server import render_error
from parlance.dialects.shared.wire import WireModel, parse_body

TokenId = Annotated[int, Field(ge=0)]


class TokenizeBody(WireModel):
    model: str | None = None
    content: str | list[str | TokenId] | None = None
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeBody(WireModel):
    model: str | None = None
    tokens: list[TokenId] = []


@dataclass(frozen=True, slots=True)
class TokenizeCall:
    request: TokenizeRequest
    with_pieces: bool


def _piece(raw: bytes) -> str | list[int]:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


class Tokenize:
    body_model = TokenizeBody

    def parse(self, incoming: Incoming) -> TokenizeCall:
        req = parse_body(self.body_model, incoming.body)
        content = req.content
        items: tuple[str | int, ...] = (
            () if content is None else (content,) if isinstance(content, str)
            else tuple(content))
        return TokenizeCall(TokenizeRequest(req.model, items, req.add_special,
                                            req.parse_special), req.with_pieces)

    def asked(self, call: TokenizeCall) -> Asked:
        return Asked(call.request.model, call.request)

    def render(self, call: TokenizeCall, tokens: tuple[Token, ...]) -> dict[str, Any]:
        if call.with_pieces:
            return {"tokens": [{"id": t.id, "piece": _piece(t.piece)} for t in tokens]}
        return {"tokens": [t.id for t in tokens]}

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)


class Detokenize:
    body_model = DetokenizeBody

    def parse(self, incoming: Incoming) -> DetokenizeRequest:
        req = parse_body(self.body_model, incoming.body)
        return DetokenizeRequest(req.model, tuple(req.tokens))

    def asked(self, call: DetokenizeRequest) -> Asked:
        return Asked(call.model, call)

    def render(self, call: DetokenizeRequest, text: str) -> dict[str, Any]:
        return {"content": text}

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)


class ChatParser(Protocol):
    """OpenAI's chat dialect, as `/apply-template` reads its body (given by the
    registry: no dialect imports another)."""

    @property
    def body_model(self) -> type[BaseModel]: ...

    def parse(self, incoming: Incoming) -> Call: ...


class ApplyTemplate:
    """A chat rendered by the model's template, not evaluated (its body is a chat
    completions body)."""

    def __init__(self, chat: ChatParser) -> None:
        self.chat = chat
        self.body_model = chat.body_model

    def parse(self, incoming: Incoming) -> Call:
        return self.chat.parse(incoming)

    def asked(self, call: Call) -> Asked:
        return Asked(call.request.model or None, RenderPrompt(call.request))

    def render(self, call: Call, prompt: str) -> dict[str, Any]:
        return {"prompt": prompt}

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)
