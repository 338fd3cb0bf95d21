"""The calls an output parser read, for the parsing and forced-grammar tests: each
call's name and its arguments' text (all fragments joined), or the arguments decoded."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from parlance.core.events import Event, ToolCallArgs, ToolCallStart
from parlance.engines.parsing.output import OutputParser
from parlance.engines.parsing.syntax import ToolSyntax


def call_texts(events: Iterable[Event]) -> list[tuple[str, str]]:
    calls: list[list[str]] = []
    for event in events:
        if isinstance(event, ToolCallStart):
            calls.append([event.name, ""])
        elif isinstance(event, ToolCallArgs):
            calls[-1][1] += event.fragment
    return [(name, arguments) for name, arguments in calls]


def parsed_calls(syntax: ToolSyntax, text: str, schemas: Mapping[str, Any], *,
                 markup: tuple[str, ...] = (), streamed: bool = False
                 ) -> list[tuple[str, Any]]:
    """`text` through a parser for tools with these `schemas`: whole, or (`streamed`) a
    character at a time."""
    parser = OutputParser(0, syntax=syntax, tool_names=frozenset(schemas),
                          schemas=dict(schemas), markup=markup)
    pieces = list(text) if streamed else [text]
    events = [e for piece in pieces for e in parser.push(piece)] + parser.finish()
    return [(name, json.loads(arguments)) for name, arguments in call_texts(events)]
