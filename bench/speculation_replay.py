"""The speculation planner replayed on recorded greedy answers: what it drafts, how
much of it is kept and what the steps cost (`step_cost.py`), in milliseconds of CPU.

Greedy text is the same with drafts and without (the batch-invariant layout), so a
draft's fate is known from the answer alone: it keeps the prefix that equals the
answer's next tokens. `record` runs bench/speculative.py's workloads through the
engine once, without drafts, and saves each stream's prompt tokens and answer; `replay`
then steps the planner over them as the scheduler does (the prompt steps first,
`PREFILL_WHILE_DECODING` prompt tokens a step beside decoding sequences, slots in
order) and prints per workload and stream count the decoding's modelled cost per
token without drafts and with them, their ratio (the modelled speedup), and the
drafts made and kept. `--trace code-edit:1` prints every step of one run: each
sequence's source, the match its draft stood on, the draft's length and what it kept.

`bench/speculation_counts.py counts` measures the same in the real engine; the replay
is what lets a planner change be weighed in a second on every workload.

Run: `.venv/bin/python bench/speculation_replay.py record [--tokens 128]` (loads the
model; a minute or two), then `.venv/bin/python bench/speculation_replay.py replay
[--trace code-edit:1]`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from parlance.engines.llamacpp.drafting import NgramDrafter
from parlance.engines.llamacpp.scheduler import PREFILL_WHILE_DECODING
from parlance.engines.llamacpp.speculation import (
    DEFAULT_SPECULATION,
    Candidate,
    SequenceDraft,
    Speculator,
)
from parlance.engines.llamacpp.step_cost import StepCost
from parlance.engines.metrics import EngineMetrics

RECORDED = Path.home() / ".cache" / "parlance-bench" / "speculation-answers.json"
BATCH = 512  # the engine's n_batch: rows a step may hold
N_CTX = 4096
END = -1  # an answer's natural end: no draft token equals it


@dataclass
class Stream:
    prompt: list[int]
    answer: list[int]  # its tokens, then END if it ended by itself
    max_tokens: int
    slot: int
    state: SequenceDraft | None = None
    evaluated: int = 0  # prompt tokens in its cache
    generated: list[int] = field(default_factory=list)

    @property
    def decoding(self) -> bool:
        return bool(self.generated) and not self.finished

    @property
    def finished(self) -> bool:
        return len(self.generated) >= len(self.answer) or (
            bool(self.generated) and self.generated[-1] == END)

    def limit(self) -> int:
        return min(self.max_tokens - len(self.generated) - 1,
                   N_CTX - len(self.prompt) - len(self.generated) - 2)


@dataclass
class Outcome:
    tokens: int = 0
    steps: int = 0
    cost: float = 0.0  # decoding rows priced by step_cost, in one-row steps
    drafts: int = 0
    drafted: int = 0
    kept: int = 0
    lengths: Counter[int] = field(default_factory=Counter)


def where(state: SequenceDraft) -> int | None:
    """Where the pending draft was copied from."""
    copy = getattr(state, "copy", None)
    if copy is None:  # a planner without copy-following
        return getattr(state, "source", None)
    return None if copy.cursor is None else copy.cursor.at


def replay(answers: list[dict[str, list[int]]], max_tokens: int, *, speculative: bool,
           cost: StepCost, trace: bool = False) -> Outcome:
    """Step the scheduler's loop over recorded answers (greedy: a draft keeps the prefix
    that equals the answer)."""
    speculator = Speculator(DEFAULT_SPECULATION, EngineMetrics())
    streams = [Stream(a["prompt"], a["answer"], max_tokens, slot)
               for slot, a in enumerate(answers)]
    if speculative:
        for s in streams:
            s.state = speculator.start(speculator.index(s.prompt), 1)[0]
    out = Outcome()
    step = 0
    while not all(s.finished for s in streams):
        step += 1
        decoding = [s for s in streams if s.decoding]
        candidates = [Candidate(s.slot, s.state, s.limit() if s.state else 0, s.generated,
                                lambda tokens: tokens) for s in decoding]
        room = BATCH - len(decoding)
        drafts = (speculator.plan(candidates, room) if any(s.state for s in decoding)
                  else [[] for _ in decoding])
        rows = [1 + len(d) for d in drafts]
        if decoding:
            out.steps += 1
            out.cost += cost.batch([s.slot for s in decoding], rows)
        notes = []
        for s, draft in zip(decoding, drafts, strict=True):
            truth = s.answer[len(s.generated):]
            kept = 0
            while kept < len(draft) and kept < len(truth) and draft[kept] == truth[kept]:
                kept += 1
            emitted = truth[:kept + 1]
            s.generated += emitted
            if draft:
                kept = min(kept, len(emitted) - 1) if emitted[-1] == END else kept
                assert s.state is not None
                if trace:
                    notes.append(f"s{s.slot}@{len(s.generated) - len(emitted)} "
                                 f"from {where(s.state)} m{s.state.match} "
                                 f"{kept}/{len(draft)}")
                speculator.record(s.state, len(draft), kept)
                out.drafts += 1
                out.drafted += len(draft)
                out.kept += kept
                out.lengths[len(draft)] += 1
            elif trace and s.state is not None:
                notes.append(f"s{s.slot}@{len(s.generated) - 1} -")
        budget = BATCH - sum(rows)
        budget = min(budget, PREFILL_WHILE_DECODING) if decoding else budget
        for s in streams:
            if s.generated or budget == 0:
                continue
            count = min(budget, len(s.prompt) - s.evaluated)
            budget -= count
            s.evaluated += count
            if s.evaluated == len(s.prompt):
                s.generated.append(s.answer[0])
        if trace and notes:
            print(f"    step {step}: " + "; ".join(notes))
    out.tokens = sum(len([t for t in s.generated if t != END]) for s in streams)
    return out


def record(args: argparse.Namespace) -> None:
    """Each workload's streams through the engine without drafts: prompt tokens (as the
    engine rendered them) and greedy answers."""
    import asyncio

    import speculation_counts as counts

    from parlance.core.events import Finish, FinishReason
    from parlance.engines.llamacpp import LlamaCppEngine
    from parlance.engines.llamacpp.model import ContextSettings

    prompts: list[list[int]] = []
    original = Speculator.index

    def index(self: Speculator, prompt: list[int]) -> NgramDrafter:
        prompts.append(list(prompt))
        return original(self, prompt)

    Speculator.index = index  # type: ignore[method-assign]

    async def main() -> dict[str, object]:
        settings = ContextSettings(n_ctx=counts.N_CTX, n_threads=args.threads,
                                   parallel=counts.SLOTS, batch_invariant=True)
        engine = await asyncio.to_thread(LlamaCppEngine.load, counts.PATH, settings,
                                         speculative=DEFAULT_SPECULATION)
        saved: dict[str, object] = {"tokens": args.tokens, "runs": {}}
        try:
            for workload in args.workloads.split(","):
                for streams in (int(s) for s in args.streams.split(",")):
                    await engine.clear_cache()
                    prompts.clear()
                    # Indexed (so the prompt is seen) but never drafted: the header's
                    # opt-out is per request, so drafts are turned off in the planner.
                    generations = [await engine.start(counts.request(text, args.tokens, True))
                                   for text in counts.prompts(workload, streams)]
                    answers = []
                    for prompt, generation in zip(prompts, generations, strict=True):
                        async for event in generation:
                            if isinstance(event, Finish):
                                tokens = list(event.token_ids or ())
                                end = [END] if event.reason != FinishReason.LENGTH else []
                                answers.append({"prompt": prompt, "answer": tokens + end})
                    saved["runs"][f"{workload}:{streams}"] = answers  # type: ignore[index]
                    print(f"{workload} × {streams}: recorded", flush=True)
        finally:
            await engine.aclose()
        return saved

    # The planner drafts nothing, so the answers are the plain greedy ones.
    from parlance.engines.llamacpp import speculation
    speculation.Speculator.plan = (  # type: ignore[method-assign]
        lambda self, candidates, room, **kw: [[] for _ in candidates])
    saved = asyncio.run(main())
    args.file.parent.mkdir(parents=True, exist_ok=True)
    args.file.write_text(json.dumps(saved))
    print(f"saved {args.file}")


def replay_all(args: argparse.Namespace) -> None:
    saved = json.loads(args.file.read_text())
    cost = StepCost()
    print(f"replay of {args.file} ({saved['tokens']} tokens a stream); cost per token in "
          f"one-row steps (step_cost.StepCost {cost})")
    trace = args.trace
    for key, answers in saved["runs"].items():
        off = replay(answers, saved["tokens"], speculative=False, cost=cost)
        if trace == key:
            print(f"{key} trace:")
        on = replay(answers, saved["tokens"], speculative=True, cost=cost,
                    trace=trace == key)
        lengths = " ".join(f"{n}:{c}" for n, c in sorted(on.lengths.items()))
        print(f"  {key:12} off {off.cost / off.tokens:.3f}  drafts {on.cost / on.tokens:.3f}"
              f"  → {off.cost / off.tokens / (on.cost / on.tokens):.3f}×  "
              f"steps {on.steps} (off {off.steps}), kept {on.kept}/{on.drafted} in "
              f"{on.drafts} drafts; lengths {lengths or '–'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("record", "replay"))
    parser.add_argument("--file", type=Path, default=RECORDED)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workloads", default="code-edit,json,summary,prose")
    parser.add_argument("--streams", default="1,8")
    parser.add_argument("--trace", default="", help="workload:streams, e.g. code-edit:1")
    args = parser.parse_args()
    if args.what == "record":
        sys.path.insert(0, str(Path(__file__).parent))
        record(args)
    else:
        replay_all(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
