"""Regex patterns llguidance compiles but cannot run.

Its lexer builds its states lazily, as the output reaches each lexeme, within fixed
limits; a `pattern` such as `^a{1000000}$` compiles, then breaks the matcher at the
first token that goes into it (`too many expressions constructed`). Each pattern of a
request's schemas is tried alone on the model's tokenizer before the response starts
(the string's opening quote, then one token of its text), so such a schema is refused
naming the client's parameter instead of breaking mid-answer. A limit reached later
than that is the guide's to report (`ChoiceGuide.broken`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import llguidance
import numpy as np

from parlance.core.errors import InvalidRequest
from parlance.core.request import GenerationRequest
from parlance.engines.grammar import JSON_LAYOUT

# Keywords whose values are data, not schemas: a "pattern" inside them constrains nothing.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples", "example"})
# Keywords whose values map names to schemas (a property may be called "default").
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                          "dependentSchemas"})


def patterns(schema: Any) -> Iterator[str]:
    """Every regex in a JSON Schema: `pattern` values and `patternProperties` keys."""
    stack: list[tuple[Any, bool]] = [(schema, False)]  # (node, a map of names to schemas)
    while stack:
        node, names = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        if names:
            stack.extend((value, False) for value in node.values())
            continue
        if isinstance(node.get("pattern"), str):
            yield node["pattern"]
        if isinstance(node.get("patternProperties"), dict):
            yield from (key for key in node["patternProperties"] if isinstance(key, str))
        stack.extend((value, key in _SCHEMA_MAPS) for key, value in node.items()
                     if key not in _DATA_KEYWORDS)


def pattern_problem(pattern: str, tokenizer: llguidance.LLTokenizer) -> str | None:
    """Why llguidance cannot run `pattern` on this tokenizer, or None when it can
    (a pattern it cannot compile at all is `check_schemas`' to refuse)."""
    schema = {"type": "string", "pattern": pattern, "x-guidance": JSON_LAYOUT}
    grammar = llguidance.LLMatcher.grammar_from_lark(f"start: %json {json.dumps(schema)}")
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    if matcher.is_error():
        return None
    for _ in range(2):  # the quote, then a token of the string
        if matcher.is_stopped():
            return None
        allowed = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8),
                                bitorder="little")[:tokenizer.vocab_size]
        if not allowed.any():  # a pattern nothing matches: not a question of size
            return None
        matcher.consume_token(int(np.argmax(allowed)))
        if matcher.is_error():
            return matcher.get_error().splitlines()[0]
    return None


def check_patterns(request: GenerationRequest, tokenizer: llguidance.LLTokenizer) -> None:
    """Refuse, naming the client's parameter, a schema with a pattern too big to enforce."""
    schemas: list[tuple[Any, str]] = []
    fmt = request.response_format
    if fmt is not None and fmt.schema is not None:
        schemas.append((fmt.schema, fmt.param))
    schemas += [(tool.parameters, tool.param) for tool in request.callable_tools
                if not tool.freeform]
    for schema, param in schemas:
        for pattern in dict.fromkeys(patterns(schema)):
            problem = pattern_problem(pattern, tokenizer)
            if problem:
                shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
                raise InvalidRequest(
                    f"The pattern {shown!r} in {param} cannot be enforced: it is too large "
                    f"for the grammar engine ({problem}).", param=param, code="invalid_schema")
