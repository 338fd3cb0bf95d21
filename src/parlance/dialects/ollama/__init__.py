"""Ollama's native API (`POST /api/chat`, `POST /api/generate`; the model endpoints and
embeddings live beside them), NDJSON streams ending in a `done: true` line.

`request.py` reads the bodies, `stream.py` encodes the NDJSON lines, `result.py` the
objects they and a `stream: false` answer share, `errors.py` the error envelope every
Ollama endpoint uses.

A call with no messages (no prompt) only loads its model, or with `keep_alive: 0`
unloads it (`Call.load_only`); `keep_alive` rules how long the model stays loaded
after the call (`Call.keep_alive`), `options.num_ctx` the context a cold model is
loaded with (`Call.context_length`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from parlance.core.accumulate import Completion
from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.core.messages import Message
from parlance.core.request import (
    ChatInput,
    GenerationRequest,
    PromptInput,
    TextInput,
)
from parlance.core.tools import ToolChoice
from parlance.dialects.base import Call, CallFacts, ErrorResponse, Framing, Incoming
from parlance.dialects.ollama import errors, request, result
from parlance.dialects.ollama.request import ChatRequest, CommonRequest, GenerateRequest
from parlance.dialects.ollama.stream import OllamaEncoder
from parlance.dialects.shared.wire import parse_body

# Ollama's API: every path under it that is not LM Studio's (`lmstudio.PATHS`)
PREFIX = "/api/"

render_error = errors.render_error


@dataclass(frozen=True, slots=True)
class OllamaCall(Call):
    received_ns: int  # when the call was parsed, for total_duration
    logprobs: bool
    truncate: bool = False  # drop the oldest turns when the chat overflows the context
    context: bool = False  # answer with `context` (generate, not raw)


def _common(req: CommonRequest, prompt: PromptInput, **fields: Any) -> GenerationRequest:
    """What both endpoints ask; `think` only matters through the chat template."""
    opts = req.opts
    sampling, chosen = opts.sampling()
    return GenerationRequest(
        model=req.model,
        prompts=(prompt,),
        sampling=sampling,
        sampling_set=chosen,
        max_tokens=opts.max_tokens(),
        stop=tuple(s for s in opts.stop or () if s),
        logprobs=req.top_logprobs if req.logprobs else None,
        response_format=request.response_format(req.format),
        reasoning=request.reasoning(req.think) if isinstance(prompt, ChatInput) else None,
        **fields,
    )


def _call(req: CommonRequest, generation: GenerationRequest, *, load_only: bool,
          **fields: Any) -> OllamaCall:
    return OllamaCall(generation, req.stream is not False, result.clock_ns(), req.logprobs,
                      context_length=req.opts.num_ctx,
                      keep_alive=request.keep_alive_seconds(req.keep_alive),
                      load_only=load_only, **fields)


class _Ollama:
    framing: Framing = "ndjson"
    generate = False

    def encoder(self, call: OllamaCall, served: CallFacts) -> OllamaEncoder:
        return OllamaEncoder(served.model, generate=self.generate, with_logprobs=call.logprobs,
                             final=lambda completion: self._final(call, served, completion))

    def render(self, call: OllamaCall, served: CallFacts, completion: Completion) -> dict[str, Any]:
        if call.load_only:
            return result.load_answer(served.model, self.generate, call.keep_alive == 0)
        if self.generate:
            return result.generate_answer(
                served.model, completion, ready_seconds=served.ready_seconds,
                received_ns=call.received_ns, with_logprobs=call.logprobs,
                context=_context(call, served, completion))
        return result.chat_answer(served.model, completion, ready_seconds=served.ready_seconds,
                                  received_ns=call.received_ns, with_logprobs=call.logprobs)

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return errors.render_error(error)

    def _final(self, call: OllamaCall, served: CallFacts, completion: Completion) -> dict[str, Any]:
        """The final line's fields after `done_reason`."""
        fields: dict[str, Any] = {}
        if self.generate and (context := _context(call, served, completion)):
            fields["context"] = context
        return fields | result.metrics(completion.usage, served.ready_seconds,
                                       call.received_ns)


def _context(call: OllamaCall, served: CallFacts, completion: Completion) -> list[int] | None:
    """`context`: the prompt's tokens and the answer's, which a later call may send
    back to continue from them."""
    if not call.context or not served.prompts:
        return None
    choice = completion.choices.get(0)
    answer = choice.token_ids if choice is not None and choice.token_ids else ()
    return [*served.prompts[0].token_ids, *answer]


class OllamaChat(_Ollama):
    """Ollama's chat (`POST /api/chat`): messages in, NDJSON lines out unless `stream`
    is false."""

    body_model = ChatRequest

    def parse(self, incoming: Incoming) -> OllamaCall:
        req = parse_body(self.body_model, incoming.body)
        specs = request.tools(req.tools)
        thread = request.messages(req.messages or [])
        generation = _common(req, ChatInput(thread), tools=specs,
                             tool_choice=ToolChoice("auto" if specs else "none"))
        return _call(req, generation, load_only=not thread, truncate=req.truncate is not False)

    def shorter(self, call: OllamaCall) -> OllamaCall | None:
        """The call without the conversation's oldest turn (`truncate`, on by default)."""
        prompt = call.request.prompts[0]
        if not call.truncate or not isinstance(prompt, ChatInput):
            return None
        thread = request.shorter(prompt.messages)
        if thread is None:
            return None
        return replace(call, request=replace(call.request, prompts=(ChatInput(thread),)))


class OllamaGenerate(_Ollama):
    """`POST /api/generate`: a prompt, through the chat template as a user turn (with
    `system` before it) unless `raw`; with `suffix`, fill-in-the-middle."""

    generate = True
    body_model = GenerateRequest

    def parse(self, incoming: Incoming) -> OllamaCall:
        req = parse_body(self.body_model, incoming.body)
        request.no_images(req.images, "images")
        if req.raw and (req.template or req.system or req.context):
            raise InvalidRequest("raw mode does not support template, system, or context",
                                 param="raw")
        if req.template:
            raise InvalidRequest("template: Go prompt templates are not supported here; the "
                                 "model's own chat template is used. Send raw: true with the "
                                 "prompt already formatted instead.", param="template",
                                 code="unsupported_value")
        text = req.prompt or ""
        prompt: PromptInput
        if req.suffix:
            prompt = TextInput(text=text, suffix=req.suffix)
        elif req.raw:
            prompt = TextInput(text=text)
        else:
            turns = [Message("system", req.system)] if req.system else []
            prompt = ChatInput((*turns, Message("user", text)),
                               prefix_ids=tuple(req.context or ()))
        if isinstance(prompt, TextInput) and req.format:
            raise InvalidRequest("format needs the model's chat template; it cannot be "
                                 "combined with raw or suffix.", param="format")
        generation = _common(req, prompt)
        return _call(req, generation, load_only=not text,
                     context=isinstance(prompt, ChatInput))
