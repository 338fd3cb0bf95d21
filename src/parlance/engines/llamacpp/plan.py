"""Turns a request's tools, response format and reasoning into what the engine
needs: the chat template's inputs and a `GuidePlan`. Whatever cannot be honoured
(an invalid schema, a reasoning setting the model has no switch for) is refused
here, before the response starts, naming the client's parameter."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import llguidance

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message
from parlance.core.request import GenerationRequest
from parlance.core.tools import ReasoningEffort, ToolSpec
from parlance.engines import grammar
from parlance.engines.llamacpp import family_render
from parlance.engines.llamacpp.guide import GuidePlan
from parlance.engines.llamacpp.pattern_probe import check_patterns
from parlance.engines.llamacpp.template import ChatTemplate
from parlance.engines.llamacpp.tool_prompt import (
    tool_schemas,
    with_builtin_tools,
    with_system_word,
    with_tools_described,
)
from parlance.engines.parsing.syntax import (
    SPECIAL_MARKERS,
    ReasoningMarkers,
    ToolSyntax,
)

_EFFORT_LEVELS = {ReasoningEffort.MINIMAL: "low", ReasoningEffort.LOW: "low",
                  ReasoningEffort.MEDIUM: "medium", ReasoningEffort.HIGH: "high",
                  ReasoningEffort.ON: "medium"}


def render_chat(template: ChatTemplate, request: GenerationRequest,
                messages: tuple[Message, ...]) -> str:
    """The prompt text: tools through the template when it renders them, else through
    the built-in tool prompt; the reasoning switch set as the request asks. A prefilled
    answer (`continue_final`) is rendered as llama.cpp's server does it: the turns before
    it with the generation prompt, then its text, so the model goes on from there
    whatever the template does with an assistant turn it did not write."""
    last = messages[-1] if messages else None
    if (request.continue_final and last is not None and last.role == "assistant"
            and not last.tool_calls):
        return _render(template, request, messages[:-1]) + last.content
    return _render(template, request, messages)


def _render(template: ChatTemplate, request: GenerationRequest,
            messages: tuple[Message, ...]) -> str:
    extra = _reasoning_switch(template, request)
    flags = template.format.thinking_flags
    if flags and request.reasoning is not None:  # Nemotron's `/think`, `/no_think`
        off = request.reasoning.effort is ReasoningEffort.NONE
        messages = with_system_word(messages, flags[1] if off else flags[0])
    tools = request.callable_tools
    has_tool_turns = any(m.tool_calls or m.role == "tool" for m in messages)
    if template.supports_tools:
        if tools:
            extra["tools"] = tool_schemas(tools)
        extra.update(family_render.template_vars(template.format.name, tools))
        return template.render(messages, **extra)
    if template.renders_calls and (tools or has_tool_turns):  # DeepSeek's: calls native
        return template.render(with_tools_described(messages, tools, template.call_syntax),
                               **extra)
    if tools or has_tool_turns:
        return template.render(with_builtin_tools(messages, tools), **extra)
    return template.render(messages, **extra)


def _reasoning_switch(template: ChatTemplate, request: GenerationRequest) -> dict[str, Any]:
    wanted = request.reasoning
    if wanted is None:
        return {}
    effort, switch = wanted.effort, template.thinking_switch
    off = effort is ReasoningEffort.NONE
    if switch == "enable_thinking":
        return {"enable_thinking": not off}
    if switch == "flags":  # a word in the system message (`_render` writes it)
        return {}
    if switch == "thinking":  # DeepSeek V3.1
        return {"thinking": not off}
    if switch == "reasoning_effort" and not off:
        return {"reasoning_effort": _EFFORT_LEVELS[effort]}
    if template.reasoning is None and off:
        return {}  # a model that never reasons already honours "none"
    if template.reasoning is not None and not off:
        return {}  # it always reasons; there is no level to set
    if wanted.best_effort:
        return {}  # the client takes the model as it is
    what = ("does not reason" if template.reasoning is None and switch is None
            else "cannot turn its reasoning off")
    raise InvalidRequest(f"This model {what}, so reasoning effort '{effort.value}' cannot "
                         "be honoured.", param=wanted.param, code="unsupported_value")


def build_plan(
    request: GenerationRequest,
    template: ChatTemplate,
    prompt_text: str,
    tokenizer: llguidance.LLTokenizer,
    n_vocab: int,
    literal: Callable[[str], str],
    marker_tokens: Callable[[str], list[int]] | None = None,
) -> GuidePlan | None:
    tools = request.callable_tools
    syntax = template.call_syntax if tools else None
    if template.tool_syntax.region == "recipient":  # Functionary v3.2 answers `all\n…`
        syntax = template.tool_syntax
    reasoning = template.reasoning
    fmt = request.response_format
    grammar.check_schemas(request)
    check_patterns(request, tokenizer)
    content_schema = None
    if fmt is not None:
        content_schema = fmt.schema if fmt.kind == "json_schema" else grammar.ANY_OBJECT
    start_in_reasoning = bool(reasoning and prompt_text.rstrip().endswith(reasoning.open))
    lead = start_in_reasoning  # the forced part follows the reasoning
    forced = region = None
    if syntax is not None and request.tool_choice.forced:
        parallel = request.parallel_tool_calls and request.tool_choice.mode == "required"
        forced = grammar.forced_calls_grammar(tools, syntax, parallel=parallel, literal=literal,
                                              lead=lead)
    elif syntax is not None and content_schema is not None:
        forced = grammar.forced_calls_grammar(tools, syntax, parallel=request.parallel_tool_calls,
                                              content_schema=content_schema, literal=literal,
                                              lead=lead)
    elif content_schema is not None:
        forced = grammar.schema_grammar(content_schema, lead=lead)
    elif syntax is not None and _region_guided(syntax, tools):  # else parsed, not guided
        region = grammar.region_grammar(tools, syntax, parallel=request.parallel_tool_calls,
                                        literal=literal)
    forced_param = fmt.param if fmt and not tools else "tools"
    plan = GuidePlan(
        syntax=syntax, reasoning=reasoning,
        tool_names=frozenset(t.name for t in tools),
        freeform=frozenset(t.name for t in tools if t.freeform),
        start_in_reasoning=start_in_reasoning,
        forced=_compile(forced, tokenizer, forced_param),
        region=_compile(region, tokenizer, "tools"),
        forced_param=forced_param,
        tokenizer=tokenizer, n_vocab=n_vocab,
        markup=template.format.markup, header_close=template.format.header_close,
        schemas={t.name: t.parameters for t in tools if not t.freeform},
        spelled=_spelled(template, reasoning, syntax, marker_tokens),
        stop_tokens=_single_tokens(template.format.stops, marker_tokens),
        **_budget(request, reasoning, marker_tokens),
    )
    return plan if plan.needed else None


def _region_guided(syntax: ToolSyntax, tools: Sequence[ToolSpec]) -> bool:
    """Whether a call region the model opens by itself is guided by a lazy grammar: JSON
    calls are; tagged and pythonic calls are parsed, and so is Llama 3's
    `<|python_tag|>` when a builtin tool may be called there in its own form."""
    if syntax.tagged is not None or syntax.region == "pythonic":
        return False
    return not (syntax.region == "python_tag"
                and any(t.name in family_render.LLAMA_BUILTIN_TOOLS for t in tools))


def _budget(request: GenerationRequest, reasoning: ReasoningMarkers | None,
            marker_tokens: Callable[[str], list[int]] | None) -> dict[str, Any]:
    """A reasoning budget, for a model that reasons: what the engine writes when it is
    spent, the end marker and the blank line thinking templates put before the answer
    (after the bare marker SmolLM2 with a thinking template ends its turn at once)."""
    budget = request.reasoning.budget_tokens if request.reasoning else None
    if budget is None or reasoning is None or marker_tokens is None:
        return {}
    end = tuple(marker_tokens(reasoning.close + "\n\n"))
    return {"reasoning_budget": budget, "reasoning_end": end}


def _spelled(template: ChatTemplate, reasoning: ReasoningMarkers | None,
             syntax: ToolSyntax | None,
             marker_tokens: Callable[[str], list[int]] | None) -> frozenset[int]:
    """The special tokens among the format's markers: the engine spells them in the
    text it parses (llama.cpp leaves a special token's text out)."""
    if marker_tokens is None:
        return frozenset()
    markers = set(template.format.markup)
    if reasoning is not None:
        markers |= {reasoning.open, reasoning.close}
    if syntax is not None:
        markers |= {m for m in (syntax.open, syntax.close, syntax.code_open) if m}
        written = repr(syntax)  # the markers inside a call (tags, Gemma 4's `<|"|>`)
        markers |= {m for m in SPECIAL_MARKERS if m in written}
    return _single_tokens(markers, marker_tokens)


def _single_tokens(markers: Iterable[str],
                   marker_tokens: Callable[[str], list[int]] | None) -> frozenset[int]:
    """The markers that are one token in this vocabulary, as token ids."""
    if marker_tokens is None:
        return frozenset()
    return frozenset(t[0] for m in markers if len(t := marker_tokens(m)) == 1)


def _compile(source: str | None, tokenizer: llguidance.LLTokenizer,
             param: str) -> llguidance.LLMatcher | None:
    if source is None:
        return None
    matcher = llguidance.LLMatcher(tokenizer, source, log_level=0)
    if matcher.is_error():
        raise InvalidRequest(f"This cannot be enforced as a grammar: {matcher.get_error()}",
                             param=param, code="invalid_schema")
    return matcher
