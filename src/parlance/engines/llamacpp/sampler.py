"""Builds a llama.cpp sampler chain from neutral sampling parameters.

Order follows llama.cpp's own defaults: logit bias, penalties, then the
truncation samplers, temperature, and finally the random draw (or greedy).
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from parlance.core.request import SamplingParams
from parlance.engines.llamacpp.model import LlamaModel

DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp: pick a random seed


class SamplerChain:
    """A llama.cpp sampler chain; free it exactly once, on the thread that used it.

    Greedy decoding without penalties keeps no state, so it skips the chain: an
    argmax over the logits row (plus any logit bias) picks the same token as
    llama.cpp's greedy sampler, first index on ties, without building a candidate
    array of the whole vocabulary (bench/engine_choices.py: 22 µs vs 60 µs a token).
    """

    def __init__(self, n_vocab: int, params: SamplingParams) -> None:
        self.ptr = None
        self._greedy = params.temperature <= 0 and not _penalised(params)
        if self._greedy:
            self._bias_ids = np.array([t for t, _ in params.logit_bias], dtype=np.int64)
            self._bias = np.array([b for _, b in params.logit_bias], dtype=np.float32)
            return
        chain_params = llama_cpp.llama_sampler_chain_default_params()
        chain_params.no_perf = True
        self.ptr = llama_cpp.llama_sampler_chain_init(chain_params)
        for sampler in _samplers(n_vocab, params):
            llama_cpp.llama_sampler_chain_add(self.ptr, sampler)

    @property
    def stateless(self) -> bool:
        """Sampling twice from the same row gives the same token and changes nothing."""
        return self._greedy

    def sample(self, model: LlamaModel, output_index: int) -> int:
        """Sample from the given output row and accept the token into the chain."""
        if not self._greedy:
            return llama_cpp.llama_sampler_sample(self.ptr, model.ctx, output_index)
        logits = model.logits(output_index)
        if not self._bias.size:
            return int(logits.argmax())
        # Biased in place and restored, rather than copying the whole row (196 KB) per
        # token: logprobs read the same row afterwards, unbiased, as llama.cpp's do.
        ids = self._bias_ids
        saved = logits[ids]
        np.add.at(logits, ids, self._bias)
        token = int(logits.argmax())
        logits[ids] = saved
        return token

    def picks(self, model: LlamaModel, first: int, count: int) -> list[int] | None:
        """The greedy token of each of `count` consecutive output rows from `first`, in
        one pass over their logits (what `sample` would pick from each); None when this
        chain samples (each row must then go through it in order)."""
        if not self._greedy:
            return None
        rows = model.logits_rows(first, count)
        if not self._bias.size:
            return [int(t) for t in rows.argmax(axis=1)]
        ids = self._bias_ids
        saved = rows[:, ids]
        for token, bias in zip(ids.tolist(), self._bias.tolist(), strict=True):
            rows[:, token] += np.float32(bias)  # in order, as np.add.at does in `sample`
        picked = [int(t) for t in rows.argmax(axis=1)]
        rows[:, ids] = saved
        return picked

    def accept(self, token: int) -> None:
        """A token the engine chose itself (not sampled) joins the chain's history."""
        if not self._greedy:
            llama_cpp.llama_sampler_accept(self.ptr, token)

    def free(self) -> None:
        if self.ptr:
            llama_cpp.llama_sampler_free(self.ptr)
            self.ptr = None


def _penalised(p: SamplingParams) -> bool:
    return p.repeat_penalty != 1.0 or bool(p.frequency_penalty) or bool(p.presence_penalty)


def _samplers(n_vocab: int, p: SamplingParams) -> list[ctypes.c_void_p]:
    samplers = []
    if p.logit_bias:
        biases = (llama_cpp.llama_logit_bias * len(p.logit_bias))()
        for slot, (token, bias) in zip(biases, p.logit_bias, strict=True):
            slot.token, slot.bias = token, bias
        samplers.append(llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(biases), biases))
    if _penalised(p):
        samplers.append(llama_cpp.llama_sampler_init_penalties(
            n_vocab, p.repeat_last_n, p.repeat_penalty, p.frequency_penalty,
            p.presence_penalty))
    if p.temperature <= 0:
        samplers.append(llama_cpp.llama_sampler_init_greedy())
        return samplers
    if p.top_k > 0:
        samplers.append(llama_cpp.llama_sampler_init_top_k(p.top_k))
    if p.top_p < 1.0:
        samplers.append(llama_cpp.llama_sampler_init_top_p(p.top_p, 1))
    if p.min_p > 0.0:
        samplers.append(llama_cpp.llama_sampler_init_min_p(p.min_p, 1))
    samplers.append(llama_cpp.llama_sampler_init_temp(p.temperature))
    seed = DEFAULT_SEED if p.seed is None else p.seed & 0xFFFFFFFF
    samplers.append(llama_cpp.llama_sampler_init_dist(seed))
    return samplers
