"""The one table of models `parlance models` prints, of this machine's registry or (with
--url) of a running server: the same columns with the same meaning either way. Its
context is the most the model takes (the context its file was trained for, as LM
Studio's `max_context_length` says it); `ps` shows the context a loaded one has. An id
is what the other commands take, so it is never wrapped: at 80 columns the other
columns give way."""

from __future__ import annotations

from dataclasses import dataclass

from rich.markup import escape
from rich.table import Table

COLUMNS = ("id", "loaded", "size", "context", "quantization")


@dataclass(frozen=True, slots=True)
class ModelRow:
    id: str
    size: int | None = None  # bytes of its file
    context: int | None = None  # the most it takes, in tokens
    quantization: str = ""
    loaded: bool = False


def size(count: int | None) -> str:
    if not count:
        return ""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def model_table(rows: list[ModelRow]) -> Table:
    table = Table(*COLUMNS)
    longest = max((len(row.id) for row in rows), default=2)
    table.columns[0].no_wrap = True
    table.columns[0].min_width = longest
    for row in rows:
        table.add_row(escape(row.id), "yes" if row.loaded else "", size(row.size),
                      str(row.context or ""), escape(row.quantization))
    return table
