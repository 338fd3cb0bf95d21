"""Embeddings on llama.cpp: a context of their own in embedding mode, and one thread that
packs the inputs of every waiting request into each `llama_decode`.

Why a context of its own rather than the generation context:
- llama.cpp fixes the pooling type when a context is created, and a causal model's
  is "none" (one vector per token); we need the model's pooling, mean pooling for
  causal models that declare none (as llama-server's `--pooling mean`).
- A context in embedding mode outputs every token of a batch; the generation context
  is sized for one output per sequence and step.
- Its KV cells are the generation slots' prompt cache: embedding in them would evict
  cached prefixes, and a large embedding batch on the scheduler thread would stall
  every stream for its whole decode.
So the embedding context is created on the first embedding request (a server that only
generates never pays for it), holds one batch of cells (`n_batch`, one stream shared by
its sequences, cleared after every batch) and is freed with the model. The weights
are shared: llama.cpp contexts of one model are independent.

Every input must fit one micro-batch: llama.cpp pools a sequence within the
micro-batch that holds it, and encoder models (BERT) see the whole batch at once.
A reranker's context pools by rank instead: each sequence (a query and a document)
comes out as its classifier head's scores, which `ranking.py` reads.

So an input may have at most `limit` tokens: the evaluation batch size (512 unless a
load sets LM Studio's `eval_batch_size`; llama-server's and Ollama's default too), the
context size and the model's training context, whichever is smallest.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import threading
from collections import deque
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from parlance.core.embeddings import EmbeddingInput, EmbeddingRequest, Normalize
from parlance.core.errors import (
    ContextOverflow,
    EngineFailure,
    InvalidRequest,
    ModelUnloaded,
    Overloaded,
    ParlanceError,
)
from parlance.engines.llamacpp.batch import DECODED, Batch
from parlance.engines.llamacpp.model import MIN_LONGEST_PIECE, LlamaModel
from parlance.engines.metrics import EngineMetrics

MAX_SEQUENCES = 64  # inputs pooled per decode (llama.cpp allows 256 sequences)
MAX_WAITING_INPUTS = 8192  # inputs queued for the embedding thread; more is a 429


def declared_pooling(model: LlamaModel) -> int | None:
    """The pooling type the model's header names, if any."""
    arch = model.meta("general.architecture") or ""
    declared = model.meta(f"{arch}.pooling_type")
    return int(declared) if declared is not None and declared.isdigit() else None


def is_reranker(model: LlamaModel) -> bool:
    """A reranker declares "rank" pooling: its classifier head scores a pair of texts."""
    return declared_pooling(model) == llama_cpp.LLAMA_POOLING_TYPE_RANK


def pooling_type(model: LlamaModel) -> int:
    """The pooling the model declares; mean for a model that declares none (causal
    LLMs). An encoder-decoder model's decoder needs the encoder's output: refused."""
    if (llama_cpp.llama_model_has_encoder(model.model)
            and llama_cpp.llama_model_has_decoder(model.model)):
        raise InvalidRequest("This model is an encoder-decoder (T5-like); it makes no "
                             "embeddings here.", param="model")
    pooling = declared_pooling(model)
    if pooling is None or pooling == llama_cpp.LLAMA_POOLING_TYPE_NONE:
        return llama_cpp.LLAMA_POOLING_TYPE_MEAN
    return pooling


def native_unit(model: LlamaModel) -> bool:
    """Whether the model's own pipeline ends with unit vectors (`Normalize.NATIVE`).

    Models without a pooling type (causal LLMs) and most embedding models: yes. Raw are
    nomic-bert exports that do not say `normalize_embeddings`, BERT exports that say it
    is false, and BERT-architecture models with a non-WordPiece tokenizer (the rule
    Ollama keeps for its legacy /api/embeddings)."""
    arch = model.meta("general.architecture") or ""
    if model.meta(f"{arch}.pooling_type") is None:
        return True
    said = model.meta(f"{arch}.normalize_embeddings")
    if arch == "bert":
        if (model.meta("tokenizer.ggml.model") or "bert") != "bert":
            return False
        return said != "false"
    if arch in ("nomic-bert", "nomic-bert-moe"):
        return said == "true"
    return True


def added_end_tokens(model: LlamaModel) -> frozenset[int]:
    """The tokens the tokenizer puts at the end of a text (BERT's [SEP], an EOS)."""
    vocab, ends = model.vocab, set()
    if llama_cpp.llama_vocab_get_add_eos(vocab):
        ends.add(llama_cpp.llama_vocab_eos(vocab))
    if llama_cpp.llama_vocab_get_add_sep(vocab):
        ends.add(llama_cpp.llama_vocab_sep(vocab))
    return frozenset(t for t in ends if t >= 0)


class EmbedJob:
    """One request's inputs, as token lists; its vectors arrive on the loop's future."""

    def __init__(self, token_lists: list[list[int]], normalize: Normalize,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.token_lists = token_lists
        self.normalize = normalize
        self.loop = loop
        self.future: asyncio.Future[list[list[float]]] = loop.create_future()
        self.vectors: list[list[float] | None] = [None] * len(token_lists)
        self.next = 0  # the next input to put in a batch
        self.left = len(token_lists)  # inputs not pooled yet
        self.cancelled = False

    def settle(self, error: ParlanceError | None = None) -> None:
        """Hand the vectors (or the error) to the waiting coroutine (any thread)."""
        def finish() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result([v for v in self.vectors if v is not None])

        with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits any more
            self.loop.call_soon_threadsafe(finish)


@dataclass(slots=True)
class _Row:
    job: EmbedJob
    index: int  # the input's place in its job
    seq: int  # its sequence in the batch


@dataclass(slots=True)
class _Queue:
    jobs: deque[EmbedJob] = field(default_factory=deque)
    inputs: int = 0  # inputs not yet put in a batch


class EmbeddingWorker:
    """The embedding context and the thread that alone decodes with it."""

    def __init__(self, model: LlamaModel, metrics: EngineMetrics) -> None:
        self.model = model
        self.metrics = metrics
        settings = model.settings
        self.pooling = pooling_type(model)
        self.capacity = settings.n_batch
        self.limit = min(self.capacity, settings.n_ctx,
                         llama_cpp.llama_model_n_ctx_train(model.model))
        # rank pooling: the classifier head's outputs (llama-server reads the first)
        self.ranks = self.pooling == llama_cpp.LLAMA_POOLING_TYPE_RANK
        self.size = (llama_cpp.llama_model_n_cls_out(model.model) if self.ranks
                     else llama_cpp.llama_model_n_embd_out(model.model))
        self.native_unit = native_unit(model) and not self.ranks
        self.end_tokens = added_end_tokens(model)
        self.ctx = self._new_context()
        self._memory = llama_cpp.llama_get_memory(self.ctx)  # None for encoder models
        self._batch = Batch(self.capacity)
        self._queue = _Queue()
        self._wake = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="parlance-embeddings",
                                        daemon=True)
        self._thread.start()

    def _new_context(self) -> llama_cpp.llama_context_p:
        settings = self.model.settings
        params = llama_cpp.llama_context_default_params()
        params.embeddings = True
        params.pooling_type = self.pooling
        params.n_ctx = self.capacity
        params.n_batch = self.capacity
        params.n_ubatch = self.capacity  # a sequence is pooled within one micro-batch
        params.n_seq_max = MAX_SEQUENCES
        params.kv_unified = True  # one stream of cells the batch's sequences share
        params.n_threads = settings.n_threads
        params.n_threads_batch = settings.n_threads
        params.no_perf = True
        ctx = llama_cpp.llama_init_from_model(self.model.model, params)
        if not ctx:
            raise EngineFailure("llama.cpp could not create an embedding context for the "
                                "model")
        return ctx

    # -- any thread ---------------------------------------------------------------

    def submit(self, job: EmbedJob) -> None:
        with self._wake:
            if self._closing:
                raise ModelUnloaded()
            if self._queue.inputs + len(job.token_lists) > MAX_WAITING_INPUTS:
                raise Overloaded(f"The server is busy: {self._queue.inputs} inputs are "
                                 "waiting to be embedded. Retry shortly.", retry_after=1.0)
            self._queue.jobs.append(job)
            self._queue.inputs += len(job.token_lists)
            self._wake.notify()

    async def pooled(self, token_lists: list[list[int]],
                     normalize: Normalize) -> list[list[float]]:
        """Each input's pooled output (an embedding, or a reranker's scores), awaited on
        the loop; a cancelled caller's inputs are dropped from the queue."""
        job = EmbedJob(token_lists, normalize, asyncio.get_running_loop())
        self.submit(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            self.cancel(job)
            raise

    def cancel(self, job: EmbedJob) -> None:
        """Drop what is left of the job (its inputs in a running decode are discarded)."""
        with self._wake:
            job.cancelled = True

    def close(self) -> bool:
        """Fail every waiting job with ModelUnloaded and stop; True once the thread ended
        and the context is freed (the model may then be freed)."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join(timeout=30)
        return not self._thread.is_alive()

    # -- the embedding thread ---------------------------------------------------------

    def _run(self) -> None:
        try:
            while (rows := self._next_batch()) is not None:
                try:
                    self._embed(rows)
                except ParlanceError as exc:
                    self._fail({row.job for row in rows}, exc)
                except Exception as exc:  # every waiting request must still be answered
                    self._fail({row.job for row in rows},
                               EngineFailure(f"The engine failed while embedding: {exc}"))
        finally:
            with self._wake:
                jobs = set(self._queue.jobs)
                self._queue = _Queue()
            self._fail(jobs, ModelUnloaded())
            self._batch.free()
            llama_cpp.llama_free(self.ctx)

    def _next_batch(self) -> list[_Row] | None:
        """Inputs from the waiting jobs, first come first served, as many as the batch
        holds; blocks while there are none. None: closing."""
        with self._wake:
            while True:
                if self._closing:
                    return None
                rows = self._fill()
                if rows:
                    return rows
                self._wake.wait()

    def _fill(self) -> list[_Row]:
        batch, queue = self._batch, self._queue
        rows: list[_Row] = []
        batch.clear()
        while queue.jobs and len(rows) < MAX_SEQUENCES:
            job = queue.jobs[0]
            if job.cancelled:
                queue.inputs -= len(job.token_lists) - job.next
                queue.jobs.popleft()
                continue
            tokens = job.token_lists[job.next]
            if len(tokens) > batch.room:
                break  # the next batch takes it
            seq = len(rows)
            for pos, token in enumerate(tokens):
                batch.add(token, pos, seq, output=True)
            rows.append(_Row(job, job.next, seq))
            job.next += 1
            queue.inputs -= 1
            if job.next == len(job.token_lists):
                queue.jobs.popleft()
        return rows

    def _embed(self, rows: list[_Row]) -> None:
        code = self._batch.decode(self.ctx)
        if self._memory:
            llama_cpp.llama_memory_clear(self._memory, True)
        if code != DECODED:
            raise EngineFailure(f"llama_decode failed with status {code} while embedding")
        for row in rows:
            job = row.job
            pointer = llama_cpp.llama_get_embeddings_seq(self.ctx, row.seq)
            if not pointer:
                raise EngineFailure("llama.cpp returned no pooled embedding")
            raw = np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)),
                                        shape=(self.size,))
            if not np.isfinite(raw).all():
                raise EngineFailure("The model produced an embedding with NaN or Inf values.")
            if job.cancelled:
                continue
            job.vectors[row.index] = self._finished(raw, job.normalize)
            job.left -= 1
            self.metrics.embedding_inputs += 1
            if job.left == 0:
                job.settle()

    def _finished(self, raw: np.ndarray, normalize: Normalize) -> list[float]:
        """The vector as the request wants it, in float32 like the model's output."""
        unit = normalize is Normalize.UNIT or self.native_unit
        if not unit:
            return raw.tolist()
        norm = float(np.sqrt(np.dot(raw.astype(np.float64), raw.astype(np.float64))))
        scaled = raw / np.float32(norm) if norm > 0 else raw.copy()
        return scaled.astype(np.float32).tolist()

    def _fail(self, jobs: set[EmbedJob], error: ParlanceError) -> None:
        for job in jobs:
            job.cancelled = True
            job.settle(error)


def embedding_tokens(model: LlamaModel, request: EmbeddingRequest,
                     worker: EmbeddingWorker) -> list[list[int]]:
    """Each input's tokens, checked, and cut to the worker's limit when the request
    allows truncation. Runs on a worker thread (the engine's preparation threads)."""
    return [_input_tokens(model, item, request, worker) for item in request.inputs]


def _input_tokens(model: LlamaModel, item: EmbeddingInput, request: EmbeddingRequest,
                  worker: EmbeddingWorker) -> list[int]:
    param, limit = request.param, worker.limit
    if item.token_ids is not None:
        bad = [t for t in item.token_ids if not model.is_valid_token(t)]
        if bad:
            raise InvalidRequest(f"Token id {bad[0]} is outside the vocabulary "
                                 f"(0..{model.n_vocab - 1}).", param=param)
        tokens = list(item.token_ids)
    else:
        text = item.text or ""
        if not request.truncate and len(text) > limit * MIN_LONGEST_PIECE:
            fewest = model.fewest_tokens(len(text))  # refused before tokenizing
            if fewest > limit:
                raise _overflow(fewest, limit, param, at_least=True)
        tokens = model.tokenize(text, add_special=True, parse_special=True)
    if not tokens:
        raise InvalidRequest("An input to embed is empty.", param=param)
    if len(tokens) <= limit:
        return tokens
    if not request.truncate:
        raise _overflow(len(tokens), limit, param)
    last = tokens[-1]  # an end token the tokenizer added (BERT's [SEP]) stays last
    if item.token_ids is None and last in worker.end_tokens:
        return tokens[:limit - 1] + [last]
    return tokens[:limit]


def _overflow(tokens: int, limit: int, param: str, *,
              at_least: bool = False) -> ContextOverflow:
    some = "at least " if at_least else ""
    return ContextOverflow(
        f"This model embeds at most {limit} tokens per input (the least of its context, "
        f"its training context and the evaluation batch size), but an input has "
        f"{some}{tokens} tokens.",
        param=param, code="context_length_exceeded")
