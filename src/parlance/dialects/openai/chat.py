"""OpenAI Chat Completions (`POST /v1/chat/completions`).

The stream, in OpenAI's order: a role chunk, content chunks, one finish chunk
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
from parlance.core.events import (
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallArgs,
    ToolCallStart,
)
from parlance.core.messages import Message, ToolCall, unanswered_result
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import ReasoningRequest
from parlance.dialects.base import Call, CallFacts, ErrorResponse, Frame, Framing, Incoming
from parlance.dialects.openai import tools as openai_tools
from parlance.dialects.openai.common import (
    ChunkEncoder,
    SamplingFields,
    new_id,
    now,
    token_spelling,
    usage_object,
)
from parlance.dialects.openai.errors import render_error
from parlance.dialects.openai.tools import ChatTool, EffortIn, ResponseFormatIn, ToolChoiceIn
from parlance.dialects.shared import tools as neutral_tools
from parlance.dialects.shared.wire import WireModel, parse_body


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


class ReasoningIn(WireModel):
    """`reasoning: {"effort": …}` (the Responses API's spelling, which some Chat
    clients send too), read like `reasoning_effort`."""

    effort: EffortIn | None = None


class ChatRequest(SamplingFields):
    messages: Annotated[list[MessageIn], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    tools: list[ChatTool] | None = None
    tool_choice: ToolChoiceIn | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormatIn | None = None
    reasoning_effort: EffortIn | None = None
    reasoning: ReasoningIn | None = None
    # vLLM's and llama-server's prefill: the last (assistant) message is continued
    # rather than answered; the upstream engine sends it, so Parlance reads it too.
    continue_final_message: bool = False
    add_generation_prompt: bool = True

    @model_validator(mode="after")
    def _top_logprobs_need_logprobs(self) -> ChatRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs to be true")
        return self

    def continues(self) -> bool:
        if not self.continue_final_message:
            return False
        if self.add_generation_prompt:
            raise InvalidRequest("continue_final_message needs add_generation_prompt false.",
                                 param="add_generation_prompt")
        if self.messages[-1].role != "assistant":
            raise InvalidRequest("continue_final_message needs the last message to be the "
                                 "assistant's.", param="continue_final_message")
        return True

    def reasoning_request(self) -> ReasoningRequest | None:
        nested = self.reasoning.effort if self.reasoning else None
        if self.reasoning_effort and nested and nested != self.reasoning_effort:
            raise InvalidRequest("reasoning_effort and reasoning.effort disagree; send one.",
                                 param="reasoning.effort")
        if self.reasoning_effort:
            return openai_tools.reasoning(self.reasoning_effort, "reasoning_effort")
        return openai_tools.reasoning(nested, "reasoning.effort")


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


def _conversation(wire: list[MessageIn]) -> tuple[Message, ...]:
    """The messages; a tool message answering no call of an earlier assistant message
    is refused, as OpenAI refuses it."""
    messages = tuple(_message(m, i) for i, m in enumerate(wire))
    unanswered = unanswered_result(messages)
    if unanswered is not None:
        i, call_id = unanswered
        raise InvalidRequest(f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                             "'tool_calls' of an earlier assistant message.",
                             param=f"messages[{i}].tool_call_id")
    return messages


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
    envelope_extra = {"usage": None}  # as OpenAI's: every chunk but the usage one says null
    usage_details = True

    def __init__(self, call: ChatCall, served: CallFacts) -> None:
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
        """Each choice's first chunk names the role, before any content of any choice,
        and carries nothing else (an empty `content` makes the Vercel AI SDK
        open an empty text part, before tool calls too)."""
        logprobs: dict[str, Any] | None = (
            {"content": [], "refusal": None} if self._logprobs else None)
        delta = {"role": "assistant"}
        return [self.chunk([self._choice(i, delta, logprobs)]) for i in range(self._choices)]

    def on_text(self, delta: TextDelta) -> list[Frame]:
        lp = None
        if delta.logprobs is not None:
            lp = {"content": logprob_content(delta.logprobs), "refusal": None}
        return [self.chunk([self._choice(delta.index, {"content": delta.text}, lp)])]

    def on_finish(self, finish: Finish) -> list[Frame]:
        choice = self._choice(finish.index, {}, None, finish.reason.value)
        if finish.stop_sequence is not None:
            choice["stop_reason"] = finish.stop_sequence  # vLLM's field: which stop matched
        return [self.chunk([choice])]

    def on_other(self, event: Event) -> list[Frame]:
        match event:
            case ReasoningDelta(text=text, index=index) if text:
                return [self.chunk([self._choice(index, {"reasoning_content": text})])]
            case ToolCallStart(call_id=call_id, name=name, index=index, call_index=call):
                call_delta = {"index": call, "id": call_id, "type": "function",
                              "function": {"name": name, "arguments": ""}}
                return [self.chunk([self._choice(index, {"tool_calls": [call_delta]})])]
            case ToolCallArgs(fragment=fragment, index=index, call_index=call) if fragment:
                call_delta = {"index": call, "function": {"arguments": fragment}}
                return [self.chunk([self._choice(index, {"tool_calls": [call_delta]})])]
        return []


def _render_choice(choice: ChoiceResult, with_logprobs: bool) -> dict[str, Any]:
    logprobs = None
    if with_logprobs:
        logprobs = {"content": logprob_content(choice.logprobs or []), "refusal": None}
    message: dict[str, Any] = {"role": "assistant", "content": choice.text, "refusal": None}
    if choice.tool_calls:
        message["content"] = choice.text or None
        message["tool_calls"] = [
            {"id": c.call_id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in choice.tool_calls
        ]
    if choice.reasoning:
        message["reasoning_content"] = choice.reasoning
    out = {
        "index": choice.index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": (choice.finish_reason.value if choice.finish_reason else "stop"),
    }
    if choice.stop_sequence is not None:
        out["stop_reason"] = choice.stop_sequence  # vLLM's field: which stop string matched
    return out


class OpenAIChat:
    framing: Framing = "sse"
    body_model = ChatRequest

    def parse(self, incoming: Incoming) -> ChatCall:
        req = parse_body(self.body_model, incoming.body)
        tools = neutral_tools.tool_specs([t.function for t in req.tools or ()],
                                        "tools[{i}].function")
        request = GenerationRequest(
            model=req.model or "",
            prompts=(ChatInput(_conversation(req.messages)),),
            sampling=req.sampling(),
            sampling_set=req.sampling_set(),
            max_tokens=req.max_completion_tokens or req.max_tokens,
            stop=req.stops(),
            logprobs=(req.top_logprobs or 0) if req.logprobs else None,
            n=req.n,
            tools=tools,
            tool_choice=openai_tools.chat_tool_choice(req.tool_choice, tools),
            parallel_tool_calls=req.parallel_tool_calls,
            response_format=openai_tools.response_format(req.response_format),
            reasoning=req.reasoning_request(),
            continue_final=req.continues(),
        )
        return ChatCall(request, req.stream, new_id("chatcmpl-"), now(),
                        req.include_usage(), req.logprobs)

    def encoder(self, call: ChatCall, served: CallFacts) -> ChatEncoder:
        return ChatEncoder(call, served)

    def render(self, call: ChatCall, served: CallFacts, completion: Completion) -> dict[str, Any]:
        return {
            "id": call.id, "object": "chat.completion", "created": call.created,
            "model": served.model,
            "choices": [_render_choice(c, call.logprobs) for c in completion.ordered_choices()],
            "usage": usage_object(completion.usage, details=True),
        }

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)
