"""Owns a loaded GGUF model and its llama.cpp context; token <-> text helpers.

Loading reports real progress through llama.cpp's load-progress callback.
Tokenization only reads the vocabulary, so it is safe from any thread; the
context itself is used by the scheduler thread alone.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import llama_cpp
import llama_cpp._logger
import numpy as np

from parlance.core.errors import EngineFailure, ModelUnusable, Unavailable
from parlance.engines.llamacpp import invariant_attention
from parlance.engines.llamacpp.logits import LogitsRows
from parlance.engines.llamacpp.rpc import RpcServers

llama_cpp._logger.logger.setLevel(logging.ERROR)
log = logging.getLogger("parlance.engine")

ProgressCallback = Callable[[float], None]
T = TypeVar("T")
TOKEN_SLICE = 1 << 16  # tokens converted to a Python list per step
MIN_LONGEST_PIECE = 4  # bytes: an unknown character (one UTF-8 character at most)
SPELLING_VOCABS = (llama_cpp.LLAMA_VOCAB_TYPE_SPM, llama_cpp.LLAMA_VOCAB_TYPE_BPE)


@dataclass(frozen=True, slots=True)
class KvTypes:
    """The ggml types of the KV cache's keys and values."""

    k: int
    v: int


# ggml's CPU flash attention (ggml-cpu/ops.cpp) takes one of three kernels by the shape
# of a batch when keys and values are both f16 (or f32): a tiled kernel for 64+ query
# tokens of one sequence, a split over the cells for one token alone in a batch with
# 512+ cells, and a one-row kernel otherwise, each summing in its own order. The same
# token then got other logits in a prompt chunk than decoded, alone than batched.
# Parlance's build patches ggml with a switch (invariant_attention.py) under which every
# such node takes the tiled kernel, whose rows are each computed on their own, made cheap
# for the few rows of decoding: with it, f16/f16 is invariant (two cores, against f16/f16
# without it: prompts 1.00x; decoding 600 tokens into the context 1.04x at 1 stream and
# 1.01x at 8, 4,000 in 1.24x and 1.23x). Without the patch
# (a stock llama-cpp-python), keys and values of different types keep to the one-row
# kernel: q8_0/f16 is invariant too, at prompts 0.82x. bench/batch_invariance.py's logit
# harness compares rows bit for bit across 13 ways of evaluating one sequence (prompt
# chunks of 7 to 512, a prefix kept, cut, copied or restored, beside others decoding or
# prefilling, drafts verified and rejected). Attention without flash attention (mul_mat +
# soft_max) is not invariant: a sequence's rows decoded several to a step differ from one
# at a time.
ONE_ROW_KERNEL_KV = KvTypes(llama_cpp.GGML_TYPE_Q8_0, llama_cpp.GGML_TYPE_F16)
DEFAULT_KV = KvTypes(llama_cpp.GGML_TYPE_F16, llama_cpp.GGML_TYPE_F16)  # llama.cpp's own
INVARIANT_KV = DEFAULT_KV if invariant_attention.available() else ONE_ROW_KERNEL_KV


@dataclass(frozen=True, slots=True)
class ContextSettings:
    n_ctx: int = 4096  # the context each sequence may use
    n_threads: int = 2
    n_batch: int = 512
    parallel: int = 4  # sequences decoded together (slots)
    # False: each slot has its own n_ctx cells (a KV stream per sequence). True: one
    # cache of n_ctx cells shared by all slots; a sequence's logits then depend on
    # what it is batched with (see _new_context), so greedy runs are not reproducible.
    kv_unified: bool = False
    # True: a sequence's logits do not depend on the batch, its chunking or where its
    # prefix came from (see INVARIANT_KV; free with the patched kernels). False:
    # llama.cpp's own kernels, chosen by the shape of each batch.
    batch_invariant: bool = False

    @property
    def kv_types(self) -> KvTypes:
        return INVARIANT_KV if self.batch_invariant else DEFAULT_KV


class LlamaModel:
    def __init__(
        self,
        path: Path,
        settings: ContextSettings,
        on_progress: ProgressCallback | None = None,
        rpc: RpcServers | None = None,  # the layers go to these rpc-servers (--rpc)
    ) -> None:
        llama_cpp.llama_backend_init()
        self._switch: invariant_attention.Switch | None = None
        self.path = path
        self.settings = settings
        self.rpc = rpc
        self.model = self._load_model(path, on_progress)
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.ctx = self._new_context(settings)
        if settings.batch_invariant:  # the patched kernels, on while this context is open
            self._switch = invariant_attention.switch()
            if self._switch is not None:
                self._switch.hold()
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_ctx = llama_cpp.llama_n_ctx_seq(self.ctx)  # what one sequence may use
        self.n_cells = llama_cpp.llama_n_ctx(self.ctx)  # KV cells in all
        self._rows = LogitsRows(self.ctx, self.n_vocab)
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}

    def _load_model(self, path: Path,
                    on_progress: ProgressCallback | None) -> llama_cpp.llama_model_p:
        params = llama_cpp.llama_model_default_params()

        def report(fraction: float, _user_data: ctypes.c_void_p) -> bool:
            if on_progress is not None:
                on_progress(float(fraction))
            return True

        # Keep a reference: ctypes callbacks must outlive the C call that uses them.
        self._progress_cb = llama_cpp.llama_progress_callback(report)
        params.progress_callback = self._progress_cb
        if self.rpc is not None:
            self.rpc.before_load()
            self.rpc.offload(params)
        model = self._remote(llama_cpp.llama_model_load_from_file, str(path).encode(), params)
        if not model:  # its reason went to the log (llama.cpp's); the path stays there
            log.error("llama.cpp could not load the model file %s", path)
            raise ModelUnusable("llama.cpp could not load its file (truncated or corrupt, or "
                                "an architecture this build does not know; the server log "
                                "names the file)", code="model_unusable")
        if self.rpc is not None:
            self.rpc.loaded()
        return model

    def _new_context(self, settings: ContextSettings) -> llama_cpp.llama_context_p:
        ctx = self._remote(llama_cpp.llama_init_from_model, self.model,
                           self._context_params(settings))
        if not ctx:
            raise EngineFailure("llama.cpp could not create a context for the model")
        return ctx

    def _context_params(self, settings: ContextSettings) -> llama_cpp.llama_context_params:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = settings.n_ctx * (1 if settings.kv_unified else settings.parallel)
        params.n_batch = settings.n_batch
        params.n_ubatch = settings.n_batch
        params.n_seq_max = settings.parallel
        params.kv_unified = settings.kv_unified
        # One KV stream per sequence, flash attention, INVARIANT_KV's types and the
        # switch held in __init__: a token's logits are bit-identical alone or batched,
        # in a prompt chunk of any size or decoded, over a prefix evaluated cold, kept,
        # copied or restored.
        # A unified cache interleaves other sequences' cells (bench/engine_choices.py:
        # a logit moved by 0.86 beside another prompt).
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        params.type_k = settings.kv_types.k
        params.type_v = settings.kv_types.v
        params.n_threads = settings.n_threads
        params.n_threads_batch = settings.n_threads
        params.no_perf = True
        return params

    def _remote(self, work: Callable[..., T], *args: object) -> T:
        """A call that allocates or frees on the RPC servers, if any: waited for only
        until they are lost (llama.cpp would then wait forever)."""
        return work(*args) if self.rpc is None else self.rpc.run(work, *args)

    # -- metadata ---------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        size = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        if size < 0:
            return None
        if size >= len(buf):
            buf = ctypes.create_string_buffer(size + 1)
            llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    @property
    def chat_template(self) -> str | None:
        return self.meta("tokenizer.chat_template")

    def special_text(self, token: int) -> str:
        """Text of a special token (e.g. BOS) as chat templates expect it."""
        if token < 0:
            return ""
        return self.piece(token, special=True).decode("utf-8", errors="replace")

    # -- tokens -----------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(
            self.vocab, data, len(data), buf, capacity, add_special, parse_special
        )
        if n < 0:  # buffer too small: -n is the size needed
            capacity = -n
            buf = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(
                self.vocab, data, len(data), buf, capacity, add_special, parse_special
            )
        # A slice at a time: one slice of millions of tokens holds the GIL for as long
        # as it takes to build, and tokenizing runs beside the event loop.
        tokens: list[int] = []
        for start in range(0, n, TOKEN_SLICE):
            tokens += buf[start:min(n, start + TOKEN_SLICE)]
        return tokens

    def fewest_tokens(self, n_bytes: int) -> int:
        """A floor on the tokens of any text of `n_bytes` bytes: for vocabularies whose
        tokens spell the text (BPE, SentencePiece), a token stands for at most its own
        piece, an unknown character for at most 4 bytes. 0 for other vocabularies."""
        longest = self._longest_piece
        return -(-n_bytes // longest) if longest else 0

    @cached_property
    def _longest_piece(self) -> int:
        """The most text bytes one token can stand for (0: no such bound); built on first
        use (a pass over the vocabulary, about a second for 50k tokens)."""
        if llama_cpp.llama_vocab_type(self.vocab) not in SPELLING_VOCABS:
            return 0
        lengths = (len(self._spell(t, special)) for t in range(self.n_vocab)
                   for special in (False, True))
        return max(MIN_LONGEST_PIECE, max(lengths, default=0))

    def piece(self, token: int, *, special: bool = False) -> bytes:
        """The raw bytes of one token (cached; may be part of a UTF-8 character)."""
        key = token if not special else -token - 1
        cached = self._pieces.get(key)
        if cached is None:
            cached = self._pieces[key] = self._spell(token, special)
        return cached

    def _spell(self, token: int, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def is_valid_token(self, token: int) -> bool:
        return 0 <= token < self.n_vocab

    def is_eog(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))
        return eog

    def logits(self, output: int) -> np.ndarray:
        """The logits of batch row `output` after a decode (a writable view into
        llama.cpp's buffer, valid until the next decode; scheduler thread only)."""
        return self._rows.row(output)

    def logits_rows(self, first: int, count: int) -> np.ndarray:
        """The logits of batch rows `first`..`first + count - 1`, every one an output, as
        one (count, n_vocab) view (valid until the next decode; scheduler thread only)."""
        return self._rows.rows(first, count)

    @property
    def add_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    @property
    def bos(self) -> int:
        return llama_cpp.llama_vocab_bos(self.vocab)

    @property
    def eos(self) -> int:
        return llama_cpp.llama_vocab_eos(self.vocab)

    def fim_tokens(self) -> tuple[int, int, int] | None:
        """(prefix, suffix, middle) tokens when the model supports fill-in-the-middle."""
        pre = llama_cpp.llama_vocab_fim_pre(self.vocab)
        suf = llama_cpp.llama_vocab_fim_suf(self.vocab)
        mid = llama_cpp.llama_vocab_fim_mid(self.vocab)
        return (pre, suf, mid) if min(pre, suf, mid) >= 0 else None

    def close(self) -> None:
        if self._switch is not None:
            self._switch.release()
            self._switch = None
        try:
            if self.ctx:
                self._remote(llama_cpp.llama_free, self.ctx)
                self.ctx = llama_cpp.llama_context_p(0)  # a null handle: closing twice is safe
            if self.model:
                self._remote(llama_cpp.llama_model_free, self.model)
                self.model = llama_cpp.llama_model_p(0)
                if self.rpc is not None:
                    self.rpc.released()
        except Unavailable:  # RPC servers lost: llama.cpp would wait for them forever
            pass  # so their buffers are left as they are
