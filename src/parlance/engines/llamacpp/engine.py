"""LlamaCppEngine: prepares requests (template, tokens, checks, samplers) and hands
them to the batching scheduler. Everything that can be refused is refused in
`start()`, before the server commits to a response."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import llguidance

from parlance.core.embeddings import EmbeddingInput, EmbeddingRequest, Embeddings
from parlance.core.errors import ContextOverflow, InvalidRequest
from parlance.core.prompts import PromptInfo
from parlance.core.request import (
    ChatInput,
    GenerationRequest,
    PromptInput,
    SamplingParams,
    TextInput,
)
from parlance.engines.budget import context_overflow, output_budget
from parlance.engines.grammar import quoted
from parlance.engines.llamacpp.constraint import build_tokenizer
from parlance.engines.llamacpp.draft_model import DraftModel
from parlance.engines.llamacpp.drafting import NgramDrafter
from parlance.engines.llamacpp.embedding import EmbeddingWorker, EmbedJob
from parlance.engines.llamacpp.guide import GuidePlan
from parlance.engines.llamacpp.in_flight import InFlight
from parlance.engines.llamacpp.job import GroupSpec, Job, LlamaGeneration
from parlance.engines.llamacpp.kv_state import build_prompt_cache
from parlance.engines.llamacpp.model import (
    MIN_LONGEST_PIECE,
    ContextSettings,
    LlamaModel,
    ProgressCallback,
)
from parlance.engines.llamacpp.plan import build_plan, render_chat
from parlance.engines.llamacpp.prompt_cache import NO_PROMPT_CACHE, CacheSettings
from parlance.engines.llamacpp.rpc import RpcServers
from parlance.engines.llamacpp.sampler import SamplerChain
from parlance.engines.llamacpp.scheduler import Scheduler
from parlance.engines.llamacpp.speculation import NO_SPECULATION, SpeculativeSettings
from parlance.engines.llamacpp.template import ChatTemplate
from parlance.engines.metrics import EngineMetrics
from parlance.engines.output_check import OutputCheck

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
        self.template = template
        self.context_length = model.n_ctx
        self.strict_max_tokens = strict_max_tokens  # see engines/budget.py
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

    @classmethod
    def load(
        cls,
        path: Path,
        settings: ContextSettings,
        *,
        chat_template: str | None = None,
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
        )
        return cls(model, template, max_waiting=max_waiting, prompt_cache=prompt_cache,
                   strict_max_tokens=strict_max_tokens, speculative=speculative,
                   draft=draft_model)

    async def start(self, request: GenerationRequest) -> LlamaGeneration:
        self._check_logit_bias(request)
        self._check_sequences(request)
        # Template, tokens and grammars grow with the request: off the event loop.
        # (Tokenizing reads only the vocabulary, safe beside the decoding thread.)
        token_lists, budgets, prompts, plan = await self._off_loop(self._prepare, request)
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
                zip(token_lists, budgets, drafters, strict=True))
        ]
        try:
            scheduler.submit(job)
        except BaseException:
            for group in job.groups:
                for sampler in group.samplers:
                    sampler.free()
            raise
        return LlamaGeneration(job, prompts, check)

    async def count_tokens(self, request: GenerationRequest) -> int:
        return await self._off_loop(self._count, request.prompts[0], request)

    async def embed(self, request: EmbeddingRequest) -> Embeddings:
        """Tokens prepared off the loop, then pooled by the embedding thread, batched
        with the inputs of other requests (see `embedding.py`)."""
        metrics = self.metrics
        metrics.embedding_requests += 1
        try:
            worker = await self._off_loop(self._embedder)
            if request.dimensions is not None and request.dimensions != worker.size:
                raise InvalidRequest(
                    f"This model's embeddings have {worker.size} dimensions and it cannot "
                    f"make embeddings of {request.dimensions}.", param="dimensions")
            token_lists = await self._off_loop(self._embedding_tokens, request, worker)
            job = EmbedJob(token_lists, request.normalize, asyncio.get_running_loop())
            worker.submit(job)
            try:
                vectors = await job.future
            except asyncio.CancelledError:
                worker.cancel(job)
                raise
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

    # -- preparation ------------------------------------------------------------

    @cached_property
    def tokenizer(self) -> llguidance.LLTokenizer:
        """The vocabulary as llguidance sees it; built on the first constrained request."""
        return build_tokenizer(self.model.vocab)

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

    def _prepare(self, request: GenerationRequest) -> tuple[
            list[list[int]], list[int], tuple[PromptInfo, ...], GuidePlan | None]:
        """Each prompt's tokens and budget, the prompts as evaluated, and the guide plan.
        Runs on a worker thread."""
        texts = [self._chat_text(p, request) for p in request.prompts]
        token_lists = [self._tokens(p, t, request) for p, t in zip(request.prompts, texts,
                                                                    strict=True)]
        plan = self._plan(request, next((t for t in texts if t is not None), None))
        budgets = [output_budget(len(tokens), request, self.context_length,
                                 strict=self.strict_max_tokens) for tokens in token_lists]
        prompts = tuple(PromptInfo(self._text(t), len(t), tuple(t)) for t in token_lists)
        return token_lists, budgets, prompts, plan

    def _embedder(self) -> EmbeddingWorker:
        with self._embedding_made:
            if self._embedding is None:
                self._embedding = EmbeddingWorker(self.model, self.metrics)
            return self._embedding

    def _embedding_tokens(self, request: EmbeddingRequest,
                          worker: EmbeddingWorker) -> list[list[int]]:
        """Each input's tokens, cut to the worker's limit when the request allows
        truncation. Runs on a worker thread."""
        return [self._embedding_input(item, request, worker) for item in request.inputs]

    def _embedding_input(self, item: EmbeddingInput, request: EmbeddingRequest,
                         worker: EmbeddingWorker) -> list[int]:
        model, param, limit = self.model, request.param, worker.limit
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
                    raise _embedding_overflow(fewest, limit, param, at_least=True)
            tokens = model.tokenize(text, add_special=True, parse_special=True)
        if not tokens:
            raise InvalidRequest("An input to embed is empty.", param=param)
        if len(tokens) <= limit:
            return tokens
        if not request.truncate:
            raise _embedding_overflow(len(tokens), limit, param)
        last = tokens[-1]  # an end token the tokenizer added (BERT's [SEP]) stays last
        if item.token_ids is None and last in worker.end_tokens:
            return tokens[:limit - 1] + [last]
        return tokens[:limit]

    def _count(self, prompt: PromptInput, request: GenerationRequest) -> int:
        """The prompt's tokens, counted however many there are (no context check)."""
        return len(self._tokens(prompt, self._chat_text(prompt, request), request,
                                bounded=False))

    def _chat_text(self, prompt: PromptInput, request: GenerationRequest) -> str | None:
        """A chat prompt rendered by the template (None for a text prompt)."""
        if not isinstance(prompt, ChatInput):
            return None
        return render_chat(self.template, request, prompt.messages)

    def _plan(self, request: GenerationRequest, chat_text: str | None) -> GuidePlan | None:
        """The guide plan, from the first chat prompt as rendered (none without one)."""
        if chat_text is None:
            return None
        return build_plan(request, self.template, chat_text, self.tokenizer,
                          self.model.n_vocab, self._literal, self._marker_tokens)

    def _marker_tokens(self, marker: str) -> list[int]:
        return self.model.tokenize(marker, add_special=False, parse_special=True)

    def _literal(self, marker: str) -> str:
        """A syntax marker in a grammar: by token id when it is one special token."""
        ids = self.model.tokenize(marker, add_special=False, parse_special=True)
        if len(ids) == 1 and ids != self.model.tokenize(marker, add_special=False,
                                                         parse_special=False):
            return f"<[{ids[0]}]>"
        return quoted(marker)

    def _tokens(self, prompt: PromptInput, chat_text: str | None, request: GenerationRequest,
                *, bounded: bool = True) -> list[int]:
        """The prompt's tokens (`chat_text`: a chat prompt as rendered). `bounded`: a text
        too long for the context is refused before it is tokenized."""
        model = self.model
        if bounded:
            texts = (prompt.text, prompt.suffix) if isinstance(prompt, TextInput) else ()
            for text in (chat_text, *texts):
                self._check_length(text)
        if isinstance(prompt, ChatInput):
            text = (chat_text if chat_text is not None
                    else render_chat(self.template, request, prompt.messages))
            bos = model.special_text(model.bos)
            add_bos = model.add_bos and not (bos and text.startswith(bos))
            if prompt.prefix_ids:  # an earlier prompt and answer (Ollama's `context`)
                self._check_ids(prompt.prefix_ids, "context")
                add_bos = False
            tokens = [*prompt.prefix_ids,
                      *model.tokenize(text, add_special=add_bos, parse_special=True)]
        elif prompt.suffix is not None:
            tokens = self._fill_in_the_middle(prompt)
        elif prompt.token_ids is not None:
            self._check_ids(prompt.token_ids, "prompt")
            tokens = list(prompt.token_ids)
        else:
            tokens = model.tokenize(prompt.text or "", add_special=True, parse_special=True)
        if not tokens:
            raise InvalidRequest("The prompt is empty.", param="prompt")
        return tokens

    def _check_ids(self, ids: tuple[int, ...], param: str) -> None:
        bad = [t for t in ids if not self.model.is_valid_token(t)]
        if bad:
            raise InvalidRequest(f"Token id {bad[0]} is outside the vocabulary "
                                 f"(0..{self.model.n_vocab - 1}).", param=param)

    def _fill_in_the_middle(self, prompt: TextInput) -> list[int]:
        fim = self.model.fim_tokens()
        if fim is None:
            raise InvalidRequest("This model does not support `suffix` (no fill-in-the-middle "
                                 "tokens).", param="suffix")
        pre, suf, mid = fim
        tokenize = self.model.tokenize
        return ([pre] + tokenize(prompt.text or "", add_special=False, parse_special=False)
                + [suf] + tokenize(prompt.suffix or "", add_special=False, parse_special=False)
                + [mid])

    def _check_length(self, text: str | None) -> None:
        """Refuse a text that has more tokens than the context holds, whatever they are:
        tokenizing it would take seconds of CPU per megabyte, to be refused anyway."""
        if text is None or len(text) <= self.context_length * MIN_LONGEST_PIECE:
            return  # it may fit: no token stands for fewer bytes than that
        fewest = self.model.fewest_tokens(len(text))  # (characters: at most its bytes)
        if fewest >= self.context_length:  # no room left for a token
            raise context_overflow(self.context_length, fewest, at_least=True)

    def _check_logit_bias(self, request: GenerationRequest) -> None:
        for token, _ in request.sampling.logit_bias:
            if not self.model.is_valid_token(token):
                raise InvalidRequest(f"logit_bias names token {token}, outside the vocabulary "
                                     f"(0..{self.model.n_vocab - 1}).", param="logit_bias")

    def _text(self, tokens: list[int]) -> str:
        raw = b"".join(self.model.piece(t) for t in tokens)
        return raw.decode("utf-8", errors="replace")


def _embedding_overflow(tokens: int, limit: int, param: str, *,
                        at_least: bool = False) -> ContextOverflow:
    some = "at least " if at_least else ""
    return ContextOverflow(
        f"This model embeds at most {limit} tokens per input (the least of its context, "
        f"its training context and the evaluation batch size), but an input has "
        f"{some}{tokens} tokens.",
        param=param, code="context_length_exceeded")


def _choice_sampling(sampling: SamplingParams, choice: int) -> SamplingParams:
    """Choices of one request draw differently even when the client fixed a seed."""
    if choice == 0 or sampling.seed is None:
        return sampling
    return replace(sampling, seed=sampling.seed + choice)
