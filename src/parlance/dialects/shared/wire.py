"""Pydantic at the wire: lenient about unknown fields, strict about types, and every
validation failure becomes an `InvalidRequest` naming the offending parameter."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)

from parlance.core.errors import InvalidRequest

M = TypeVar("M", bound=BaseModel)
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


# Items of a long list validated per pydantic call (see WireModel._long_lists_in_slices).
LIST_SLICE = 1000


class WireModel(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    @model_validator(mode="wrap")
    @classmethod
    def _long_lists_in_slices(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        """A long list field is validated a slice at a time. Pydantic holds the GIL for
        a whole call, however long the list, and bodies are parsed on a
        worker thread beside the event loop, which gets its turn between slices. A body
        that fails is validated again whole, so the error names its item's true index."""
        long = {key: value for key, value in data.items()
                if isinstance(value, list) and len(value) > LIST_SLICE
                } if isinstance(data, dict) else {}
        if not long:
            return handler(data)
        names = {info.alias or name: name for name, info in cls.model_fields.items()}
        try:
            head = {**data, **{key: value[:LIST_SLICE] for key, value in long.items()}}
            model = handler(head)
            update: dict[str, list[Any]] = {}
            for key, value in long.items():
                name = names.get(key)
                if name is None or not isinstance(items := getattr(model, name), list):
                    continue  # an unknown field (ignored), or one that is not a list
                for start in range(LIST_SLICE, len(value), LIST_SLICE):
                    items = items + getattr(
                        handler({**head, key: value[start:start + LIST_SLICE]}), name)
                update[name] = items
            return model.model_copy(update=update)
        except ValidationError:
            return handler(data)


def param_path(loc: tuple[Any, ...], body: Any = None) -> str:
    """The client's name for an error location. Pydantic also puts union member
    names and discriminator tags in locations; a tag is recognised as the `type`
    of the object at that point of the body."""
    out = ""
    for n, part in enumerate(loc):
        if (isinstance(body, dict) and part not in body and part == body.get("type")
                and n < len(loc) - 1):  # (the last part is the field in question)
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _is_union_tag(part):
            out += f".{part}" if out else str(part)
        body = _step(body, part)
    return out


def _step(body: Any, part: Any) -> Any:
    if isinstance(body, dict):
        return body.get(part)
    if isinstance(body, list) and isinstance(part, int) and 0 <= part < len(body):
        return body[part]
    return None


def _is_union_tag(part: str) -> bool:
    """Pydantic inserts the union member's type name into locations; clients never see it."""
    return any(c in part for c in "[]()") or part in {"str", "int", "float", "bool", "list"}


def parse_body(model: type[M], body: Any) -> M:
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = param_path(first["loc"], body) or None
        problem = first["msg"]
        if first["type"] == "missing":
            raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param,
                                 code="missing_required_parameter") from exc
        raise InvalidRequest(f"Invalid value for '{param}': {problem}.", param=param,
                             code="invalid_value") from exc
