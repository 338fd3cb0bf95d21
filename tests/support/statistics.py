"""Goodness of fit without scipy: Pearson's chi-square statistic and a generous
critical value (Wilson–Hilferty's normal approximation of the chi-square quantile)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def chi_square(observed: Mapping[int, int], expected: Mapping[int, float]) -> float:
    """Pearson's statistic; every observed key must be expected (a token the target
    gives probability 0 fails at once)."""
    unexpected = set(observed) - set(expected)
    assert not unexpected, f"outcomes the target never gives: {unexpected}"
    return sum((observed.get(k, 0) - e) ** 2 / e for k, e in expected.items())


def critical_value(degrees: int, z: float = 4.0) -> float:
    """The chi-square value `z` standard deviations out (z = 4: a false alarm about
    once in 30,000 runs)."""
    k = max(1, degrees)
    return float(k * (1 - 2 / (9 * k) + z * (2 / (9 * k)) ** 0.5) ** 3)


def pooled(counts: Mapping[int, int], probabilities: Mapping[int, float], total: int,
           min_expected: float = 5.0) -> tuple[dict[int, int], dict[int, float]]:
    """Outcomes expected fewer than `min_expected` times are pooled into one (key -1),
    as the chi-square approximation needs."""
    observed: dict[int, int] = {}
    expected: dict[int, float] = {}
    for key, p in probabilities.items():
        target = key if p * total >= min_expected else -1
        expected[target] = expected.get(target, 0.0) + p * total
        observed[target] = observed.get(target, 0) + counts.get(key, 0)
    for key, count in counts.items():
        if key not in probabilities:
            observed[key] = observed.get(key, 0) + count
    return observed, expected


def frequencies(samples: Sequence[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for s in samples:
        out[s] = out.get(s, 0) + 1
    return out
