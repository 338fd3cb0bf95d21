"""The draft model's vocabulary check, without loading a model: llama.cpp's rules for a
draft (common/speculative.cpp) on two vocabulary descriptions. A real draft of another
vocabulary is refused in test_draft_model_real_engine.py."""

from __future__ import annotations

from dataclasses import replace

from parlance.engines.llamacpp.draft_model import (
    FIRST_CHECKED_TOKEN,
    MAX_VOCAB_DIFFERENCE,
    Vocabulary,
    vocabulary_mismatch,
)

TEXTS = {i: f"tok{i}".encode() for i in range(1000)}
TARGET = Vocabulary(kind=2, size=1000, add_bos=False, bos=1, add_eos=False, eos=2,
                    text=TEXTS.__getitem__)


def with_texts(**changed: bytes) -> Vocabulary:
    texts = {**TEXTS, **{int(k[1:]): v for k, v in changed.items()}}
    return replace(TARGET, text=texts.__getitem__)


def test_the_same_vocabulary_drafts():
    assert vocabulary_mismatch(TARGET, TARGET) is None
    assert vocabulary_mismatch(TARGET, replace(TARGET, text=dict(TEXTS).__getitem__)) is None


def test_another_kind_of_tokenizer_is_refused():
    assert "another kind" in (vocabulary_mismatch(TARGET, replace(TARGET, kind=3)) or "")


def test_other_begin_and_end_tokens_are_refused_only_where_the_tokenizer_adds_them():
    assert vocabulary_mismatch(TARGET, replace(TARGET, bos=7)) is None  # never added
    adds = replace(TARGET, add_bos=True)
    assert "begins" in (vocabulary_mismatch(adds, replace(adds, bos=7)) or "")
    assert "begins" in (vocabulary_mismatch(adds, TARGET) or "")
    ends = replace(TARGET, add_eos=True)
    assert "ends" in (vocabulary_mismatch(ends, replace(ends, eos=7)) or "")


def test_sizes_may_differ_by_a_few_padding_tokens_only():
    texts = {i: f"tok{i}".encode() for i in range(1000 + MAX_VOCAB_DIFFERENCE + 1)}
    padded = replace(TARGET, size=1000 + MAX_VOCAB_DIFFERENCE, text=texts.__getitem__)
    assert vocabulary_mismatch(TARGET, padded) is None
    message = vocabulary_mismatch(TARGET, replace(padded, size=padded.size + 1))
    assert message is not None and "1129 tokens" in message


def test_one_token_of_another_text_is_refused_naming_it():
    message = vocabulary_mismatch(TARGET, with_texts(t999=b"other"))
    assert message == "token 999 is b'other' in it, b'tok999' in the model"
    # The first few ids are control tokens models number differently.
    assert vocabulary_mismatch(TARGET, with_texts(t0=b"<s>")) is None
    assert vocabulary_mismatch(TARGET, with_texts(**{f"t{FIRST_CHECKED_TOKEN}": b"x"}))
