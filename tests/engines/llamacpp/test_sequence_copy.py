"""`kv_state.copy_sequence` across KV streams, on SmolLM2: the copy holds the source's
cells as they were when it was made. llama.cpp's own copy across streams moves the
buffer only at the next decode, so a state restored into the source before then (the
slot table does this when two prompts take slots in one step) reached the copy too."""

from __future__ import annotations

from collections.abc import Iterator

import llama_cpp
import numpy as np
import pytest

from parlance.engines.llamacpp.batch import DECODED, Batch
from parlance.engines.llamacpp.kv_state import LlamaSequenceStates, copy_sequence
from parlance.engines.llamacpp.model import ContextSettings, LlamaModel
from tests.support.real_engine import model_path

pytestmark = pytest.mark.model

# Batch-invariant: a row's logits do not depend on the batch, so they can be compared
SETTINGS = ContextSettings(n_ctx=256, n_threads=2, parallel=2, n_batch=64,
                           batch_invariant=True)


@pytest.fixture
def model() -> Iterator[LlamaModel]:
    loaded = LlamaModel(model_path(), SETTINGS)
    try:
        yield loaded
    finally:
        loaded.close()


def evaluate(model: LlamaModel, seq: int, tokens: list[int], start: int = 0) -> np.ndarray:
    """Feed `tokens` to `seq` from position `start`; the last one's logits (a copy)."""
    batch = Batch(SETTINGS.n_batch)
    try:
        for pos, token in enumerate(tokens, start):
            batch.add(token, pos, seq, output=pos == start + len(tokens) - 1)
        assert batch.decode(model.ctx) == DECODED
        return np.array(model.logits(len(tokens) - 1))
    finally:
        batch.free()


def test_a_copy_across_streams_keeps_the_cells_it_was_made_of(model: LlamaModel) -> None:
    story = model.tokenize("The lighthouse keeper counted the ships at dawn, as always.",
                           add_special=True, parse_special=False)
    other = model.tokenize("Rain fell on the market; nobody bought the blue umbrellas.",
                           add_special=True, parse_special=False)
    states = LlamaSequenceStates(model)
    evaluate(model, 0, other)
    other_state = states.read(0)
    llama_cpp.llama_memory_seq_rm(model.memory, 0, -1, -1)
    evaluate(model, 0, story[:-1])
    reference = evaluate(model, 0, story[-1:], len(story) - 1)
    llama_cpp.llama_memory_seq_rm(model.memory, 0, len(story) - 1, -1)

    assert copy_sequence(model, 0, 1)
    assert states.write(0, other_state)  # the source changes before any decode
    copied = evaluate(model, 1, story[-1:], len(story) - 1)
    np.testing.assert_array_equal(copied, reference)
