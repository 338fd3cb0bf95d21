"""A scripted, deterministic engine for protocol tests (our `MockTransport`).

Enqueue a script per request: events are yielded in order, a float sleeps that
many seconds, an `asyncio.Event` holds the stream until the test sets it (a gate),
an exception instance is raised mid-stream, and `Generated` text
stands for raw model output: it goes through the same `OutputParser` as the real
engine's (tool calls in `tool_syntax` when the request has tools, reasoning in
`reasoning` markers), so parsing is tested on every path. With no script the
engine answers `default_reply` word by word, honouring `max_tokens` and the room
the context leaves (`engines/budget.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace

from parlance.core.embeddings import (
    EmbeddingInput,
    EmbeddingRequest,
    Embeddings,
    Normalize,
    unit,
)
from parlance.core.errors import ContextOverflow, InvalidRequest, ModelUnloaded, ParlanceError
from parlance.core.events import Event, Failed, Finish, FinishReason, TextDelta, Usage
from parlance.core.prompts import PromptInfo
from parlance.core.request import ChatInput, GenerationRequest, TextInput
from parlance.core.rerank import Reranked, RerankRequest
from parlance.core.scoring import PromptScores, ScoreRequest, Scores
from parlance.core.tokens import DetokenizeRequest, Token, TokenizeRequest
from parlance.engines.budget import output_budget
from parlance.engines.grammar import check_schemas
from parlance.engines.metrics import EngineMetrics
from parlance.engines.parsing.output import OutputParser
from parlance.engines.parsing.syntax import HERMES, THINK, ReasoningMarkers, ToolSyntax
from parlance.engines.reranking import by_yes_no


@dataclass(frozen=True, slots=True)
class Generated:
    """Raw text the scripted model generates for choice `index`."""

    text: str
    index: int = 0


ScriptItem = Event | Generated | float | BaseException | asyncio.Event


def _prompt_text(prompt: ChatInput | TextInput) -> str:
    if isinstance(prompt, ChatInput):
        return "\n".join(m.content for m in prompt.messages)
    if prompt.token_ids is not None:
        return " ".join(str(t) for t in prompt.token_ids)
    return prompt.text or ""


def _prompt_info(prompt: ChatInput | TextInput, text: str) -> PromptInfo:
    """Words are tokens; a word's id is its position (after a chat's `prefix_ids`)."""
    prefix = prompt.prefix_ids if isinstance(prompt, ChatInput) else ()
    ids = (*prefix, *range(len(text.split())))
    return PromptInfo(text, len(ids), ids)


def _stopped(reply: str, stops: Sequence[str]) -> tuple[str, str | None]:
    """The reply cut before the first stop string in it, and that string."""
    hits = [(reply.find(s), s) for s in stops if s and s in reply]
    if not hits:
        return reply, None
    at, stop = min(hits)
    return reply[:at], stop


def _mean_vector(tokens: Sequence[str], size: int) -> list[float]:
    total = [0.0] * size
    for token in tokens:
        digest = hashlib.sha256(token.encode()).digest()
        for i in range(size):
            total[i] += digest[i] / 127.5 - 1.0
    return [x / len(tokens) for x in total]


@dataclass
class FakeGeneration:
    script: Sequence[ScriptItem]
    prompts: tuple[PromptInfo, ...]
    new_parser: Callable[[int], OutputParser] | None = None
    cancelled: bool = False
    finished: bool = False
    yielded: list[Event] = field(default_factory=list)
    failure: ParlanceError | None = None  # set by abort(): the stream ends with it
    _woken: asyncio.Event = field(default_factory=asyncio.Event)
    _parsers: dict[int, OutputParser] = field(default_factory=dict)

    def cancel(self) -> None:
        self.cancelled = True
        self._woken.set()

    def abort(self, error: ParlanceError) -> None:
        """End the stream early with `Failed(error)`, as an engine does when it closes."""
        self.failure = error
        self._woken.set()

    async def __aiter__(self) -> AsyncIterator[Event]:
        for item in self.script:
            if self.cancelled:
                return
            if self.failure is not None:
                yield Failed(self.failure)
                return
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, float | int):
                with contextlib.suppress(TimeoutError):  # a cancel ends the pause at once
                    await asyncio.wait_for(self._woken.wait(), item)
                continue
            if isinstance(item, asyncio.Event):
                await self._until(item)
                continue
            for event in self._parsed(item):
                self.yielded.append(event)
                yield event
        if self.failure is not None and not self.cancelled:
            yield Failed(self.failure)
            return
        self.finished = True

    async def _until(self, gate: asyncio.Event) -> None:
        """Wait for the gate, or for a cancel (which ends the wait at once)."""
        waits = [asyncio.ensure_future(gate.wait()), asyncio.ensure_future(self._woken.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    def _parsed(self, item: Event | Generated) -> list[Event]:
        if self.new_parser is None:
            if isinstance(item, Generated):
                return [TextDelta(item.text, item.index)]
            return [item]
        if isinstance(item, Generated):
            if item.index not in self._parsers:
                self._parsers[item.index] = self.new_parser(item.index)
            return self._parsers[item.index].push(item.text)
        if isinstance(item, Finish) and item.index in self._parsers:
            parser = self._parsers[item.index]
            return [*parser.finish(), replace(item, reason=parser.finish_reason(item.reason))]
        return [item]


class FakeEngine:
    def __init__(self, *, context_length: int = 2048, default_reply: str = "Hello there!",
                 slots: int = 4, tool_syntax: ToolSyntax = HERMES,
                 reasoning: ReasoningMarkers | None = THINK, strict_max_tokens: bool = False):
        self.tool_syntax = tool_syntax
        self.strict_max_tokens = strict_max_tokens
        self.reasoning = reasoning
        self.context_length = context_length
        self.slots = slots
        self.default_reply = default_reply
        self.scripts: deque[list[ScriptItem]] = deque()
        self.requests: list[GenerationRequest] = []
        self.generations: list[FakeGeneration] = []
        self.embed_requests: list[EmbeddingRequest] = []
        # Log-probabilities of the continuations, one tuple per prompt scored; with none
        # queued a continuation scores minus its length in characters.
        self.score_scripts: deque[tuple[float, ...]] = deque()
        self.score_requests: list[ScoreRequest] = []
        self.vocabulary: list[str] = ["<s>"]  # a word's id: its place here (added when met)
        self.vocabulary_size = 49152  # ids past the words met are spelled "w<id>"
        self.embedding_size = 8
        self.metrics = EngineMetrics()

    def enqueue(self, *items: ScriptItem) -> None:
        self.scripts.append(list(items))

    async def start(self, request: GenerationRequest) -> FakeGeneration:
        prompts = tuple(
            _prompt_info(prompt, _prompt_text(prompt)) for prompt in request.prompts)
        budget = output_budget(max(p.n_tokens for p in prompts), request, self.context_length,
                               strict=self.strict_max_tokens)
        if request.n > self.slots:
            raise InvalidRequest(f"n is {request.n}; at most {self.slots}.", param="n")
        check_schemas(request)
        self.requests.append(request)
        script = (self.scripts.popleft() if self.scripts
                  else self._default_script(request, prompts, budget))
        generation = FakeGeneration(script, prompts, self._parser_factory(request))
        self.generations.append(generation)
        return generation

    async def count_tokens(self, request: GenerationRequest) -> int:
        return len(_prompt_text(request.prompts[0]).split())

    async def score(self, request: ScoreRequest) -> Scores:
        self.score_requests.append(request)
        results = []
        for prompt, continuations in zip(request.generation.prompts, request.continuations,
                                         strict=True):
            info = _prompt_info(prompt, _prompt_text(prompt))
            if info.n_tokens > self.context_length:
                raise ContextOverflow("The prompt does not fit the context.",
                                      param=request.param, code="context_length_exceeded")
            logprobs = (self.score_scripts.popleft() if self.score_scripts
                        else tuple(-float(len(c)) for c in continuations))
            results.append(PromptScores(logprobs, info.n_tokens, 0))
        return Scores(tuple(results))

    async def rerank(self, request: RerankRequest) -> Reranked:
        """As an instruct model: by its "yes" (the scores `score_scripts` holds)."""
        return await by_yes_no(self, request)

    async def tokenize(self, request: TokenizeRequest) -> tuple[Token, ...]:
        """Words are tokens, each followed by a space; `add_special` puts `<s>` (id 0)
        first."""
        ids = [0] if request.add_special else []
        for item in request.content:
            if isinstance(item, int):
                ids.append(self._check_token(item, "content"))
                continue
            for word in item.split():
                if word not in self.vocabulary:
                    self.vocabulary.append(word)
                ids.append(self.vocabulary.index(word))
        return tuple(Token(i, self._piece(i)) for i in ids)

    async def detokenize(self, request: DetokenizeRequest) -> str:
        return "".join(self._piece(self._check_token(t, "tokens")).decode()
                       for t in request.tokens)

    async def render_prompt(self, request: GenerationRequest) -> str:
        return _prompt_text(request.prompts[0])

    def _check_token(self, token: int, param: str) -> int:
        if not 0 <= token < self.vocabulary_size:
            raise InvalidRequest(f"Token id {token} is outside the vocabulary.", param=param)
        return token

    def _piece(self, token: int) -> bytes:
        word = self.vocabulary[token] if token < len(self.vocabulary) else f"w{token}"
        return word.encode() if token == 0 else f"{word} ".encode()

    async def embed(self, request: EmbeddingRequest) -> Embeddings:
        """Words are tokens; each word has a fixed pseudo-random vector (from its hash)
        and an input's vector is their mean: deterministic, and inputs sharing words
        are alike. The fake model's native vectors are raw (not unit length)."""
        if request.dimensions is not None and request.dimensions != self.embedding_size:
            raise InvalidRequest(f"This model's embeddings have {self.embedding_size} "
                                 "dimensions; it cannot make shorter ones.", param="dimensions")
        token_lists = [self._embedding_tokens(i, request) for i in request.inputs]
        self.embed_requests.append(request)
        self.metrics.embedding_inputs += len(token_lists)
        vectors = tuple(_mean_vector(tokens, self.embedding_size) for tokens in token_lists)
        if request.normalize is Normalize.UNIT:
            vectors = tuple(unit(v) for v in vectors)
        return Embeddings(vectors, sum(map(len, token_lists)))

    def _embedding_tokens(self, item: EmbeddingInput, request: EmbeddingRequest) -> list[str]:
        if item.token_ids is not None:
            if any(t < 0 for t in item.token_ids):
                raise InvalidRequest("Token ids are never negative.", param=request.param)
            tokens = [str(t) for t in item.token_ids]
        else:
            tokens = (item.text or "").split()
        if not tokens:
            raise InvalidRequest("An input is empty.", param=request.param)
        if len(tokens) > self.context_length:
            if not request.truncate:
                raise ContextOverflow(
                    f"This model's maximum context length is {self.context_length} tokens; "
                    f"an input has {len(tokens)}.", param=request.param,
                    code="context_length_exceeded")
            tokens = tokens[:self.context_length]
        return tokens

    def _parser_factory(self, request: GenerationRequest) -> Callable[[int], OutputParser]:
        tools = request.callable_tools
        syntax = self.tool_syntax if tools else None
        names = frozenset(t.name for t in tools)
        freeform = frozenset(t.name for t in tools if t.freeform)
        return lambda index: OutputParser(index, syntax=syntax, reasoning=self.reasoning,
                                          tool_names=names, freeform=freeform)

    def _default_script(
        self, request: GenerationRequest, prompts: tuple[PromptInfo, ...], limit: int
    ) -> list[ScriptItem]:
        """The default reply word by word, ending with `length` where `limit` (the
        request's max_tokens, or the room left in the context) runs out."""
        reply, matched = _stopped(self.default_reply, request.stop)
        words = reply.split(" ")
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
        script: list[ScriptItem] = []
        choices = len(prompts) * request.n
        for index in range(choices):
            script += [TextDelta(p, index=index) for p in pieces[:limit]]
            reason = FinishReason.LENGTH if limit < len(pieces) else FinishReason.STOP
            script.append(Finish(reason, index=index,
                                 stop_sequence=matched if reason is FinishReason.STOP else None))
        completion = min(limit, len(pieces)) * choices
        script.append(Usage(sum(p.n_tokens for p in prompts), completion, 0.01, 0.02))
        return script

    async def aclose(self) -> None:
        for generation in self.generations:
            if not (generation.finished or generation.cancelled):
                generation.abort(ModelUnloaded())
