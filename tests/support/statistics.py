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


def homogeneity(a: Mapping[int, int], b: Mapping[int, int], min_count: int = 10
                ) -> tuple[float, int]:
    """Chi-square statistic and degrees of freedom of two equally large samples drawn
    from the same distribution (a 2×K table: Σ (a−b)² / (a+b)); outcomes seen fewer
    than `min_count` times in both samples together are pooled into one."""
    pooled_a: dict[int, int] = {}
    pooled_b: dict[int, int] = {}
    for key in set(a) | set(b):
        target = key if a.get(key, 0) + b.get(key, 0) >= min_count else -1
        pooled_a[target] = pooled_a.get(target, 0) + a.get(key, 0)
        pooled_b[target] = pooled_b.get(target, 0) + b.get(key, 0)
    statistic = sum((pooled_a[k] - pooled_b[k]) ** 2 / (pooled_a[k] + pooled_b[k])
                    for k in pooled_a if pooled_a[k] + pooled_b[k])
    return statistic, len(pooled_a) - 1
