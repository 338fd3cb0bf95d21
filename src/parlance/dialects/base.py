"""The contract between a dialect and the one generic handler."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from parlance.core.accumulate import Completion
from parlance.core.errors import ParlanceError
from parlance.core.events import Event
from parlance.core.prompts import PromptInfo
from parlance.core.request import GenerationRequest
from parlance.core.stored import StoredResponse

DONE = "[DONE]"
# How the transport writes frames: SSE events, NDJSON lines, or one JSON document
# written as it is made ("json": each frame is a piece of its text, such as Gemini's
# streamed array `[`, `{…}`, `,{…}`, `]`; an idle stream sends whitespace)
Framing = Literal["sse", "ndjson", "json"]
# The content type a stream of each framing is sent as (and documented as)
MEDIA_TYPES: dict[Framing, str] = {"sse": "text/event-stream; charset=utf-8",
                                   "ndjson": "application/x-ndjson",
                                   "json": "application/json; charset=utf-8"}


@dataclass(frozen=True, slots=True)
class Frame:
    """One stream frame: a JSON-able payload (or a raw string such as `[DONE]`)."""

    data: Any
    event: str | None = None


@dataclass(frozen=True, slots=True)
class Incoming:
    """A request as a dialect reads it: the decoded JSON body, and the URL's path
    parameters and query (an API may put the model or the stream's framing there, as
    Gemini's `models/{model}:streamGenerateContent?alt=sse` does)."""

    body: Any
    path: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, error: ParlanceError, status: int, body: dict[str, Any]) -> ErrorResponse:
        """The HTTP-level headers every dialect sends with an error (Retry-After when
        the error says when to retry) added to the dialect's own status and body."""
        headers = {}
        if error.retry_after is not None:
            headers["retry-after"] = str(max(1, round(error.retry_after)))
        return cls(status, body, headers)


@dataclass(frozen=True, slots=True)
class Call:
    """A parsed request: the neutral request plus what the dialect must remember."""

    request: GenerationRequest
    stream: bool
    # The context a cold model is loaded with for this call (LM Studio's context_length)
    context_length: int | None = field(default=None, kw_only=True)
    # Seconds the model stays loaded once idle after this call (Ollama's keep_alive):
    # 0 unloads it as soon as it is idle, inf never; None: the server's rule (the JIT TTL)
    keep_alive: float | None = field(default=None, kw_only=True)
    # The call only loads its model, or with keep_alive 0 unloads it, and generates
    # nothing (Ollama's empty messages or prompt): the answer is `render` of an empty
    # Completion, one JSON object even when `stream` is set
    load_only: bool = field(default=False, kw_only=True)
    # The client asked to be shown prompt processing where its API has no event for it
    # (the X-Parlance-Progress header): an encoder may then send a frame of its own
    # naming for `PromptProgress`; without it, the API's own stream and nothing else
    progress: bool = field(default=False, kw_only=True)
    # This call's stream is framed so instead of as its dialect's are (Gemini's stream
    # is SSE with `alt=sse` in the URL, else one JSON array)
    framing: Framing | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What the handler tells the dialect of one call, learned while starting its
    generation: the model id to echo, its prompts, how long its model took."""

    model: str  # the id the client asked for (aliases are echoed as sent)
    prompts: tuple[PromptInfo, ...]
    load_seconds: float | None = None  # this call loaded the model, in so many seconds
    # How long this call waited for its model to be ready: its load, or finding it loaded
    ready_seconds: float = 0.0


class Encoder(Protocol):
    def open(self) -> list[Frame]: ...

    def feed(self, event: Event) -> list[Frame]: ...

    def close(self) -> list[Frame]:
        """The engine stream ended normally."""

    def fail(self, error: ParlanceError) -> list[Frame]:
        """The stream must end early with this error, by the dialect's contract."""


@runtime_checkable
class StatefulEncoder(Encoder, Protocol):
    """The encoder of a `Stateful` dialect, which also says what its stream amounts to."""

    def outcome(self) -> dict[str, Any]:
        """The response to store once the stream is over: the one its end announced,
        or, for a stream that never reached its end (the client left), the response
        so far as the dialect keeps a cut-short one."""


def outcome(encoder: Encoder) -> dict[str, Any]:
    """What a stateful dialect's stream amounts to. The server holds every encoder as
    an `Encoder`; a `Stateful` dialect's are `StatefulEncoder`s by its contract."""
    if not isinstance(encoder, StatefulEncoder):
        raise TypeError(f"{type(encoder).__name__} is not a StatefulEncoder: a Stateful "
                        "dialect's encoder must report its outcome")
    return encoder.outcome()


# A dialect's own Call subclass: what `parse` returns is what the others take back.
C = TypeVar("C", bound=Call)
C_in = TypeVar("C_in", bound=Call, contravariant=True)


class Dialect(Protocol[C]):
    framing: Framing

    @property
    def body_model(self) -> type[BaseModel]:
        """The pydantic model `parse` validates the body with: also what the server's
        OpenAPI document says the body is, so the two cannot disagree."""

    def parse(self, incoming: Incoming) -> C: ...

    def encoder(self, call: C, served: CallFacts) -> Encoder: ...

    def render(self, call: C, served: CallFacts, completion: Completion) -> dict[str, Any]: ...

    def render_error(self, error: ParlanceError) -> ErrorResponse: ...


@runtime_checkable
class Stateful(Protocol[C]):
    """A dialect whose calls continue stored conversations and are stored themselves.
    Pure like every dialect: the server does the loading and saving.
    `stored_kind` keeps each API's stored conversations apart."""

    stored_kind: str

    def encoder(self, call: C, served: CallFacts) -> StatefulEncoder: ...

    def previous_id(self, call: C) -> str | None: ...

    def continued(self, call: C, previous: StoredResponse) -> C: ...

    def record(self, call: C, response: dict[str, Any]) -> StoredResponse | None:
        """What to store of this response; None when the client asked not to."""

    def cancelled(self, response: dict[str, Any]) -> dict[str, Any]:
        """The response as stored when its client left before the end."""


@runtime_checkable
class SocketMode(Protocol[C]):
    """A dialect that also speaks over a WebSocket (Responses' WebSocket mode): each
    client message asks for one streamed call, whose frames go out as messages."""

    def socket_call(self, message: Any) -> C | None:
        """The call a decoded client message asks for (`InvalidRequest` otherwise);
        None for a message that needs no answer."""

    def prepares_only(self, call: C) -> bool:
        """The call only records its input for later calls (no generation, no output)."""

    def socket_event(self, call: C, frame: Frame) -> dict[str, Any] | None:
        """The message a stream frame becomes (None: not sent, like `[DONE]`)."""

    def socket_error(self, error: ParlanceError) -> dict[str, Any]:
        """The message refusing a client message (its stream never started)."""

    def remembered(self, call: C, response: dict[str, Any]) -> StoredResponse:
        """What the connection keeps of a response to continue from, stored or not."""


@runtime_checkable
class Backgrounds(Protocol[C_in]):
    """A dialect whose calls may run without their client (Responses `background`):
    the server stores the response at each change of status and lets it be polled,
    followed and cancelled."""

    def in_background(self, call: C_in) -> bool: ...

    def progress(self, frame: Frame) -> dict[str, Any] | None:
        """The response a frame announces while it is unfinished (queued, running)."""

    def interrupted(self, response: dict[str, Any]) -> dict[str, Any]:
        """The response as stored when the server stopped before it finished."""


@runtime_checkable
class Truncating(Protocol[C]):
    """A dialect whose clients allow dropping the oldest turns when the prompt
    overflows the context (Responses `truncation: "auto"`)."""

    def shorter(self, call: C) -> C | None:
        """The call without its oldest turn; None when nothing may be dropped."""


@runtime_checkable
class StreamsByRoute(Protocol):
    """A dialect whose route, not its body, says whether the answer streams (Gemini's
    `:streamGenerateContent` beside `:generateContent`); `Call.framing` then says how."""

    streaming: bool


@runtime_checkable
class Pings(Protocol):
    """A dialect whose streams keep alive with an event of its own while the engine is
    silent (Anthropic's `ping`) instead of an SSE comment."""

    ping: Frame


@runtime_checkable
class ShowsProgress(Protocol):
    """An encoder whose stream has a frame that legitimately shows the response is alive
    while the engine is silent (a long prompt being evaluated): clients whose idle
    timer counts only data lines (not SSE comments) would otherwise give up. `idle`
    is asked each time the stream has been silent for the keepalive interval; None
    there means this stream has no such frame now (an SSE comment goes instead)."""

    def idle(self) -> Frame | None: ...


@runtime_checkable
class ReportsLoading(Protocol):
    """A dialect whose clients are shown a cold model being loaded (LM Studio's
    `model_load.*` events and `model_load_time_seconds`), so the load happens
    inside the response instead of before it."""

    reports_model_load: bool
