"""The measurements behind the llama.cpp engine's design choices, in one run.

Each line prints the two sides and their ratio:

* **stream range** – 4 sequences decoded in KV streams 0–3 vs. 0,5,10,15: llama.cpp
  attends over the whole range of streams a batch touches (why `slots.py` gives new
  sequences the lowest free slot).
* **prefix copy** – copying a cached sequence into another KV stream
  (`llama_memory_seq_cp`, a whole stream buffer) vs. evaluating a 30-token prefix
  (why `slots.py` copies a prefix only when that saves 4 tokens or more).
* **greedy sampling** – argmax over the logits row vs. llama.cpp's greedy sampler
  chain, per token (why `sampler.py` has a greedy fast path).
* **logits row** – reading the sampled row as a numpy array right after a decode,
  with `np.ctypeslib.as_array` over llama-cpp-python's binding vs. `LogitsRows`'
  cached view (why `logits.py` exists).
* **batch neighbours** – the largest change in a sequence's logits when it is
  prefilled beside another prompt instead of alone, with a unified KV cache vs. a
  stream per slot (why `model.py` gives each slot its own stream).

Run: `.venv/bin/python bench/engine_choices.py` (also part of `make bench`). The machine
may be noisy; repeat a line that looks off.
"""

from __future__ import annotations

import statistics
import time

import llama_cpp
import numpy as np

from parlance.core.messages import Message
from parlance.core.request import SamplingParams
from parlance.engines.llamacpp.batch import Batch
from parlance.engines.llamacpp.model import ContextSettings, LlamaModel
from parlance.engines.llamacpp.sampler import SamplerChain, _samplers
from parlance.engines.llamacpp.template import ChatTemplate
from parlance.models.registry import DEFAULT_MODEL, builtin_registry

PATH = builtin_registry()[DEFAULT_MODEL].locate()


def line(label: str, a_name: str, a: float, b_name: str, b: float, unit: str) -> None:
    print(f"{label}: {a_name} {a:.3g} {unit}, {b_name} {b:.3g} {unit}, ratio {b / a:.2f}")


def model(**settings) -> LlamaModel:
    return LlamaModel(PATH, ContextSettings(n_ctx=2048, n_threads=2, **settings))


def decode(m: LlamaModel, batch: Batch, items: list[tuple[int, int, int]]) -> float:
    batch.clear()
    for token, pos, seq in items:
        batch.add(token, pos, seq, output=True)
    started = time.perf_counter()
    if batch.decode(m.ctx) != 0:
        raise RuntimeError("llama_decode failed")
    return time.perf_counter() - started


def stream_range(m: LlamaModel, batch: Batch) -> None:
    def step_ms(seqs: list[int]) -> float:
        llama_cpp.llama_memory_clear(m.memory, True)
        decode(m, batch, [(100 + j, j, s) for s in seqs for j in range(46)])
        return 1000 * statistics.median(decode(m, batch, [(42, 46 + k, s) for s in seqs])
                                        for k in range(64))

    line("stream range, 4-token decode step", "streams 0-3", step_ms([0, 1, 2, 3]),
         "streams 0,5,10,15", step_ms([0, 5, 10, 15]), "ms")


def prefix_copy(m: LlamaModel, batch: Batch) -> None:
    llama_cpp.llama_memory_clear(m.memory, True)
    prefix = [100 + j for j in range(30)]
    evaluate = decode(m, batch, [(t, j, 0) for j, t in enumerate(prefix)])
    plain = statistics.median(decode(m, batch, [(42, 30 + k, 0)]) for k in range(5))
    copies = []
    for target in range(1, 6):
        llama_cpp.llama_memory_seq_cp(m.memory, 0, target, -1, -1)
        copies.append(decode(m, batch, [(42, 35, target)]) - plain)  # copied at this decode
    line("prefix copy", "evaluate 30 tokens", 1000 * evaluate,
         "copy a stream", 1000 * statistics.median(copies), "ms")


def greedy_sampling(m: LlamaModel, batch: Batch) -> None:
    llama_cpp.llama_memory_clear(m.memory, True)
    decode(m, batch, [(100 + j, j, 0) for j in range(8)])
    params = SamplingParams(temperature=0.0, logit_bias=((0, -100.0), (2, -100.0)))
    fast = SamplerChain(m.n_vocab, params)
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    for sampler in _samplers(m.n_vocab, params):
        llama_cpp.llama_sampler_chain_add(chain, sampler)
    rows = batch.size - 1

    def per_call_us(sample) -> float:
        started = time.perf_counter()
        for _ in range(500):
            sample()
        return (time.perf_counter() - started) / 500 * 1e6

    try:
        assert fast.sample(m, rows) == llama_cpp.llama_sampler_sample(chain, m.ctx, rows)
        line("greedy sampling, per token", "llama.cpp chain",
             per_call_us(lambda: llama_cpp.llama_sampler_sample(chain, m.ctx, rows)),
             "argmax", per_call_us(lambda: fast.sample(m, rows)), "µs")
    finally:
        llama_cpp.llama_sampler_free(chain)


def logits_row(m: LlamaModel, batch: Batch) -> None:
    """Timed right after a decode, as the scheduler reads it: the caches then hold
    the model's weights, not Python's objects. One side per decode, alternating."""
    llama_cpp.llama_memory_clear(m.memory, True)
    decode(m, batch, [(100 + j, j, 0) for j in range(8)])

    def as_array() -> np.ndarray:
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(m.ctx, 0),
                                     shape=(m.n_vocab,))

    def view() -> np.ndarray:
        return m.logits(0)

    times: dict[object, list[float]] = {as_array: [], view: []}
    for k in range(200):
        read = as_array if k % 2 else view
        decode(m, batch, [(42, 8 + k, 0)])
        started = time.perf_counter()
        read()
        times[read].append(time.perf_counter() - started)
    line("logits row after a decode", "np.ctypeslib.as_array",
         1e6 * statistics.median(times[as_array]), "cached view",
         1e6 * statistics.median(times[view]), "µs")


def batch_neighbours() -> None:
    shifts = {}
    for unified in (True, False):
        m = model(parallel=2, kv_unified=unified)
        batch = Batch(512)
        template = ChatTemplate(m.chat_template, bos_token=m.special_text(m.bos),
                                eos_token=m.special_text(m.eos))

        def tokens(text: str) -> list[int]:
            return m.tokenize(template.render([Message("user", text)]), add_special=False,
                              parse_special=True)

        a, b = tokens("Write a haiku about the sea."), tokens("What is the capital of France?")

        def last_logits(items: list[tuple[int, int, int]], row: int) -> np.ndarray:
            llama_cpp.llama_memory_clear(m.memory, True)
            decode(m, batch, items)
            ptr = llama_cpp.llama_get_logits_ith(m.ctx, row)
            return np.ctypeslib.as_array(ptr, shape=(m.n_vocab,)).copy()

        alone = last_logits([(t, j, 0) for j, t in enumerate(a)], len(a) - 1)
        beside = last_logits([(t, j, 0) for j, t in enumerate(a)]
                             + [(t, j, 1) for j, t in enumerate(b)], len(a) - 1)
        shifts[unified] = float(np.abs(alone - beside).max())
        m.close()
    print(f"batch neighbours, largest logit change: unified cache {shifts[True]:.3g}, "
          f"stream per slot {shifts[False]:.3g}")


def main() -> None:
    m = model(parallel=16)
    batch = Batch(512)
    try:
        stream_range(m, batch)
        prefix_copy(m, batch)
        greedy_sampling(m, batch)
        logits_row(m, batch)
    finally:
        batch.free()
        m.close()
    batch_neighbours()


if __name__ == "__main__":
    main()
