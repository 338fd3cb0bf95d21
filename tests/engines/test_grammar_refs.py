"""Schemas with `$defs` / `$ref` compile as they would on their own, wherever a schema
becomes a grammar: a forced call and a lazy call region in every call syntax, and
structured output (alone, after reasoning, or beside calls). The schemas are the ones
clients send: pydantic models (nested, recursive), mistral-vibe's `todo` tool,
zod-to-json-schema's `definitions`, the OpenAI Agents SDK's strict schemas, and a tree
whose children refer to the root (`"$ref": "#"`), which must resolve to the tool's own
schema, never to the call object around it.

The grammars are run by llguidance over a byte-level vocabulary: no model needed."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Literal

import jsonschema
import llguidance
import pytest
from pydantic import BaseModel

from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import ResponseFormat, ToolSpec
from parlance.engines import grammar
from parlance.engines.parsing.syntax import HERMES, LLAMA3_JSON, MISTRAL, ToolSyntax
from tests.support.grammar_text import BYTES, accepts

# -- the schemas clients send ------------------------------------------------------------


class Address(BaseModel):
    street: str
    city: str


class Person(BaseModel):  # a model with a nested model: `$defs` and `#/$defs/…`
    name: str
    home: Address
    previous: list[Address]


class Node(BaseModel):  # a recursive model: a root `$ref` beside its `$defs`
    label: str
    children: list[Node]


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Pets(BaseModel):  # `anyOf` of refs, and a nullable ref
    pets: list[Cat | Dog]
    favourite: Cat | None


class TodoStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class TodoPriority(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class TodoItem(BaseModel):
    id: str
    content: str
    status: TodoStatus = TodoStatus.PENDING
    priority: TodoPriority = TodoPriority.MEDIUM


class TodoArgs(BaseModel):
    action: Literal["read", "write"]
    todos: list[TodoItem] | None = None


# mistral-vibe's `todo` tool as it sends it (the pydantic schema of its arguments):
# refs with siblings (`default`), enums through refs, a nullable array of refs.
TODO = TodoArgs.model_json_schema()

# zod-to-json-schema: `definitions` and `#/definitions/…`, a recursive definition, and
# a repeated schema referred to by its path from the root.
ZOD_TREE = {
    "type": "object",
    "properties": {
        "tree": {"$ref": "#/definitions/Tree"},
        "home": {"type": "object", "properties": {"city": {"type": "string"}},
                 "required": ["city"], "additionalProperties": False},
        "work": {"$ref": "#/properties/home"},
    },
    "required": ["tree", "home", "work"],
    "additionalProperties": False,
    "definitions": {"Tree": {
        "type": "object",
        "properties": {"value": {"type": "number"},
                       "children": {"type": "array", "items": {"$ref": "#/definitions/Tree"}}},
        "required": ["value", "children"], "additionalProperties": False}},
    "$schema": "http://json-schema.org/draft-07/schema#",
}

# The OpenAI Agents SDK's strict schema of a function tool's arguments.
AGENTS_STRICT = {
    "$defs": {"Step": {
        "properties": {"explanation": {"title": "Explanation", "type": "string"},
                       "output": {"title": "Output", "type": "string"}},
        "required": ["explanation", "output"], "title": "Step", "type": "object",
        "additionalProperties": False}},
    "properties": {
        "steps": {"items": {"$ref": "#/$defs/Step"}, "title": "Steps", "type": "array"},
        "check": {"anyOf": [{"$ref": "#/$defs/Step"}, {"type": "null"}]}},
    "required": ["steps", "check"], "title": "solve_args", "type": "object",
    "additionalProperties": False,
}

# `$defs` inside `$defs`, reached by a pointer through both.
NESTED_DEFS = {
    "type": "object",
    "properties": {"outer": {"$ref": "#/$defs/Outer"}},
    "required": ["outer"],
    "$defs": {"Outer": {
        "type": "object",
        "$defs": {"Inner": {"type": "integer", "minimum": 0}},
        "properties": {"inner": {"$ref": "#/$defs/Outer/$defs/Inner"}},
        "required": ["inner"]}},
}

# A tree whose children are trees: `"$ref": "#"` is the tool's own schema.
TREE = {
    "type": "object",
    "properties": {"name": {"type": "string"},
                   "children": {"type": "array", "items": {"$ref": "#"}}},
    "required": ["name", "children"],
}

# (schema, an instance valid for it, an instance that is not)
CASES: dict[str, tuple[dict[str, Any], Any, Any]] = {
    "pydantic_nested": (
        Person.model_json_schema(),
        {"name": "Ada", "home": {"street": "1 Main St", "city": "Paris"},
         "previous": [{"street": "2 Side St", "city": "Lyon"}]},
        {"name": "Ada", "home": {"street": "1 Main St"}, "previous": []}),
    "pydantic_recursive": (
        Node.model_json_schema(),
        {"label": "root", "children": [{"label": "leaf", "children": []}]},
        {"label": "root", "children": [{"label": "leaf"}]}),
    "anyof_of_refs": (
        Pets.model_json_schema(),
        {"pets": [{"kind": "cat", "lives": 9}, {"kind": "dog", "good": True}],
         "favourite": None},
        {"pets": [{"kind": "cow", "lives": 1}], "favourite": None}),
    "mistral_vibe_todo": (
        TODO,
        {"action": "write", "todos": [
            {"id": "1", "content": "Create hello.txt", "status": "in_progress",
             "priority": "high"},
            {"id": "2", "content": "Check it", "status": "pending", "priority": "low"}]},
        {"action": "write", "todos": [{"id": "1", "content": "x", "status": "done",
                                       "priority": "high"}]}),
    "zod_definitions": (
        ZOD_TREE,
        {"tree": {"value": 1, "children": [{"value": 2, "children": []}]},
         "home": {"city": "Oslo"}, "work": {"city": "Bergen"}},
        {"tree": {"value": 1, "children": []}, "home": {"city": "Oslo"}, "work": {}}),
    "agents_sdk_strict": (
        AGENTS_STRICT,
        {"steps": [{"explanation": "add", "output": "4"}],
         "check": {"explanation": "again", "output": "4"}},
        {"steps": [{"explanation": "add"}], "check": None}),
    "nested_defs": (NESTED_DEFS, {"outer": {"inner": 3}}, {"outer": {"inner": -3}}),
    "root_ref_tree": (
        TREE,
        {"name": "a", "children": [{"name": "b", "children": [{"name": "c",
                                                                 "children": []}]}]},
        # what a `#` resolved against the call object around the arguments allowed
        {"name": "a", "children": [{"name": "f", "arguments": {"name": "b",
                                                                "children": []}}]}),
}


def test_the_cases_are_what_they_say():
    assert TODO["$defs"]["TodoItem"]["properties"]["status"] == {
        "$ref": "#/$defs/TodoStatus", "default": "pending"}
    assert {"$ref", "$defs"} <= set(CASES["pydantic_recursive"][0])  # a root ref beside
    for schema, good, bad in CASES.values():
        jsonschema.validate(good, schema)
        assert not jsonschema.Draft202012Validator(schema).is_valid(bad)


def _calls_text(syntax: ToolSyntax, name: str, arguments: Any) -> str:
    """One call as a syntax lays it out (in Parlance's fixed JSON layout)."""
    call = json.dumps({"name": name, syntax.args_key: arguments})
    return f"{syntax.list_open}{syntax.item_open}{call}{syntax.item_close}{syntax.list_close}"


def _tools(schema: dict[str, Any]) -> tuple[ToolSpec, ...]:
    # another tool beside it, whose schema has `$defs` of the same name
    other = {"type": "object", "properties": {"n": {"$ref": "#/$defs/Item"}},
             "$defs": {"Item": {"type": "integer"}}}
    return (ToolSpec("f", parameters=schema), ToolSpec("g", parameters=other))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("syntax", [HERMES, MISTRAL, LLAMA3_JSON], ids=lambda s: s.name)
def test_forced_calls_follow_the_tools_own_schema(case, syntax):
    schema, good, bad = CASES[case]
    tools = _tools(schema)
    assert grammar.schema_problem(schema) is None
    for parallel in (False, True):
        source = grammar.forced_calls_grammar(tools, syntax, parallel=parallel)
        assert accepts(source, _calls_text(syntax, "f", good))
        assert not accepts(source, _calls_text(syntax, "f", bad))
        assert accepts(source, _calls_text(syntax, "g", {"n": 3}))
        assert not accepts(source, _calls_text(syntax, "g", {"n": "3"}))


@pytest.mark.parametrize("case", CASES)
def test_a_call_region_follows_the_tools_own_schema(case):
    schema, good, bad = CASES[case]
    source = grammar.region_grammar(_tools(schema), HERMES, parallel=True)
    call = json.dumps({"name": "f", "arguments": good})
    assert accepts(source, f"\n{call}\n</tool_call>")
    assert not accepts(source, f"\n{json.dumps({'name': 'f', 'arguments': bad})}\n</tool_call>")


@pytest.mark.parametrize("case", CASES)
def test_structured_output_follows_the_schema(case):
    schema, good, bad = CASES[case]
    for source, lead in ((grammar.schema_grammar(schema), ""),
                         (grammar.schema_grammar(schema, lead=True), "\n\n"),
                         (grammar.forced_calls_grammar(_tools(TREE), HERMES, parallel=False,
                                                       content_schema=schema), "")):
        assert accepts(source, lead + json.dumps(good))
        assert not accepts(source, lead + json.dumps(bad))


def test_every_schema_a_request_carries_is_checked_as_it_is():
    prompts = (ChatInput((Message("user", "x"),)),)
    for schema, _, _ in CASES.values():
        grammar.check_schemas(GenerationRequest(
            model="m", prompts=prompts, tools=_tools(schema),
            response_format=ResponseFormat("json_schema", schema, param="response_format")))


def test_a_grammar_that_allows_no_token_breaks_the_choice_not_finishes_it():
    """Issue 39: under a grammar that accepts nothing past `{"x": `, the masked row is
    all -inf and the sampler picked the end of the text: a normal `stop`. The guide
    reports the grammar broken instead (`ChoiceGuide.broken`)."""
    import numpy as np

    from parlance.engines.llamacpp.guide import GuidePlan

    loop = {"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
            "type": "object", "properties": {"x": {"$ref": "#/$defs/A"}}, "required": ["x"]}
    matcher = llguidance.LLMatcher(BYTES, grammar.schema_grammar(loop), log_level=0)
    plan = GuidePlan(forced=matcher, tokenizer=BYTES, n_vocab=257,
                     forced_param="response_format")
    guide = plan.for_choice(0)
    for token in BYTES.tokenize_str('{"x": '):
        row = np.zeros(257, dtype=np.float32)
        guide.mask(row)
        assert guide.broken is None and row[token] == 0.0
        guide.accept(token, chr(token))
    guide.mask(np.zeros(257, dtype=np.float32))
    assert guide.broken is not None and guide.broken.param == "response_format"
    assert not guide.constrained
