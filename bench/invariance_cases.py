"""The logit harness of bench/batch_invariance.py: is a token's logits row the same
bit for bit however the engine came to evaluate it?

One token sequence (a prompt of ~330 tokens, then the greedy continuation the
reference found) is fed to a context again and again, teacher-forced, each time
another way: the prompt in other chunks, over a prefix kept, cut, copied or restored,
beside other sequences decoding or prefilling, its continuation verified as drafts
(several rows of one sequence in a step, some of them removed again). Every row
that predicts a token of the continuation is compared with the reference's (the
prompt in one batch, then one token a step alone). A layout is batch-invariant when
all 13 cases give identical rows.

`Layout` names a context's KV types and attention; `LayoutModel` is a `LlamaModel`
built with it, so the same harness measures layouts the product does not offer.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp
import numpy as np

from parlance.engines.llamacpp import invariant_attention
from parlance.engines.llamacpp.batch import Batch
from parlance.engines.llamacpp.model import ContextSettings, LlamaModel

GGML_TYPE_BF16 = 30  # ggml.h's enum value (the binding names no constant for it)
GGML_TYPES = {"f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16,
              "bf16": GGML_TYPE_BF16, "q8_0": llama_cpp.GGML_TYPE_Q8_0,
              "q5_1": llama_cpp.GGML_TYPE_Q5_1, "q4_0": llama_cpp.GGML_TYPE_Q4_0}


@dataclass(frozen=True, slots=True)
class Layout:
    """A KV cache layout: `k`/`v` ggml types by name, flash attention on or off, and
    the patched ggml's batch-invariant attention switch (invariant_attention.py) on or
    off while it runs."""

    k: str
    v: str
    flash: bool = True
    switch: bool = False

    @property
    def name(self) -> str:
        return (f"{self.k}/{self.v}" + ("" if self.flash else " no-fa")
                + (" switch" if self.switch else ""))

    @classmethod
    def parse(cls, text: str) -> Layout:
        """'f16/bf16', 'f16/f16 no-fa', 'f16/f16 switch'."""
        types, *rest = text.split()
        k, _, v = types.partition("/")
        if k not in GGML_TYPES or v not in GGML_TYPES or not set(rest) <= {"no-fa", "switch"}:
            raise ValueError(f"not a layout: {text!r} (types: {', '.join(GGML_TYPES)})")
        return cls(k, v, flash="no-fa" not in rest, switch="switch" in rest)

    @contextmanager
    def kernels(self) -> Iterator[None]:
        """The switch as this layout has it, for a measurement: models of several
        layouts live side by side, and the switch is one flag for the process."""
        if not self.switch:
            yield
            return
        switch = invariant_attention.switch()
        if switch is None:
            raise SystemExit("this llama-cpp-python was built without Parlance's attention "
                             "patch (make install builds it)")
        switch.hold()
        try:
            yield
        finally:
            switch.release()


class LayoutModel(LlamaModel):
    """The model with a context of `layout` instead of the settings' own types."""

    def __init__(self, path: Path, settings: ContextSettings, layout: Layout) -> None:
        self.layout = layout
        super().__init__(path, settings)

    def _context_params(self, settings: ContextSettings) -> llama_cpp.llama_context_params:
        params = super()._context_params(settings)
        params.type_k = GGML_TYPES[self.layout.k]
        params.type_v = GGML_TYPES[self.layout.v]
        params.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if self.layout.flash
                                  else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        return params


# -- feeding a sequence -----------------------------------------------------------------


@dataclass
class Other:
    """Another sequence in the same steps: one token a step (decoding), or `chunk` of its
    prompt a step (prefilling)."""

    seq: int
    tokens: list[int]
    chunk: int = 1
    at: int = 0  # its next position


@dataclass
class Feed:
    """How the harness evaluates the tokens: `seq` from position `start`, the prompt
    `prompt_chunk` tokens a step, the continuation `rows` a step (drafts: more than 1);
    `rewind` cells removed after each continuation step (rejected drafts)."""

    seq: int = 0
    start: int = 0
    prompt_chunk: int = 512
    rows: int = 1
    rewind: int = 0
    others: list[Other] = field(default_factory=list)


class Harness:
    def __init__(self, model: LlamaModel, tokens: list[int], n_prompt: int) -> None:
        self.model = model
        self.batch = Batch(model.settings.n_batch)
        self.tokens = tokens  # prompt + continuation
        self.n_prompt = n_prompt

    def close(self) -> None:
        self.batch.free()

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.model.memory, True)

    def evaluate(self, seq: int, tokens: list[int], start: int, chunk: int = 512) -> None:
        """Tokens into `seq`'s cache from `start`, no logits kept."""
        for at in range(0, len(tokens), chunk):
            self.batch.clear()
            for i, token in enumerate(tokens[at:at + chunk]):
                self.batch.add(token, start + at + i, seq, output=False)
            self._decode()

    def feed(self, plan: Feed) -> dict[int, list[np.ndarray]]:
        """The rows that predict the continuation, by position (a position evaluated
        twice, after a rewind, has two rows)."""
        rows: dict[int, list[np.ndarray]] = {}
        tokens, last = self.tokens, len(self.tokens) - 1  # the last token is never fed
        pos = plan.start
        while pos < last:
            prompt = pos < self.n_prompt
            theirs = sum(len(o.tokens[o.at:o.at + o.chunk]) for o in plan.others)
            count = min(plan.prompt_chunk if prompt else plan.rows,
                        (self.n_prompt if prompt else last) - pos,
                        self.batch.capacity - theirs)
            self.batch.clear()
            mine = []
            for i in range(count):
                p = pos + i
                output = p >= self.n_prompt - 1
                row = self.batch.add(tokens[p], p, plan.seq, output=output)
                if output:
                    mine.append((p, row))
            for other in plan.others:
                for token in other.tokens[other.at:other.at + other.chunk]:
                    self.batch.add(token, other.at, other.seq, output=other.chunk == 1)
                    other.at += 1
            self._decode()
            for p, row in mine:
                rows.setdefault(p, []).append(self.model.logits(row).copy())
            pos += count
            if not prompt and plan.rewind and pos < last:
                pos -= min(plan.rewind, count - 1)
                llama_cpp.llama_memory_seq_rm(self.model.memory, plan.seq, pos, -1)
        return rows

    def _decode(self) -> None:
        if self.batch.decode(self.model.ctx) != 0:
            raise RuntimeError("llama_decode failed")


def greedy_continuation(model: LlamaModel, prompt: list[int], count: int) -> list[int]:
    """The reference's own greedy tokens: the prompt in one batch, then a token a step."""
    harness = Harness(model, prompt, len(prompt))
    try:
        harness.clear()
        harness.evaluate(0, prompt[:-1], 0)
        out: list[int] = []
        token, pos = prompt[-1], len(prompt) - 1
        for _ in range(count):
            harness.batch.clear()
            harness.batch.add(token, pos, 0, output=True)
            harness._decode()
            token, pos = int(model.logits(0).argmax()), pos + 1
            out.append(token)
        return out
    finally:
        harness.close()


# -- the cases ------------------------------------------------------------------------


@dataclass
class Outcome:
    rows: int = 0
    identical: int = 0
    worst: float = 0.0

    @property
    def same(self) -> bool:
        return self.rows > 0 and self.rows == self.identical


Case = Callable[[Harness], dict[int, list[np.ndarray]]]


def _kept(h: Harness, keep: int, plan: Feed) -> dict[int, list[np.ndarray]]:
    """The prompt's first `keep` tokens cached by an earlier evaluation (which went on
    past them), the rest fed by `plan`."""
    h.clear()
    h.evaluate(plan.seq, h.tokens[:h.n_prompt], 0)
    llama_cpp.llama_memory_seq_rm(h.model.memory, plan.seq, keep, -1)
    plan.start = keep
    return h.feed(plan)


def _beside(h: Harness, count: int, plan: Feed, *, prefill: bool = False,
            others: list[list[int]]) -> dict[int, list[np.ndarray]]:
    """`count` other sequences decoding (their prompts evaluated first) or one
    prefilling, in every step of `plan`."""
    h.clear()
    for n in range(count):
        tokens = others[n]
        if prefill:  # a prompt as long as the slot holds, 32 tokens a step
            room = h.model.n_ctx - 8
            plan.others.append(Other(n + 1, (tokens * (room // len(tokens) + 1))[:room],
                                     chunk=32))
        else:
            h.evaluate(n + 1, tokens[:-1], 0)
            plan.others.append(Other(n + 1, tokens + tokens, at=len(tokens) - 1))
    return h.feed(plan)


def _moved(h: Harness, how: str) -> dict[int, list[np.ndarray]]:
    """The prompt (all but its last token) evaluated in stream 0, then copied to stream 1
    (`seq_cp`, how `n` choices fork) or saved, cleared and restored into stream 2 (how
    the prompt cache's tiers bring a prefix back); the rest fed there."""
    h.clear()
    keep = h.n_prompt - 1
    h.evaluate(0, h.tokens[:keep], 0)
    memory = h.model.memory
    if how == "copied":
        llama_cpp.llama_memory_seq_cp(memory, 0, 1, -1, -1)
        llama_cpp.llama_memory_seq_rm(memory, 0, -1, -1)
        target = 1
    else:
        ctx = h.model.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0)
        h.clear()
        target = 2
        if llama_cpp.llama_state_seq_set_data(ctx, buffer, written, target) == 0:
            raise RuntimeError("llama_state_seq_set_data failed")
    return h.feed(Feed(seq=target, start=keep))


def cases(others: list[list[int]]) -> dict[str, Case]:
    return {
        "prompt in chunks of 64": lambda h: _cold(h, Feed(prompt_chunk=64)),
        "prompt in chunks of 32": lambda h: _cold(h, Feed(prompt_chunk=32)),
        "prompt in chunks of 7": lambda h: _cold(h, Feed(prompt_chunk=7)),
        "cached prefix, last token evaluated alone": lambda h: _kept(
            h, h.n_prompt - 1, Feed()),
        "partial prefix (2/3 kept), rest in chunks of 64": lambda h: _kept(
            h, h.n_prompt * 2 // 3 + 5, Feed(prompt_chunk=64)),
        "decoding beside 1 other": lambda h: _beside(h, 1, Feed(), others=others),
        "decoding beside 3 others": lambda h: _beside(h, 3, Feed(), others=others),
        "beside another prompt's prefill": lambda h: _beside(
            h, 1, Feed(prompt_chunk=64), prefill=True, others=others),
        "prefix copied to another stream": lambda h: _moved(h, "copied"),
        "prefix saved and restored into another stream": lambda h: _moved(h, "restored"),
        "continuation as drafts, 4 rows a step": lambda h: _cold(h, Feed(rows=4)),
        "drafts of 5 rows, the last 3 rejected": lambda h: _cold(h, Feed(rows=5, rewind=3)),
        "drafts of 3 rows beside 2 others decoding": lambda h: _beside(
            h, 2, Feed(rows=3), others=others),
    }


def _cold(h: Harness, plan: Feed) -> dict[int, list[np.ndarray]]:
    h.clear()
    return h.feed(plan)


def compare(reference: dict[int, list[np.ndarray]],
            found: dict[int, list[np.ndarray]]) -> Outcome:
    outcome = Outcome()
    for pos, rows in found.items():
        expected = reference[pos][0]
        for row in rows:
            outcome.rows += 1
            if np.array_equal(row, expected):
                outcome.identical += 1
            else:
                outcome.worst = max(outcome.worst, float(np.abs(row - expected).max()))
    return outcome


def run_cases(model: LlamaModel, prompt: list[int], others: list[list[int]],
              continuation: int) -> dict[str, Outcome]:
    """Every case's rows against the reference's, in one context of `model` (4 slots)."""
    tokens = prompt + greedy_continuation(model, prompt, continuation)
    harness = Harness(model, tokens, len(prompt))
    try:
        harness.clear()
        reference = harness.feed(Feed())
        return {name: compare(reference, case(harness))
                for name, case in cases(others).items()}
    finally:
        harness.close()
