"""Running a grammar on text: a vocabulary of the 256 bytes, so any text is tokens,
and whether a grammar accepts exactly a given text (shared by the grammar tests)."""

from __future__ import annotations

import llguidance


class _Bytes:
    """A vocabulary of the 256 bytes and an end token, for running grammars on text."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids = [256]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


BYTES = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))


def accepts(source: str, text: str) -> bool:
    """Whether the grammar accepts exactly `text`."""
    matcher = llguidance.LLMatcher(BYTES, source, log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    tokens = BYTES.tokenize_str(text)
    return (matcher.validate_tokens(tokens) == len(tokens) and matcher.consume_tokens(tokens)
            and matcher.is_accepting())
