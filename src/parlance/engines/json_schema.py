"""A client's JSON Schema checked on a finished value, in time linear in the value.

Clients send the schemas, so their `pattern`s are hostile input: Python's `re`
backtracks (`^(a+)+$` against 34 `a`s and a `!` takes hours), and a check on the
event loop would freeze the server for as long. jsonschema-rs with the `regex` crate
(`RegexOptions`: finite automata, no lookaround or backreferences) matches in linear
time, and `offline` keeps a `$ref` to a URL from ever being fetched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonschema_rs


class SchemaUnreadable(ValueError):
    """A schema this checker cannot build: not a valid schema, a pattern the linear-time
    matcher cannot run (lookaround, backreferences), a `$ref` that resolves nowhere."""


class SchemaCheck:
    """One schema, built once, for the values of one request."""

    def __init__(self, schema: Any, *, formats: bool = False) -> None:
        """`formats`: `format` is asserted, and a format the checker does not know
        makes the schema unreadable (by default formats are annotations, as the
        standard says)."""
        try:
            self._validator = jsonschema_rs.validator_for(
                schema, pattern_options=jsonschema_rs.RegexOptions(), offline=True,
                validate_formats=formats, ignore_unknown_formats=not formats)
        except (ValueError, jsonschema_rs.ReferencingError) as exc:
            raise SchemaUnreadable(_first_line(exc)) from exc

    def problem(self, value: Any) -> str | None:
        """Where `value` breaks the schema: the keyword and the location, never the
        value (it may be long, or what a client should not see)."""
        breach = self.breach(value)
        return None if breach is None else f"{breach.keyword} at {breach.where}"

    def breach(self, value: Any) -> Breach | None:
        """The first place `value` breaks the schema, or None where it holds."""
        error = next(iter(self._validator.iter_errors(value)), None)
        if error is None:
            return None
        keyword = next((str(p) for p in reversed(error.schema_path) if isinstance(p, str)),
                       type(error.kind).__name__)
        where = "/" + "/".join(str(p) for p in error.instance_path)
        rule = "/" + "/".join(str(p) for p in error.schema_path)
        return Breach(keyword, where, error.message, rule)


@dataclass(frozen=True, slots=True)
class Breach:
    keyword: str  # the schema keyword that fails, e.g. `pattern`
    where: str  # the value's location, a JSON pointer
    message: str  # the validator's words, which quote the value
    rule: str = ""  # the keyword's place in the schema, e.g. `/properties/m/propertyNames/enum`


def _first_line(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return str(message).splitlines()[0] if message else type(exc).__name__
