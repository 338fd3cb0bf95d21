"""The neutral generation request every dialect parses into."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from parlance.core.messages import Message
from parlance.core.tools import (
    ApprovedCall,
    ReasoningRequest,
    ResponseFormat,
    ToolChoice,
    ToolServerRef,
    ToolSpec,
)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling knobs; `temperature == 0` means greedy and deterministic."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int = 64  # tokens the penalties look back over; 0: none, -1: the context
    logit_bias: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class ChatInput:
    """A conversation to render through the model's chat template. `prefix_ids`: tokens
    that come before the rendered conversation (Ollama's `context`, the tokens of an
    earlier prompt and answer sent back to continue from them)."""

    messages: tuple[Message, ...]
    prefix_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ExtraFile:
    """A file an editor sends as context for fill-in-the-middle (llama.cpp's
    `input_extra`)."""

    text: str
    filename: str = "tmp"


@dataclass(frozen=True, slots=True)
class TextInput:
    """A raw prompt: text, or token ids the client already tokenized.

    `suffix` asks for fill-in-the-middle between prompt and suffix. `infill` lays it
    out as llama.cpp's `/infill` does: `extra` files first (repo-level, with the
    model's file-separator tokens where it has them), the prefix cut to its last part
    and the suffix to its first where they are long, `cursor` (the text from the
    prefix's end to the cursor) kept whole after the prefix.
    """

    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    suffix: str | None = None
    infill: bool = False
    extra: tuple[ExtraFile, ...] = ()
    cursor: str = ""


PromptInput = ChatInput | TextInput


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """What to generate. `prompts` holds one entry per choice group.

    Chat requests have exactly one prompt; legacy completions may send several.
    Each prompt gets `n` choices; engines number them prompt-major, so choice
    `index` = prompt * n + k, the order every dialect reports them in.
    """

    model: str
    prompts: tuple[PromptInput, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    # max_tokens must fit beside the prompt, else the request is refused (ContextOverflow),
    # instead of being a ceiling the end of the context may cut short: for a dialect
    # that makes room by dropping old turns (a compaction's summary must be whole).
    strict_max_tokens: bool = False
    # A last assistant message is the start of the answer, which continues it (Anthropic's
    # prefill; the output does not repeat it) instead of a finished turn.
    continue_final: bool = False
    # False: the engine decodes this request without speculative drafts even when it
    # speculates (the output is the same either way; this trades its speed for the
    # rows drafts would take from other requests' steps)
    speculative: bool = True
    stop: tuple[str, ...] = ()
    logprobs: int | None = None  # None: off; k >= 0: sampled token plus top-k alternatives
    echo: bool = False
    n: int = 1
    sampling_set: frozenset[str] = frozenset()  # sampling fields the client set explicitly
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    reasoning: ReasoningRequest | None = None  # None: the model's default
    # Tools the server runs itself; the server turns them into `tools` before an
    # engine sees the request (engines never run tools).
    tool_servers: tuple[ToolServerRef, ...] = ()
    # Calls to those tools that the client approved since the last turn: they run
    # before the model is called.
    approved_calls: tuple[ApprovedCall, ...] = ()

    @property
    def callable_tools(self) -> tuple[ToolSpec, ...]:
        """The tools the model may call under `tool_choice`."""
        choice = self.tool_choice
        if choice.mode == "none":
            return ()
        if choice.mode == "named":
            return tuple(t for t in self.tools if t.name == choice.name)
        return self.tools


def with_sampling_defaults(
    request: GenerationRequest, defaults: Mapping[str, Any]
) -> GenerationRequest:
    """Fill sampling fields the client did not set from a preset's defaults."""
    unset = {k: v for k, v in defaults.items() if k not in request.sampling_set}
    if not unset:
        return request
    return replace(request, sampling=replace(request.sampling, **unset))


def with_preset_tool_choice(request: GenerationRequest, choice: str | None
                            ) -> GenerationRequest:
    """A preset's `tool_choice` ("required" or a tool's name) on a turn's first step: the
    request offers tools, leaves `tool_choice` auto and its conversation ends with the
    user's message. An agent's model that will not call tools by itself then acts on
    each instruction, and answers the results as it likes, so the agent's loop ends. A
    name the request does not offer forces nothing."""
    if not choice or not request.tools or request.tool_choice.mode != "auto":
        return request
    if len(request.prompts) != 1 or not isinstance(request.prompts[0], ChatInput):
        return request
    messages = request.prompts[0].messages
    if not messages or messages[-1].role != "user":
        return request
    if choice == "required":
        return replace(request, tool_choice=ToolChoice("required"))
    if any(tool.name == choice for tool in request.tools):
        return replace(request, tool_choice=ToolChoice("named", choice))
    return request
