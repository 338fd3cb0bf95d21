"""OpenAI Chat Completions (`POST /v1/chat/completions`).

Stream contract (seed 002/004): a role chunk, content chunks, one finish chunk
per choice with an empty delta, the usage chunk (only with
`stream_options.include_usage`, carrying time_to_first_token in ms and
throughput_after_first_token in tokens/s), then `data: [DONE]`. `id`, `role`
and tool-call names are sent once, because the SDK's delta accumulator
concatenates every repeated string field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from parlance.core.accumulate import ChoiceResult, Completion
from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.core.events import Finish, TextDelta, TokenLogprob
from parlance.core.messages import Message, ToolCall
from parlance.core.request import ChatInput, GenerationRequest
from parlance.dialects.base import Call, ErrorResponse, Frame, Served
from parlance.dialects.openai_common import (
    ChunkEncoder,
    SamplingFields,
    new_id,
    now,
    render_error,
    token_spelling,
    usage_object,
)
from parlance.dialects.wire import WireModel, parse_body


class ContentPart(WireModel):
    type: str
    text: str | None = None


class FunctionCall(WireModel):
    name: str
    arguments: str = ""


class ToolCallIn(WireModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class MessageIn(WireModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class ChatRequest(SamplingFields):
    messages: Annotated[list[MessageIn], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _top_logprobs_need_logprobs(self) -> ChatRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs to be true")
        return self


def _text_of(content: str | list[ContentPart] | None, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for i, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise InvalidRequest(
                f"Content part type '{part.type}' is not supported by this model "
                "(text only: the model has no vision or audio input).",
                param=f"{where}.content[{i}]", code="unsupported_content")
        texts.append(part.text)
    return "".join(texts)


def _message(m: MessageIn, i: int) -> Message:
    if m.role == "tool" and not m.tool_call_id:
        raise InvalidRequest("Messages with role 'tool' need a tool_call_id.",
                             param=f"messages[{i}].tool_call_id")
    calls = tuple(ToolCall(c.id, c.function.name, c.function.arguments)
                  for c in m.tool_calls or ())
    return Message(m.role, _text_of(m.content, f"messages[{i}]"), m.name, calls, m.tool_call_id)


def _reject_unsupported(req: ChatRequest) -> None:
    if req.tools and req.tool_choice != "none":
        raise InvalidRequest("Tool calling is not supported by this server yet.",
                             param="tools", code="unsupported_parameter")
    kind = (req.response_format or {}).get("type", "text")
    if kind != "text":
        raise InvalidRequest(f"response_format type '{kind}' is not supported yet.",
                             param="response_format", code="unsupported_value")


@dataclass(frozen=True, slots=True)
class ChatCall(Call):
    id: str
    created: int
    include_usage: bool
    logprobs: bool


def logprob_content(tokens: tuple[TokenLogprob, ...] | list[TokenLogprob]) -> list[dict[str, Any]]:
    return [
        {
            "token": t.token,
            "logprob": t.logprob,
            "bytes": list(t.bytes),
            "top_logprobs": [
                {"token": token_spelling(a), "logprob": a.logprob, "bytes": list(a.bytes)}
                for a in t.top
            ],
        }
        for t in tokens
    ]


class ChatEncoder(ChunkEncoder):
    object_type = "chat.completion.chunk"
    envelope_extra = {"usage": None}  # seed 004: every chunk but the last says usage: null

    def __init__(self, call: ChatCall, served: Served) -> None:
        super().__init__(id=call.id, created=call.created, model=served.model,
                         include_usage=call.include_usage)
        self._logprobs = call.logprobs
        self._choices = call.request.n

    @staticmethod
    def _choice(index: int, delta: dict[str, Any], logprobs: Any = None,
                finish_reason: str | None = None) -> dict[str, Any]:
        return {"index": index, "delta": delta, "logprobs": logprobs,
                "finish_reason": finish_reason}

    def open(self) -> list[Frame]:
        """Each choice's first chunk names the role, before any content of any choice."""
        logprobs = {"content": [], "refusal": None} if self._logprobs else None
        delta = {"role": "assistant", "content": "", "refusal": None}
        return [self.chunk([self._choice(i, delta, logprobs)]) for i in range(self._choices)]

    def on_text(self, delta: TextDelta) -> list[Frame]:
        lp = None
        if delta.logprobs is not None:
            lp = {"content": logprob_content(delta.logprobs), "refusal": None}
        return [self.chunk([self._choice(delta.index, {"content": delta.text}, lp)])]

    def on_finish(self, finish: Finish) -> list[Frame]:
        return [self.chunk([self._choice(finish.index, {}, None, finish.reason.value)])]


def _render_choice(choice: ChoiceResult, with_logprobs: bool) -> dict[str, Any]:
    logprobs = None
    if with_logprobs:
        logprobs = {"content": logprob_content(choice.logprobs or []), "refusal": None}
    return {
        "index": choice.index,
        "message": {"role": "assistant", "content": choice.text, "refusal": None},
        "logprobs": logprobs,
        "finish_reason": (choice.finish_reason.value if choice.finish_reason else "stop"),
    }


class OpenAIChat:
    framing = "sse"

    def parse(self, body: Any) -> ChatCall:
        req = parse_body(ChatRequest, body)
        _reject_unsupported(req)
        request = GenerationRequest(
            model=req.model or "",
            prompts=(ChatInput(tuple(_message(m, i) for i, m in enumerate(req.messages))),),
            sampling=req.sampling(),
            sampling_set=req.sampling_set(),
            max_tokens=req.max_completion_tokens or req.max_tokens,
            stop=req.stops(),
            logprobs=(req.top_logprobs or 0) if req.logprobs else None,
            n=req.n,
        )
        return ChatCall(request, req.stream, new_id("chatcmpl-"), now(),
                        req.include_usage(), req.logprobs)

    def encoder(self, call: ChatCall, served: Served) -> ChatEncoder:
        return ChatEncoder(call, served)

    def render(self, call: ChatCall, served: Served, completion: Completion) -> dict[str, Any]:
        return {
            "id": call.id, "object": "chat.completion", "created": call.created,
            "model": served.model,
            "choices": [_render_choice(c, call.logprobs) for c in completion.ordered_choices()],
            "usage": usage_object(completion.usage),
        }

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)
