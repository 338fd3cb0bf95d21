"""Time to first token of an editor's fill-in-the-middle after a small edit: what an
editor (llama.vim, llama.vscode) feels as latency.

An editor sends the lines around the cursor again at every keystroke: the same long
prefix (and extra files), a cursor line that grew by a character, the same suffix.
The engine keeps the evaluated prompt in its slots, so an edit evaluates only what
follows the change. Each line prints the first token's time of the edit cold (the
cache cleared first) and warm (right after the previous request), median of the runs.

Run: `.venv/bin/python bench/fim_edit.py [model.gguf] [runs]`. Without a model, the tiny
FIM-vocabulary GGUF of the tests (tests/support/fim_gguf.py: random weights, so only
the prompt's cost is meaningful). The machine may be noisy.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

from parlance.core.events import TextDelta
from parlance.core.request import ExtraFile, GenerationRequest, SamplingParams, TextInput
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.model import ContextSettings

LINE = "    total = total + values[index] * weights[index]  # accumulate\n"
FILE = "def helper(x):\n    return x * 2\n" * 20


def edit(keystrokes: int) -> GenerationRequest:
    prompt = TextInput(text="def score(values, weights):\n" + LINE * 40, infill=True,
                       cursor="    result = comp"[:8 + keystrokes], suffix="\n    return total\n",
                       extra=(ExtraFile(FILE, "helpers.py"),))
    return GenerationRequest("m", (prompt,), sampling=SamplingParams(temperature=0.0),
                             max_tokens=4)


async def first_token(engine: LlamaCppEngine, request: GenerationRequest) -> float:
    started = time.perf_counter()
    generation = await engine.start(request)
    first = None
    async for event in generation:
        if first is None and isinstance(event, TextDelta):
            first = time.perf_counter() - started
    return first if first is not None else time.perf_counter() - started


async def main(path: Path, runs: int) -> None:
    engine = LlamaCppEngine.load(path, ContextSettings(n_ctx=4096, n_threads=2, parallel=2))
    try:
        counting = await engine.start(edit(0))
        prompt_tokens = len(counting.prompts[0].token_ids)
        async for _ in counting:
            pass
        cold, warm = [], []
        for run in range(1, runs + 1):
            await asyncio.to_thread(engine.scheduler.clear_cache().wait)
            cold.append(await first_token(engine, edit(run)))
            await first_token(engine, edit(run))  # the editor's previous request...
            warm.append(await first_token(engine, edit(run + 1)))  # ...and the next key
        print(f"FIM edit, {prompt_tokens}-token prompt: first token cold "
              f"{1000 * statistics.median(cold):.0f} ms, after the previous keystroke "
              f"{1000 * statistics.median(warm):.0f} ms")
    finally:
        await engine.aclose()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].endswith(".gguf"):
        model = Path(sys.argv[1])
        count = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    else:
        from tests.support.fim_gguf import fim_gguf
        model = fim_gguf()
        count = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    asyncio.run(main(model, count))
