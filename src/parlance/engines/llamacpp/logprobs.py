"""Log-probabilities of the model's raw distribution at one output row."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from parlance.core.events import TopLogprob


def log_softmax_row(logits_row: np.ndarray) -> np.ndarray:
    logits = logits_row.astype(np.float64)
    peak = logits.max()
    return logits - (peak + np.log(np.exp(logits - peak).sum()))


def top_alternatives(
    row: np.ndarray, k: int, describe: Callable[[int], tuple[str, bytes]]
) -> tuple[TopLogprob, ...]:
    """The k most likely tokens, best first; `describe` maps a token to (text, bytes)."""
    if k <= 0:
        return ()
    best = np.argpartition(row, -k)[-k:]
    best = best[np.argsort(row[best])[::-1]]
    out = []
    for token in best.tolist():
        text, raw = describe(token)
        out.append(TopLogprob(text, float(row[token]), tuple(raw)))
    return tuple(out)
