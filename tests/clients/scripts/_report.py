"""What every client script prints: one JSON object, each part's results or the
exception it raised (its class and message), so the test shows which call failed."""

import json
import sys
from collections.abc import Callable


def report(parts: dict[str, Callable[[], dict]]) -> None:
    out: dict = {}
    for name, run in parts.items():
        try:
            out[name] = run()
        except Exception as error:
            out[name] = {"error": f"{type(error).__name__}: {error}"}
    json.dump(out, sys.stdout)
