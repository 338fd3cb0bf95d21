"""Scoring labels through an upstream server (decisions, rerank's yes/no), from what an
OpenAI-compatible server returns: the top log-probabilities of the answer's first
token (`logprobs` + `top_logprobs` on chat completions; llama-server maps them to its
`n_probs`, vLLM and Parlance answer them as OpenAI does).

Each prompt is asked for one token, greedily, with OpenAI's most alternatives (20), and
each label is read among them: its log-probability is that of the alternative whose
text is the label (summed over alternatives of the same text). That is the label's
whole score when the label is one token, which is what Ollama and llamacpp-jev do on
any chat model. A label that is not among the alternatives (several tokens long, or
less likely than the 20) cannot be scored there, and a server that returns no
log-probabilities cannot score at all: both are refused (501), never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import replace

from parlance.core.errors import NotImplementedHere
from parlance.core.events import Event, Failed, TextDelta, TokenLogprob, Usage
from parlance.core.request import GenerationRequest
from parlance.core.scoring import PromptScores, ScoreRequest, Scores
from parlance.engines.base import Generation

TOP = 20  # OpenAI's largest top_logprobs (vLLM's default max_logprobs too)
Start = Callable[[GenerationRequest], Awaitable[Generation]]


async def score_first_tokens(start: Start, request: ScoreRequest, model: str) -> Scores:
    """Each prompt asked once, one after another (an upstream caches the shared context
    the first leaves, as the local engine does)."""
    results = []
    for prompt, labels in zip(request.generation.prompts, request.continuations,
                              strict=True):
        asked = replace(request.generation, prompts=(prompt,), n=1, max_tokens=1,
                        logprobs=TOP, echo=False, stop=(), speculative=False)
        first, usage = await _first_token(await start(asked))
        if first is None or not first.top:
            raise NotImplementedHere(
                f"The upstream server of model '{model}' returned no log-probabilities "
                "for the answer (it needs OpenAI's `logprobs` and `top_logprobs` on chat "
                "completions), so it cannot score labels.", param=request.param)
        results.append(PromptScores(_label_logprobs(first, labels, model, request.param),
                                    usage.prompt_tokens, usage.cached_tokens))
    return Scores(tuple(results))


async def _first_token(generation: Generation) -> tuple[TokenLogprob | None, Usage]:
    first: TokenLogprob | None = None
    usage: Usage | None = None
    try:
        async for event in generation:
            first = first or _logprob(event)
            if isinstance(event, Failed):
                raise event.error
            if isinstance(event, Usage):
                usage = event
    finally:
        generation.cancel()  # (a no-op once it ended)
    return first, usage or Usage(prompt_tokens=0, completion_tokens=0)


def _logprob(event: Event) -> TokenLogprob | None:
    if isinstance(event, TextDelta) and event.logprobs:
        return event.logprobs[0]
    return None


def _label_logprobs(first: TokenLogprob, labels: tuple[str, ...], model: str,
                    param: str) -> tuple[float, ...]:
    out = []
    for label in labels:
        found = [alt.logprob for alt in first.top if alt.token == label]
        if not found:
            raise NotImplementedHere(
                f"The label {label!r} is not among the {len(first.top)} most likely first "
                f"tokens of the answer that the upstream server of model '{model}' "
                "returned: through an upstream, only labels of one token each can be "
                "scored (this one is several tokens long, or less likely than those).",
                param=param)
        peak = max(found)
        out.append(peak + math.log(math.fsum(math.exp(x - peak) for x in found)))
    return tuple(out)
