"""Preparing a generation request for the llama.cpp engine: each prompt rendered by the
chat template and tokenized, checked against the context and the vocabulary, its output
budget, and the guide plan (the grammars of structured output and tool calls). It runs
on a worker thread (templates, tokens and grammars grow with the request), and
everything that can be refused is refused here, before the server commits to a
response. Tokenizing reads only the vocabulary: safe beside the decoding thread."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import llguidance

from parlance.core.errors import InvalidRequest
from parlance.core.prompts import PromptInfo
from parlance.core.request import ChatInput, GenerationRequest, PromptInput, TextInput
from parlance.engines.budget import context_overflow, output_budget
from parlance.engines.grammar import quoted
from parlance.engines.llamacpp.constraint import build_tokenizer
from parlance.engines.llamacpp.guide import GuidePlan
from parlance.engines.llamacpp.infill import fim_required, infill_tokens
from parlance.engines.llamacpp.model import MIN_LONGEST_PIECE, LlamaModel
from parlance.engines.llamacpp.plan import build_plan, render_chat
from parlance.engines.llamacpp.template import ChatTemplate


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request ready for the scheduler: each prompt's tokens and output budget, the
    prompts as evaluated, and the guide plan (None: unconstrained)."""

    token_lists: list[list[int]]
    budgets: list[int]
    prompts: tuple[PromptInfo, ...]
    plan: GuidePlan | None


class Preparation:
    """One model's request preparation (the engine's `template` and `strict_max_tokens`
    are these: a test may swap the template; see engines/budget.py for the other)."""

    def __init__(self, model: LlamaModel, template: ChatTemplate, *,
                 strict_max_tokens: bool = False) -> None:
        self.model = model
        self.template = template
        self.context_length = model.n_ctx
        self.strict_max_tokens = strict_max_tokens

    @cached_property
    def tokenizer(self) -> llguidance.LLTokenizer:
        """The vocabulary as llguidance sees it; built on the first constrained request."""
        return build_tokenizer(self.model.vocab)

    def prepare(self, request: GenerationRequest) -> Prepared:
        """Each prompt's tokens and budget, the prompts as evaluated, and the guide plan."""
        texts = [self.chat_text(p, request) for p in request.prompts]
        token_lists = [self.tokens(p, t, request) for p, t in zip(request.prompts, texts,
                                                                   strict=True)]
        plan = self._plan(request, next((t for t in texts if t is not None), None))
        budgets = [output_budget(len(tokens), request, self.context_length,
                                 strict=self.strict_max_tokens) for tokens in token_lists]
        prompts = tuple(PromptInfo(self.text(t), len(t), tuple(t)) for t in token_lists)
        return Prepared(token_lists, budgets, prompts, plan)

    def count(self, prompt: PromptInput, request: GenerationRequest) -> int:
        """The prompt's tokens, counted however many there are (no context check)."""
        return len(self.tokens(prompt, self.chat_text(prompt, request), request,
                               bounded=False))

    def check_logit_bias(self, request: GenerationRequest) -> None:
        for token, _ in request.sampling.logit_bias:
            if not self.model.is_valid_token(token):
                raise InvalidRequest(f"logit_bias names token {token}, outside the vocabulary "
                                     f"(0..{self.model.n_vocab - 1}).", param="logit_bias")

    def chat_text(self, prompt: PromptInput, request: GenerationRequest) -> str | None:
        """A chat prompt rendered by the template (None for a text prompt)."""
        if not isinstance(prompt, ChatInput):
            return None
        return render_chat(self.template, request, prompt.messages)

    def tokens(self, prompt: PromptInput, chat_text: str | None, request: GenerationRequest,
                *, bounded: bool = True) -> list[int]:
        """The prompt's tokens (`chat_text`: a chat prompt as rendered). `bounded`: a text
        too long for the context is refused before it is tokenized."""
        model = self.model
        if bounded:
            texts = ((prompt.text, prompt.suffix, prompt.cursor,
                      *(e.text for e in prompt.extra)) if isinstance(prompt, TextInput)
                     else ())
            for text in (chat_text, *texts):
                self._check_length(text)
        if isinstance(prompt, ChatInput):
            text = (chat_text if chat_text is not None
                    else render_chat(self.template, request, prompt.messages))
            bos = model.special_text(model.bos)
            add_bos = model.add_bos and not (bos and text.startswith(bos))
            if prompt.prefix_ids:  # an earlier prompt and answer (Ollama's `context`)
                self.check_ids(prompt.prefix_ids, "context")
                add_bos = False
            tokens = [*prompt.prefix_ids,
                      *model.tokenize(text, add_special=add_bos, parse_special=True)]
        elif prompt.infill:
            tokens = infill_tokens(self.model, prompt, self.context_length,
                                   request.max_tokens or 0)
        elif prompt.suffix is not None:
            tokens = self._fill_in_the_middle(prompt)
        elif prompt.token_ids is not None:
            self.check_ids(prompt.token_ids, "prompt")
            tokens = list(prompt.token_ids)
        else:
            tokens = model.tokenize(prompt.text or "", add_special=True, parse_special=True)
        if not tokens:
            raise InvalidRequest("The prompt is empty.", param="prompt")
        return tokens

    def text(self, tokens: list[int]) -> str:
        raw = b"".join(self.model.piece(t) for t in tokens)
        return raw.decode("utf-8", errors="replace")

    def _plan(self, request: GenerationRequest, chat_text: str | None) -> GuidePlan | None:
        """The guide plan, from the first chat prompt as rendered (none without one)."""
        if chat_text is None:
            return None
        return build_plan(request, self.template, chat_text, self.tokenizer,
                          self.model.n_vocab, self._literal, self._marker_tokens)

    def _marker_tokens(self, marker: str) -> list[int]:
        return self.model.tokenize(marker, add_special=False, parse_special=True)

    def _literal(self, marker: str) -> str:
        """A syntax marker in a grammar: by token id when it is one special token, to
        llama.cpp (a control token) or to llguidance, which takes a user-defined token
        spelled `<...>` (Qwen's `<tool_call>`) for a special one no text can spell."""
        ids = self.model.tokenize(marker, add_special=False, parse_special=True)
        if len(ids) == 1 and (self.tokenizer.is_special_token(ids[0])
                              or ids != self.model.tokenize(marker, add_special=False,
                                                            parse_special=False)):
            return f"<[{ids[0]}]>"
        return quoted(marker)

    def check_ids(self, ids: tuple[int, ...], param: str) -> None:
        bad = [t for t in ids if not self.model.is_valid_token(t)]
        if bad:
            raise InvalidRequest(f"Token id {bad[0]} is outside the vocabulary "
                                 f"(0..{self.model.n_vocab - 1}).", param=param)

    def _fill_in_the_middle(self, prompt: TextInput) -> list[int]:
        pre, suf, mid = fim_required(self.model, "suffix")
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
