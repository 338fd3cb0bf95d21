"""The translator for each call layout that is not JSON (syntax.py's `layout`)."""

from __future__ import annotations

from parlance.engines.parsing.gemma4 import Gemma4Call
from parlance.engines.parsing.pythonic import PythonicCalls
from parlance.engines.parsing.translate import KeyedCalls, Translator

_TRANSLATORS: dict[str, type[Translator]] = {
    "keyed": KeyedCalls, "pythonic": PythonicCalls, "gemma4": Gemma4Call}


def translator(layout: str) -> Translator:
    return _TRANSLATORS[layout]()
