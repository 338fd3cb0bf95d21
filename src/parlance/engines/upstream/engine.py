"""UpstreamEngine: a model served by streaming from OpenAI-compatible servers.

`start()` sends each upstream request (one per choice, see `wire.sub_requests`)
through the `Opener` (`opening.py`: failover among the replicas until one answers)
and hands the opened streams to an `UpstreamGeneration` (`generation.py`), which
merges them into one stream of events. Counting tokens and embedding go through the
same opener.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from parlance.core.embeddings import EmbeddingRequest, Embeddings, Normalize, unit
from parlance.core.errors import (
    ContextOverflow,
    InvalidRequest,
    ModelUnloaded,
    NotImplementedHere,
    UpstreamFailure,
)
from parlance.core.request import GenerationRequest
from parlance.core.rerank import Reranked, RerankRequest
from parlance.core.scoring import ScoreRequest, Scores
from parlance.core.tokens import DetokenizeRequest, Token, TokenizeRequest
from parlance.engines.metrics import EngineMetrics
from parlance.engines.upstream.affinity import prefix_keys
from parlance.engines.upstream.chunks import ChoiceMapper, StreamError
from parlance.engines.upstream.counting import tokenizer_count
from parlance.engines.upstream.generation import Running, UpstreamGeneration
from parlance.engines.upstream.http1 import UpstreamHTTPError
from parlance.engines.upstream.opening import Opener
from parlance.engines.upstream.pool import Pool
from parlance.engines.upstream.scoring import score_first_tokens
from parlance.engines.upstream.sse import DONE, SseSplitter, payloads, too_large
from parlance.engines.upstream.tool_contract import ToolContract
from parlance.engines.upstream.wire import EMBEDDINGS_PATH, SubRequest, request_body, sub_requests


class UpstreamEngine:
    """One model of the fleet behind the engine seam: its replicas (`pool`), what they
    said about themselves, and the generations running on them."""

    def __init__(self, pool: Pool, *, strict_max_tokens: bool = False) -> None:
        self.strict_max_tokens = strict_max_tokens  # see clips()
        self.pool = pool
        self.model = pool.model
        self.metrics = EngineMetrics()
        self.context_length = 0
        self.slots = 1
        self._opener = Opener(pool)
        self._running = Running(self.metrics)
        self._closed = False
        self.refresh()

    def refresh(self) -> None:
        """What the replicas said about themselves (the fleet calls this after each
        health check): the smallest context any replica gives this model, and the
        sequences they decode together."""
        replicas = self.pool.replicas
        lengths = [n for r in replicas if (n := r.context_lengths.get(self.model))]
        self.context_length = min(lengths) if lengths else 0
        self.slots = max(1, sum(r.slots or 1 for r in replicas))
        self.metrics.slots_total = self.slots

    # -- the engine seam ----------------------------------------------------------

    async def start(self, request: GenerationRequest) -> UpstreamGeneration:
        if self._closed:
            raise ModelUnloaded()
        contract = ToolContract.of(request)  # refuses a schema it cannot check, first
        subs = sub_requests(request, self.model)
        keys = {p: prefix_keys(request, prompt) for p, prompt in enumerate(request.prompts)}
        started = time.perf_counter()
        clip = self.clips(request)
        opened = await self._opener.open_all(subs, keys, clip=clip)
        generation = UpstreamGeneration(self._opener, self._running, request, opened, keys, clip,
                                        started, contract)
        self._running.add(generation)
        return generation

    def clips(self, request: GenerationRequest) -> bool:
        """max_tokens is a ceiling (engines/budget.py): a replica that finds the prompt
        and max_tokens together too long for its context is asked again without
        max_tokens, and stops where its context ends; unless the server or the request
        is strict, when its refusal is passed on."""
        return not (self.strict_max_tokens or request.strict_max_tokens)

    async def score(self, request: ScoreRequest) -> Scores:
        """From the top log-probabilities of the answer's first token, which the
        upstream returns on chat completions: one-token labels only (scoring.py)."""
        return await score_first_tokens(self.start, request, self.model)

    async def rerank(self, request: RerankRequest) -> Reranked:
        raise self._not_here("rerank (forward rerank requests to that server itself)")

    async def tokenize(self, request: TokenizeRequest) -> tuple[Token, ...]:
        raise self._not_here("tokenize")

    async def detokenize(self, request: DetokenizeRequest) -> str:
        raise self._not_here("detokenize")

    async def render_prompt(self, request: GenerationRequest) -> str:
        raise self._not_here("render its prompts")

    def _not_here(self, what: str) -> NotImplementedHere:
        return NotImplementedHere(
            f"The model '{self.model}' is served by an upstream server, whose tokenizer and "
            f"template this server does not hold: it cannot {what}. Ask that server.",
            param="model")

    async def count_tokens(self, request: GenerationRequest) -> int:
        """The prompt tokens the upstream evaluates for the first prompt: by its own
        tokenizer endpoint where it has one (`counting.py`), else from the usage of a
        one-token generation, which every OpenAI-compatible server reports and which
        leaves the prompt in that replica's cache for the request to come."""
        prompt = request.prompts[0]
        replica = self.pool.choose(prefix_keys(request, prompt))
        if replica is not None:
            try:
                counted = await tokenizer_count(replica, self.model, request, prompt)
            finally:
                replica.release()
            if counted is not None:
                return counted
        counting = replace(request, n=1, logprobs=None, echo=False, max_tokens=1)
        path, body = request_body(counting, prompt, self.model)
        sub = SubRequest(path, body, 0, 0, True)
        opened = await self._opener.open(sub, prefix_keys(request, prompt))
        mapper = ChoiceMapper(0)
        splitter = SseSplitter(opened.replica.max_event_bytes)

        def feed(datas: list[bytes]) -> None:
            for chunk in payloads(datas):
                if chunk is not DONE:
                    mapper.feed(chunk)

        try:
            await opened.response.stream(lambda raw: feed(splitter.feed(raw)))
            feed(splitter.end())
        except StreamError as exc:
            raise exc.error from None
        except UpstreamHTTPError as exc:
            opened.replica.failed(at_once=True)
            raise UpstreamFailure(f"The upstream replica {opened.replica.label} failed while "
                                  f"counting tokens: {exc}", code="upstream_disconnected") from None
        finally:
            await opened.close()
        usage = mapper.usage()
        if not usage.reported:
            raise NotImplementedHere("The upstream server of this model does not report token "
                                     "usage, so its tokens cannot be counted.")
        return usage.prompt_tokens

    async def embed(self, request: EmbeddingRequest) -> Embeddings:
        """One vector per input from the upstream's `/v1/embeddings`."""
        inputs: list[Any] = [list(i.token_ids) if i.token_ids is not None else i.text or ""
                             for i in request.inputs]
        body: dict[str, Any] = {"model": self.model, "input": inputs,
                                "encoding_format": "float"}
        if request.dimensions is not None:
            body["dimensions"] = request.dimensions
        try:
            opened = await self._opener.open(SubRequest(EMBEDDINGS_PATH, body, 0, 0, True), ())
        except ContextOverflow as exc:
            raise ContextOverflow(exc.message, param=request.param, code=exc.code) from None
        limit = opened.replica.max_event_bytes  # the bound of one event of a stream
        try:
            raw = await opened.response.aread(limit + 1)
        except UpstreamHTTPError as exc:
            opened.replica.failed(at_once=True)
            raise UpstreamFailure(f"The upstream replica {opened.replica.label} failed while "
                                  f"embedding: {type(exc).__name__}",
                                  code="upstream_disconnected") from None
        finally:
            await opened.close()
        if len(raw) > limit:
            raise too_large(f"The upstream server answered embeddings larger than {limit} "
                            "bytes")
        try:
            reply = json.loads(raw)
            data = sorted(reply["data"], key=lambda d: d["index"])
            vectors = [[float(x) for x in d["embedding"]] for d in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamFailure("The upstream server answered embeddings in a shape this "
                                  "server does not read.") from exc
        if len(vectors) != len(inputs):
            raise UpstreamFailure(f"The upstream server returned {len(vectors)} vectors for "
                                  f"{len(inputs)} inputs.")
        if request.dimensions is not None and any(len(v) != request.dimensions
                                                  for v in vectors):
            raise InvalidRequest(f"This model's vectors do not have {request.dimensions} "
                                 "dimensions.", param="dimensions")
        if request.normalize is Normalize.UNIT:
            vectors = [unit(v) for v in vectors]
        usage = reply.get("usage") if isinstance(reply, dict) else None
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return Embeddings(tuple(vectors), tokens if isinstance(tokens, int) else 0)

    async def aclose(self) -> None:
        self._closed = True
        self._running.abort_all(ModelUnloaded())
