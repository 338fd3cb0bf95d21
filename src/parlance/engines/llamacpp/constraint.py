"""Grammar-constrained sampling with llguidance on llama.cpp logits.

Before a constrained sequence samples, the tokens its grammar forbids get a
logit of -inf in the context's own output row, so whichever sampler runs next
(greedy argmax or a llama.cpp chain) can only pick an allowed token. A stateless
greedy pick is checked first instead and the row masked only when the grammar
rejects it, as llama.cpp's own sampler does: the model keeps its own pick
whenever that is valid, and an accepted pick costs no mask over the whole vocabulary
(how often that happens is not measured by bench/).
(llguidance's mask may leave out a valid token for a longer one that spells the
same text, so the two ways can tokenize valid output differently.)
"""

from __future__ import annotations

import warnings

import llama_cpp
import llguidance
import llguidance.llamacpp
import numpy as np


def build_tokenizer(vocab: llama_cpp.llama_vocab_p) -> llguidance.LLTokenizer:
    """llguidance's view of the vocabulary (~0.3 s for SmolLM2; built once per model)."""
    with warnings.catch_warnings():  # it calls a binding llama-cpp-python marks deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        return llguidance.llamacpp.lltokenizer_from_vocab(vocab)


class TokenConstraint:
    """One sequence's grammar state: masks logits, follows the sampled tokens."""

    def __init__(self, matcher: llguidance.LLMatcher, tokenizer: llguidance.LLTokenizer,
                 n_vocab: int) -> None:
        self._matcher = matcher
        self._tokenizer = tokenizer
        self._n_vocab = n_vocab
        self._mask = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)

    @property
    def stopped(self) -> bool:
        """The grammar is complete: nothing but end-of-sequence may follow."""
        return self._matcher.is_stopped()

    @property
    def failed(self) -> bool:
        return self._matcher.is_error()

    @property
    def error(self) -> str:
        return self._matcher.get_error()

    def apply(self, row: np.ndarray) -> bool:
        """Forbid, in this logits row (written in place), every token the grammar
        rejects; False when nothing can extend the output (a grammar that accepts no
        value here): llguidance then allows only the end of the text, and fails, and
        whatever is sampled from that row is no output of the grammar."""
        self._matcher.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
        if self._matcher.is_error() or not self._mask.any():
            return False
        allowed = np.unpackbits(self._mask.view(np.uint8), count=self._n_vocab,
                                bitorder="little").view(bool)
        np.copyto(row, -np.inf, where=~allowed)
        return True

    def allows(self, token: int) -> bool:
        """Whether the grammar accepts `token` next (cheap: no mask is built)."""
        return self._matcher.validate_tokens([token]) == 1

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of `tokens`, in order, the grammar would accept (state unchanged)."""
        return self._matcher.validate_tokens(tokens)

    def accept(self, token: int) -> bool:
        return self._matcher.consume_token(token)

    def accept_text(self, text: str) -> bool:
        """Text the model produced before the grammar engaged (after a trigger)."""
        return not text or self._matcher.consume_tokens(self._tokenizer.tokenize_str(text))
