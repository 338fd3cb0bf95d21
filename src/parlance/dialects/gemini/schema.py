"""Gemini's `Schema` (an OpenAPI 3.0 subset: upper-case `type`, `nullable`,
`propertyOrdering`, int64 bounds that may arrive as strings) as the JSON Schema the
engines' grammars are built from. `parametersJsonSchema` / `responseJsonSchema` are
JSON Schema already and are not converted."""

from __future__ import annotations

from typing import Any

from parlance.core.errors import InvalidRequest

_TYPES = {"STRING": "string", "NUMBER": "number", "INTEGER": "integer",
          "BOOLEAN": "boolean", "ARRAY": "array", "OBJECT": "object", "NULL": "null"}
_PLAIN = ("format", "title", "description", "pattern", "default", "minimum", "maximum")
_COUNTS = ("minItems", "maxItems", "minProperties", "maxProperties", "minLength",
           "maxLength")


def json_schema(schema: Any, param: str) -> dict[str, Any]:
    """The JSON Schema `schema` means; an InvalidRequest naming `param` where it is not
    a Schema. Fields JSON Schema has no use for (`example`) are dropped."""
    if not isinstance(schema, dict):
        raise InvalidRequest(f"Invalid value at '{param}': a Schema must be an object.",
                             param=param)
    out: dict[str, Any] = {}
    kind = schema.get("type")
    if kind is not None:
        if not isinstance(kind, str) or kind.upper() not in _TYPES | {"TYPE_UNSPECIFIED": ""}:
            raise InvalidRequest(f"Invalid value at '{param}.type' ({kind!r}): not a Type "
                                 f"(one of {', '.join(_TYPES)}).", param=f"{param}.type")
        if kind.upper() != "TYPE_UNSPECIFIED":
            out["type"] = _TYPES[kind.upper()]
    for key in _PLAIN:
        if key in schema:
            out[key] = schema[key]
    for key in _COUNTS:
        if key in schema:
            out[key] = _count(schema[key], f"{param}.{key}")
    if "enum" in schema:
        if not isinstance(schema["enum"], list):
            raise InvalidRequest(f"Invalid value at '{param}.enum': a list of strings.",
                                 param=f"{param}.enum")
        out["enum"] = schema["enum"]
    if "required" in schema:
        out["required"] = schema["required"]
    if "items" in schema:
        out["items"] = json_schema(schema["items"], f"{param}.items")
    if "anyOf" in schema:
        options = schema["anyOf"]
        if not isinstance(options, list):
            raise InvalidRequest(f"Invalid value at '{param}.anyOf': a list of Schemas.",
                                 param=f"{param}.anyOf")
        out["anyOf"] = [json_schema(s, f"{param}.anyOf[{i}]") for i, s in enumerate(options)]
    if "properties" in schema:
        out["properties"] = _properties(schema, param)
    if schema.get("nullable") is True:
        _nullable(out)
    return out


def _properties(schema: dict[str, Any], param: str) -> dict[str, Any]:
    """The properties, in `propertyOrdering`'s order where it names them (Gemini writes
    an object's keys in that order; a grammar built from the schema keeps its order)."""
    properties = schema["properties"]
    if not isinstance(properties, dict):
        raise InvalidRequest(f"Invalid value at '{param}.properties': a map of Schemas.",
                             param=f"{param}.properties")
    converted = {name: json_schema(s, f"{param}.properties.{name}")
                 for name, s in properties.items()}
    order = schema.get("propertyOrdering")
    if not isinstance(order, list):
        return converted
    first = {name: converted[name] for name in order if name in converted}
    return first | {name: s for name, s in converted.items() if name not in first}


def _nullable(out: dict[str, Any]) -> None:
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    elif "anyOf" in out:
        out["anyOf"] = [*out["anyOf"], {"type": "null"}]


def _count(value: Any, param: str) -> int:
    """An int64 bound: proto's JSON writes those as strings, and accepts either."""
    if isinstance(value, bool):
        value = None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or value < 0:
        raise InvalidRequest(f"Invalid value at '{param}' ({value!r}): a count.", param=param)
    return value
