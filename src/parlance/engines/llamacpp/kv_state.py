"""One sequence's KV state in and out of the llama.cpp context, and what it is valid for.

`llama_state_seq_get_data` copies a sequence's cells (positions and K/V rows) to
host memory; `llama_state_seq_set_data` puts them back into an emptied sequence,
which may be another slot's. The bytes mean something only to the same model
file under the same context layout, KV types and RoPE settings, built by the
same llama.cpp: `cache_facts` names all of these for the disk tier's key.
"""

from __future__ import annotations

import ctypes

import llama_cpp

from parlance.engines.llamacpp.model import LlamaModel
from parlance.engines.llamacpp.prompt_cache import CacheSettings, PromptCache, RamTier
from parlance.engines.llamacpp.prompt_cache_disk import DiskTier
from parlance.engines.llamacpp.prompt_cache_entry import State
from parlance.engines.metrics import EngineMetrics

FLAGS = llama_cpp.LLAMA_STATE_SEQ_FLAGS_NONE


class LlamaSequenceStates:
    """`prompt_cache.SequenceStates` on a model's context (scheduler thread only)."""

    def __init__(self, model: LlamaModel) -> None:
        self._model = model

    def read(self, seq: int) -> State:
        ctx = self._model.ctx
        size = llama_cpp.llama_state_seq_get_size_ext(ctx, seq, FLAGS)
        if size == 0:
            return bytearray()
        state = bytearray(size)  # filled in place: a 2k-token prefix is tens of MB
        buffer = (ctypes.c_uint8 * size).from_buffer(state)
        written = llama_cpp.llama_state_seq_get_data_ext(ctx, buffer, size, seq, FLAGS)
        del buffer  # (a live export would keep the bytearray from resizing)
        del state[written:]
        return state

    def write(self, seq: int, state: State) -> bool:
        """False when llama.cpp refused the state (no room, another layout): the
        sequence is then left empty."""
        model = self._model
        llama_cpp.llama_memory_seq_rm(model.memory, seq, -1, -1)
        kind = ctypes.c_uint8 * len(state)
        buffer = kind.from_buffer(state) if isinstance(state, bytearray) else (
            kind.from_buffer_copy(state))
        if llama_cpp.llama_state_seq_set_data_ext(model.ctx, buffer, len(state), seq,
                                                  FLAGS) == 0:
            llama_cpp.llama_memory_seq_rm(model.memory, seq, -1, -1)
            return False
        return True


def copy_sequence(model: LlamaModel, source: int, target: int) -> bool:
    """Give `target` (emptied first) all of `source`'s cells, now; False when llama.cpp
    refused them (the target is then left empty).

    In one KV stream (a unified cache) `llama_memory_seq_cp` only tags cells. Across
    streams it copies the whole buffer at the next decode, and anything that reads or
    writes either stream before then (saving the target to the prompt cache, restoring
    an entry into the source) reads data the copy has not moved yet or spoils what it
    will move: another sequence's cells under this one's tokens. Across streams the
    cells go through llama.cpp's sequence state instead, at once."""
    if model.settings.kv_unified:
        llama_cpp.llama_memory_seq_rm(model.memory, target, -1, -1)
        llama_cpp.llama_memory_seq_cp(model.memory, source, target, -1, -1)
        return True
    states = LlamaSequenceStates(model)
    state = states.read(source)
    if not state:
        llama_cpp.llama_memory_seq_rm(model.memory, target, -1, -1)
        return True
    return states.write(target, state)


def cache_facts(model: LlamaModel) -> dict[str, object]:
    """Everything a saved state depends on, for the disk tier's key."""
    stat = model.path.stat()
    params = llama_cpp.llama_context_default_params()  # what _new_context leaves as is
    return {
        "model": str(model.path.resolve()), "size": stat.st_size, "mtime": stat.st_mtime_ns,
        "n_ctx_seq": model.n_ctx, "kv_unified": model.settings.kv_unified,
        "type_k": model.settings.kv_types.k, "type_v": model.settings.kv_types.v,
        "flash_attn": True,
        "rope_type": llama_cpp.llama_model_rope_type(model.model),
        "rope_freq_scale_train": llama_cpp.llama_model_rope_freq_scale_train(model.model),
        "rope_scaling_type": params.rope_scaling_type,
        "rope_freq_base": params.rope_freq_base, "rope_freq_scale": params.rope_freq_scale,
        "yarn": [params.yarn_ext_factor, params.yarn_attn_factor, params.yarn_beta_fast,
                 params.yarn_beta_slow, params.yarn_orig_ctx],
        "llama_cpp": llama_cpp.__version__,
    }


def build_prompt_cache(model: LlamaModel, settings: CacheSettings,
                       metrics: EngineMetrics) -> PromptCache | None:
    """The model's prompt cache as configured; None when both tiers are off."""
    if not settings.enabled:
        return None
    disk = None
    if settings.disk_bytes > 0 and settings.directory is not None:
        disk = DiskTier(settings.directory, cache_facts(model), settings.disk_bytes)
    return PromptCache(LlamaSequenceStates(model), RamTier(settings.ram_bytes), disk, metrics)
