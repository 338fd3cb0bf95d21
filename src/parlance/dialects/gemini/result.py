"""The GenerateContentResponse (non-stream body) and the pieces its stream shares:
parts, finish reasons, usage, logprobs, ids."""

from __future__ import annotations

import json
import secrets
from typing import Any

from parlance.core.accumulate import ChoiceResult, Completion, TextPart, ToolCallResult
from parlance.core.events import FinishReason, TokenLogprob, ToolsListed, Usage
from parlance.dialects.gemini.thoughts import signature

# A function-call turn ends with STOP on Gemini too, with this finishMessage.
_FINISH = {FinishReason.STOP: "STOP", FinishReason.LENGTH: "MAX_TOKENS",
           FinishReason.TOOL_CALLS: "STOP"}
CALLS_MADE = "Model generated function call(s)."


def new_response_id() -> str:
    return secrets.token_urlsafe(16)


def finish_fields(reason: FinishReason | None) -> dict[str, Any]:
    reason = reason or FinishReason.STOP
    fields: dict[str, Any] = {"finishReason": _FINISH[reason]}
    if reason is FinishReason.TOOL_CALLS:
        fields["finishMessage"] = CALLS_MADE
    return fields


def call_args(arguments: str) -> dict[str, Any]:
    """A call's `args` object; arguments that are not a JSON object are kept whole
    under `input` rather than lost (only an unconstrained model writes those)."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return {"input": arguments}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


def call_part(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"functionCall": {"id": call_id, "name": name, "args": call_args(arguments)}}


def usage_metadata(prompt_tokens: int, counts: Usage | None) -> dict[str, Any]:
    """Gemini counts the answer (`candidatesTokenCount`) and the thoughts
    (`thoughtsTokenCount`) apart; the total is both plus the prompt. Prompt tokens
    an earlier request left in the engine's cache are `cachedContentTokenCount`."""
    prompt = counts.prompt_tokens if counts is not None else prompt_tokens
    out: dict[str, Any] = {"promptTokenCount": prompt}
    total = prompt
    if counts is not None:
        out["candidatesTokenCount"] = counts.completion_tokens - counts.reasoning_tokens
        total += counts.completion_tokens
        if counts.reasoning_tokens:
            out["thoughtsTokenCount"] = counts.reasoning_tokens
        if counts.cached_tokens:
            out["cachedContentTokenCount"] = counts.cached_tokens
    out["totalTokenCount"] = total
    out["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
    return out


def logprobs_result(tokens: list[TokenLogprob]) -> dict[str, Any]:
    """`logprobsResult`: each step's chosen token and its alternatives."""
    return {
        "topCandidates": [{"candidates": [{"token": alt.token, "logProbability": alt.logprob}
                                          for alt in t.top]} for t in tokens],
        "chosenCandidates": [{"token": t.token, "logProbability": t.logprob or 0.0}
                             for t in tokens],
        "logProbabilitySum": sum(t.logprob or 0.0 for t in tokens),
    }


def parts(choice: ChoiceResult, show_thoughts: bool) -> list[dict[str, Any]]:
    """The choice's parts in the order they were made; the thoughts' signature rides
    on the first part after them."""
    out: list[dict[str, Any]] = []
    thoughts = ""
    for part in choice.parts:
        if isinstance(part, ToolsListed):
            continue
        if isinstance(part, TextPart) and part.kind == "reasoning":
            thoughts += part.text
            if show_thoughts and part.text:
                out.append({"text": part.text, "thought": True})
            continue
        if isinstance(part, TextPart):
            if not part.text:
                continue
            made: dict[str, Any] = {"text": part.text}
        elif isinstance(part, ToolCallResult):
            made = call_part(part.call_id, part.name, part.arguments)
        if thoughts:
            made["thoughtSignature"] = signature(thoughts)
            thoughts = ""
        out.append(made)
    if thoughts:  # thoughts and nothing after them
        if out and out[-1].get("thought"):
            out[-1]["thoughtSignature"] = signature(thoughts)
        elif not show_thoughts:
            out.append({"text": "", "thoughtSignature": signature(thoughts)})
    return out


def candidate(choice: ChoiceResult, show_thoughts: bool) -> dict[str, Any]:
    content: dict[str, Any] = {"role": "model"}
    made = parts(choice, show_thoughts)
    if made:
        content["parts"] = made
    out: dict[str, Any] = {"content": content, **finish_fields(choice.finish_reason),
                           "index": choice.index}
    if choice.logprobs is not None:
        out["logprobsResult"] = logprobs_result(choice.logprobs)
        if choice.logprobs:
            out["avgLogprobs"] = (out["logprobsResult"]["logProbabilitySum"]
                                  / len(choice.logprobs))
    return out


def response(response_id: str, model: str, prompt_tokens: int, completion: Completion,
             show_thoughts: bool, n: int = 1) -> dict[str, Any]:
    choices = completion.ordered_choices() or [ChoiceResult(i) for i in range(n)]
    return {"candidates": [candidate(c, show_thoughts) for c in choices],
            "usageMetadata": usage_metadata(prompt_tokens, completion.usage),
            "modelVersion": model, "responseId": response_id}
