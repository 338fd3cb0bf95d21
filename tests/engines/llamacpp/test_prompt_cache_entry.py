"""`common_prefix`, the measure both tiers of the prompt cache look up by."""

from __future__ import annotations

import pytest

from parlance.engines.llamacpp.prompt_cache_entry import common_prefix


@pytest.mark.parametrize(("a", "b", "n"), [
    ([], [1], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2), ([1, 2, 3], [2], 0),
    (list(range(5000)), [*range(4321), -1], 4321), ((1, 2, 9), [1, 2, 3], 2),
])
def test_common_prefix(a, b, n):
    assert common_prefix(a, b) == n == common_prefix(b, a)

