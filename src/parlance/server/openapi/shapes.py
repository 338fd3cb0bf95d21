"""JSON Schemas the document takes from code rather than from a second, hand-written
copy: request bodies from the dialects' pydantic wire models, error envelopes from
what each dialect's `render_error` emits."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.server.http.refusal import Render

REF_TEMPLATE = "#/components/schemas/{model}"


def body_schemas(models: Iterable[type[BaseModel]]
                 ) -> tuple[dict[type[BaseModel], dict[str, Any]], dict[str, Any]]:
    """Each model's `$ref` and the components they refer to. Built in one pass, so two
    dialects' models of the same class name get distinct component names."""
    unique = list(dict.fromkeys(models))
    refs, defs = models_json_schema([(m, "validation") for m in unique],
                                    ref_template=REF_TEMPLATE)
    return {model: refs[(model, "validation")] for model in unique}, defs.get("$defs", {})


def error_samples() -> tuple[ParlanceError, ...]:
    """Errors whose renderings between them show every field an envelope has: one
    without a parameter or code, one with both."""
    return (ParlanceError("The server could not answer."),
            InvalidRequest("The request was invalid.", param="model", code="invalid_value"))


def envelope_schema(render: Render) -> dict[str, Any]:
    """The schema of the error bodies `render` makes, inferred from its renderings."""
    return inferred([render(error).body for error in error_samples()])


def inferred(values: Sequence[Any]) -> dict[str, Any]:
    """The loosest JSON Schema all `values` share the structure of: the JSON types seen,
    an object's properties (required when every value has them), an array's items."""
    types = sorted({_json_type(v) for v in values})
    schema: dict[str, Any] = {"type": types[0] if len(types) == 1 else types}
    objects = [v for v in values if isinstance(v, dict)]
    if objects:
        keys = list(dict.fromkeys(key for obj in objects for key in obj))
        schema["properties"] = {key: inferred([o[key] for o in objects if key in o])
                                for key in keys}
        schema["required"] = [key for key in keys if all(key in o for o in objects)]
    items = [item for v in values if isinstance(v, list) for item in v]
    if items:
        schema["items"] = inferred(items)
    return schema


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
