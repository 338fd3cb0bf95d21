"""LlamaCppEngine: the engine seam over one llama.cpp model. `start()` prepares a request
off the event loop (`prepare.py`: template, tokens, checks, guide plan), gives it its
samplers and drafter and hands it to the batching scheduler; `embed()` hands inputs
to the embedding thread (`embedding.py`). Everything that can be refused is refused
in `start()`, before the server commits to a response."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import llguidance

from parlance.core.embeddings import EmbeddingRequest, Embeddings, Normalize
from parlance.core.errors import (
    ContextOverflow,
    EngineFailure,
    InvalidRequest,
)
from parlance.core.events import Failed, Usage
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.core.rerank import Method, Reranked, RerankRequest
from parlance.core.scoring import PromptScores, ScoreRequest, Scores
from parlance.core.tokens import DetokenizeRequest, Token, TokenizeRequest
from parlance.engines.llamacpp.draft_model import DraftModel
from parlance.engines.llamacpp.drafting import NgramDrafter
from parlance.engines.llamacpp.embedding import (
    EmbeddingWorker,
    declared_pooling,
    embedding_tokens,
    is_reranker,
)
from parlance.engines.llamacpp.in_flight import InFlight
from parlance.engines.llamacpp.job import GroupSpec, Job, LlamaGeneration
from parlance.engines.llamacpp.kv_state import build_prompt_cache
from parlance.engines.llamacpp.model import (
    ContextSettings,
    LlamaModel,
    ProgressCallback,
)
from parlance.engines.llamacpp.plan import render_chat
from parlance.engines.llamacpp.prepare import Preparation
from parlance.engines.llamacpp.prompt_cache import NO_PROMPT_CACHE, CacheSettings
from parlance.engines.llamacpp.ranking import ranking_tokens
from parlance.engines.llamacpp.rpc import RpcServers
from parlance.engines.llamacpp.sampler import SamplerChain
from parlance.engines.llamacpp.scheduler import Scheduler
from parlance.engines.llamacpp.scoring import ScoreSpec
from parlance.engines.llamacpp.speculation import NO_SPECULATION, SpeculativeSettings
from parlance.engines.llamacpp.template import ChatTemplate
from parlance.engines.metrics import EngineMetrics
from parlance.engines.output_check import OutputCheck
from parlance.engines.reranking import by_cosine, by_yes_no

DEFAULT_MAX_WAITING = 64
T = TypeVar("T")


class LlamaCppEngine:
    def __init__(self, model: LlamaModel, template: ChatTemplate, *,
                 max_waiting: int = DEFAULT_MAX_WAITING,
                 prompt_cache: CacheSettings = NO_PROMPT_CACHE,
                 strict_max_tokens: bool = False,
                 speculative: SpeculativeSettings = NO_SPECULATION,
                 draft: DraftModel | None = None) -> None:
        self.model = model
        self.draft = draft
        self.preparation = Preparation(model, template, strict_max_tokens=strict_max_tokens)
        self.context_length = model.n_ctx
        self.slots = model.settings.parallel
        metrics = EngineMetrics(slots_total=self.slots)
        self.scheduler = Scheduler(model, slots=self.slots, max_waiting=max_waiting,
                                   metrics=metrics,
                                   cache=build_prompt_cache(model, prompt_cache, metrics),
                                   speculative=speculative, draft=draft)
        self._preparing = InFlight()
        if model.rpc is not None:  # a lost RPC server ends the streams, not the process
            model.rpc.watch(self.scheduler.abandon)
        self._embedding: EmbeddingWorker | None = None  # made on the first embed()
        self._embedding_made = threading.Lock()

    @property
    def metrics(self) -> EngineMetrics:
        return self.scheduler.metrics

    @property
    def template(self) -> ChatTemplate:
        return self.preparation.template

    @template.setter
    def template(self, template: ChatTemplate) -> None:
        self.preparation.template = template

    @property
    def strict_max_tokens(self) -> bool:
        """Refuse max_tokens beyond the context (see engines/budget.py)."""
        return self.preparation.strict_max_tokens

    @strict_max_tokens.setter
    def strict_max_tokens(self, strict: bool) -> None:
        self.preparation.strict_max_tokens = strict

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        """The vocabulary as llguidance sees it (built on first use)."""
        return self.preparation.tokenizer

    @classmethod
    def load(
        cls,
        path: Path,
        settings: ContextSettings,
        *,
        chat_template: str | None = None,
        chat_format: str | None = None,  # a formats.py entry's name; None: detected
        on_progress: ProgressCallback | None = None,
        max_waiting: int = DEFAULT_MAX_WAITING,
        rpc: RpcServers | None = None,
        prompt_cache: CacheSettings = NO_PROMPT_CACHE,
        strict_max_tokens: bool = False,
        speculative: SpeculativeSettings = NO_SPECULATION,
        draft: Path | None = None,  # the draft model of `draft` mode
    ) -> LlamaCppEngine:
        if speculative.mode == "draft" and draft is None:
            speculative = NO_SPECULATION  # (only the model it was given for drafts)
        if speculative.enabled:  # drafts verified in a batch must not change the answer
            settings = replace(settings, batch_invariant=True)
        model = LlamaModel(path, settings, on_progress, rpc)
        try:
            draft_model = (DraftModel.load(draft, settings, model)
                           if draft is not None and speculative.mode == "draft" else None)
        except BaseException:
            model.close()
            raise
        template = ChatTemplate(
            chat_template or model.chat_template,
            bos_token=model.special_text(model.bos),
            eos_token=model.special_text(model.eos),
            chat_format=chat_format,
        )
        return cls(model, template, max_waiting=max_waiting, prompt_cache=prompt_cache,
                   strict_max_tokens=strict_max_tokens, speculative=speculative,
                   draft=draft_model)

    async def start(self, request: GenerationRequest) -> LlamaGeneration:
        self.preparation.check_logit_bias(request)
        self._check_sequences(request)
        # Template, tokens and grammars grow with the request: off the event loop.
        prepared = await self._off_loop(self.preparation.prepare, request)
        token_lists, plan = prepared.token_lists, prepared.plan
        check = await self._off_loop(OutputCheck.of, request) if plan is not None else None
        scheduler = self.scheduler
        speculator = scheduler.speculator
        drafters: list[NgramDrafter | None] = (
            await self._off_loop(lambda: [speculator.index(t) for t in token_lists])
            if request.speculative and speculator.enabled else [None] * len(token_lists))
        job = Job(stop=request.stop, logprobs=request.logprobs, echo=request.echo,
                  outbox=scheduler.outbox, on_cancel=scheduler.wake)
        n = request.n
        sampling = request.sampling
        if sampling.repeat_last_n < 0:  # the penalties look back over the whole context
            sampling = replace(sampling, repeat_last_n=self.context_length)
        job.groups = [
            GroupSpec(job, tokens, budget, tuple(range(p * n, (p + 1) * n)),
                      [SamplerChain(self.model.n_vocab, _choice_sampling(sampling, c))
                       for c in range(n)], plan, drafter)
            for p, (tokens, budget, drafter) in enumerate(
                zip(token_lists, prepared.budgets, drafters, strict=True))
        ]
        try:
            scheduler.submit(job)
        except BaseException:
            for group in job.groups:
                for sampler in group.samplers:
                    sampler.free()
            raise
        return LlamaGeneration(job, prepared.prompts, check)

    async def count_tokens(self, request: GenerationRequest) -> int:
        return await self._off_loop(self.preparation.count, request.prompts[0], request)

    async def rerank(self, request: RerankRequest) -> Reranked:
        """A reranker (rank pooling) by its classifier head, an embedding model (its
        header names another pooling type) by cosine, any other model by its "yes"."""
        if is_reranker(self.model):
            return await self._rank(request)
        if declared_pooling(self.model) is not None:
            return await by_cosine(self, request)
        return await by_yes_no(self, request)

    async def _rank(self, request: RerankRequest) -> Reranked:
        """Each pair pooled by the embedding thread in rank mode (ranking.py), batched
        with other requests' pairs; the score is the head's first output."""
        metrics = self.metrics
        metrics.embedding_requests += 1
        try:
            worker = await self._off_loop(self._embedder)
            pairs = await self._off_loop(ranking_tokens, self.model, request, worker.limit)
            outputs = await worker.pooled(pairs, Normalize.NATIVE)
            return Reranked(tuple(o[0] for o in outputs), Method.RERANKER,
                            sum(map(len, pairs)))
        finally:
            metrics.embedding_requests -= 1

    async def tokenize(self, request: TokenizeRequest) -> tuple[Token, ...]:
        return await self._off_loop(self._tokenize, request)

    async def detokenize(self, request: DetokenizeRequest) -> str:
        self.preparation.check_ids(request.tokens, "tokens")
        raw = b"".join(self.model.piece(t, special=True) for t in request.tokens)
        return raw.decode("utf-8", errors="replace")

    async def render_prompt(self, request: GenerationRequest) -> str:
        prompt = request.prompts[0]
        if isinstance(prompt, ChatInput):
            return await self._off_loop(render_chat, self.template, request, prompt.messages)
        return prompt.text or ""

    def _tokenize(self, request: TokenizeRequest) -> tuple[Token, ...]:
        """Texts tokenized (the special tokens added before the first text only, as
        llama-server does), ids kept. Runs on a worker thread."""
        model, ids = self.model, []
        first = True
        for item in request.content:
            if isinstance(item, int):
                self.preparation.check_ids((item,), "content")
                ids.append(item)
                continue
            ids += model.tokenize(item, add_special=request.add_special and first,
                                  parse_special=request.parse_special)
            first = False
        return tuple(Token(t, model.piece(t, special=True)) for t in ids)

    async def score(self, request: ScoreRequest) -> Scores:
        """Each prompt evaluated once, its continuations scored by teacher forcing in the
        step loop beside other requests (scoring.py). Prompts go one after another, so
        each finds the previous one's cells (a shared context) cached in the slots."""
        prepared = await self._off_loop(self._score_tokens, request)
        results = []
        for tokens, continuations in prepared:
            results.append(await self._score_prompt(tokens, continuations))
        return Scores(tuple(results))

    async def _score_prompt(self, tokens: list[int],
                            continuations: list[list[int]]) -> PromptScores:
        scheduler = self.scheduler
        spec = ScoreSpec(continuations)
        job = Job(stop=(), logprobs=None, echo=False, outbox=scheduler.outbox,
                  on_cancel=scheduler.wake)
        job.groups = [GroupSpec(job, tokens, 0, tuple(range(min(spec.sequences, self.slots))),
                                [], score=spec)]
        scheduler.submit(job)
        usage: Usage | None = None
        try:
            async for event in LlamaGeneration(job, ()):
                if isinstance(event, Failed):
                    raise event.error
                if isinstance(event, Usage):
                    usage = event
        finally:
            job.cancel()  # (a no-op once it ended; frees its slots when the caller left)
        if usage is None or len(spec.logprobs) != len(continuations) or not spec.done:
            raise EngineFailure("The engine ended a scoring request without its scores.")
        return PromptScores(tuple(spec.logprobs), usage.prompt_tokens, usage.cached_tokens)

    def _score_tokens(self, request: ScoreRequest) -> list[tuple[list[int], list[list[int]]]]:
        """Each prompt's tokens (as a generation renders it) and its continuations'
        tokens, refused when a prompt with its longest continuation overflows the
        context. Runs on a worker thread."""
        generation, out = request.generation, []
        for prompt, texts in zip(generation.prompts, request.continuations, strict=True):
            tokens = self.preparation.tokens(prompt, self.preparation.chat_text(prompt, generation),
                                             generation)
            continuations = [self.model.tokenize(t, add_special=False, parse_special=False)
                             for t in texts]
            if not all(continuations):
                raise InvalidRequest("A label to score is empty.", param=request.param)
            longest = max(map(len, continuations))
            if len(tokens) + longest > self.context_length:
                raise ContextOverflow(
                    f"This model's maximum context length is {self.context_length} tokens, "
                    f"but a prompt to score has {len(tokens)} tokens and its longest label "
                    f"{longest}.", param=request.param, code="context_length_exceeded")
            out.append((tokens, continuations))
        return out

    async def embed(self, request: EmbeddingRequest) -> Embeddings:
        """Tokens prepared off the loop, then pooled by the embedding thread, batched
        with the inputs of other requests (see `embedding.py`)."""
        metrics = self.metrics
        metrics.embedding_requests += 1
        try:
            worker = await self._off_loop(self._embedder)
            if worker.ranks:  # (llama-server: 400 on /embeddings with --reranking)
                raise InvalidRequest("This model is a reranker: it scores pairs of texts "
                                     "(/v1/rerank) and makes no embeddings.", param="model")
            if request.dimensions is not None and request.dimensions != worker.size:
                raise InvalidRequest(
                    f"This model's embeddings have {worker.size} dimensions and it cannot "
                    f"make embeddings of {request.dimensions}.", param="dimensions")
            token_lists = await self._off_loop(embedding_tokens, self.model, request, worker)
            vectors = await worker.pooled(token_lists, request.normalize)
            return Embeddings(tuple(vectors), sum(map(len, token_lists)))
        finally:
            metrics.embedding_requests -= 1

    async def clear_cache(self) -> None:
        """Forget every cached prompt prefix (waits until no request is running)."""
        await asyncio.to_thread(self.scheduler.clear_cache().wait)

    async def aclose(self) -> None:
        # Never free the model under a thread that may still be decoding with it, or
        # tokenizing for a request being prepared.
        if await asyncio.to_thread(self.scheduler.close) and await asyncio.to_thread(
                self._preparing.close) and await self._close_embedding():
            if self.draft is not None:
                self.draft.close()
            self.model.close()

    async def _close_embedding(self) -> bool:
        worker = self._embedding
        return worker is None or await asyncio.to_thread(worker.close)

    async def _off_loop(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`work` on a worker thread, counted so that the model outlives it."""
        return await asyncio.to_thread(self._preparing.run, work, *args, **kwargs)

    def _check_sequences(self, request: GenerationRequest) -> None:
        """n within the slots, and prompts × n within the wait queue: the queue is
        bounded in sequences, so a larger request could never be admitted."""
        n, prompts = request.n, len(request.prompts)
        if n > self.slots:
            raise InvalidRequest(f"n is {n}, but this server decodes at most "
                                 f"{self.slots} sequences at once (--parallel).", param="n")
        limit = self.scheduler.max_waiting
        if n * prompts > limit:
            raise InvalidRequest(
                f"The request asks for {n * prompts} sequences ({prompts} prompts, n={n}), "
                f"but this server queues at most {limit} (--queue-size).",
                param="prompt" if prompts > 1 else "n")

    def _embedder(self) -> EmbeddingWorker:
        with self._embedding_made:
            if self._embedding is None:
                self._embedding = EmbeddingWorker(self.model, self.metrics)
            return self._embedding


def _choice_sampling(sampling: SamplingParams, choice: int) -> SamplingParams:
    """Choices of one request draw differently even when the client fixed a seed."""
    if choice == 0 or sampling.seed is None:
        return sampling
    return replace(sampling, seed=sampling.seed + choice)
