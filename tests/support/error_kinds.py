"""Every kind of `ParlanceError`, found by walking the class tree (so a new kind cannot
be left out), and an instance of each: what tests render in every envelope."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from parlance.core.errors import ParlanceError

# A value for each constructor parameter an error kind may require
SAMPLES: dict[str, Any] = {"message": "Something is wrong.", "model": "no-such-model",
                           "limit": 8, "configured": False}


def kinds(cls: type[ParlanceError] = ParlanceError) -> Iterator[type[ParlanceError]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from kinds(sub)


ALL_KINDS = sorted(set(kinds()), key=lambda cls: cls.__name__)


def instance(cls: type[ParlanceError]) -> ParlanceError:
    required = {name: param for name, param in inspect.signature(cls).parameters.items()
                if param.default is inspect.Parameter.empty
                and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD)}
    missing = set(required) - set(SAMPLES)
    assert not missing, f"add a sample value for {cls.__name__}'s {sorted(missing)}"
    return cls(**{name: SAMPLES[name] for name in required})
