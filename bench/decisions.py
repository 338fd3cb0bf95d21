"""What a decision costs beside the prompt's own evaluation (issue 43's target: 1.2x).

One choice question with 4 labels of several tokens each, after a context of about
300 tokens, on SmolLM2: the decision (`engine.score`: the prompt evaluated once, its
cells copied to 3 more slots, the 4 labels forced in one batch) against the same
prompt evaluated alone through the engine (`max_tokens=0`: prefill, nothing decoded).
Both cold (the cache cleared before each run), alternating, median of the runs.

Run: `.venv/bin/python bench/decisions.py [runs]`. The machine may be noisy; a
number from a busy machine says little.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from dataclasses import replace

from parlance.core import decisions as d
from parlance.engines.llamacpp.engine import LlamaCppEngine
from parlance.engines.llamacpp.model import ContextSettings
from parlance.models.registry import DEFAULT_MODEL, builtin_registry

LABELS = ("billing department", "shipping and delivery", "technical support",
          "account security")
SENTENCE = ("The customer wrote that the order placed last Tuesday arrived with a cracked "
            "screen, that the replacement was promised within three days, and that ")


def decision(engine: LlamaCppEngine) -> d.Decision:
    question = d.Question(d.Kind.CHOICE, "Which team should handle this ticket?",
                          tuple(d.Option(label) for label in LABELS))
    context = SENTENCE
    while True:  # grow the context to about 300 prompt tokens
        request = d.score_request(d.Decision("m", context, (question,)))
        text = engine.preparation.chat_text(request.generation.prompts[0],
                                            request.generation)
        if len(engine.model.tokenize(text or "", add_special=True,
                                     parse_special=True)) >= 300:
            return d.Decision("m", context, (question,))
        context += SENTENCE


async def cold(engine: LlamaCppEngine, work) -> float:
    await asyncio.to_thread(engine.scheduler.clear_cache().wait)
    started = time.perf_counter()
    await work()
    return time.perf_counter() - started


async def main(runs: int) -> None:
    path = builtin_registry()[DEFAULT_MODEL].locate()
    engine = LlamaCppEngine.load(path, ContextSettings(n_ctx=2048, n_threads=2, parallel=4))
    try:
        chosen = decision(engine)
        request = d.score_request(chosen)
        prefill = replace(request.generation, max_tokens=0)

        async def evaluate() -> None:
            async for _ in await engine.start(prefill):
                pass

        async def decide() -> None:
            await engine.score(request)

        scores = await engine.score(request)
        tokens = scores.prompts[0].prompt_tokens
        times: dict[str, list[float]] = {"prompt": [], "decision": []}
        for _ in range(runs):
            times["prompt"].append(await cold(engine, evaluate))
            times["decision"].append(await cold(engine, decide))
        prompt, decided = (statistics.median(times[k]) for k in ("prompt", "decision"))
        labels = [len(engine.model.tokenize(label, add_special=False, parse_special=False))
                  for label in LABELS]
        print(f"decision, 4 labels ({'+'.join(map(str, labels))} tokens) after a "
              f"{tokens}-token prompt: prompt alone {1000 * prompt:.0f} ms, decision "
              f"{1000 * decided:.0f} ms, ratio {decided / prompt:.2f} (target <= 1.2)")
    finally:
        await engine.aclose()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
