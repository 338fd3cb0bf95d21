"""The flag reference: one row per serve setting (flag, env var, default, help), from the
same `ServeConfig` fields the flags are generated from; the docs' flag page renders
these rows, so the page cannot drift from `parlance serve --help`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from parlance.cli.serve_flags import serve_flags, shown
from parlance.config import ServeConfig


@dataclass(frozen=True, slots=True)
class FlagRow:
    flag: str  # --ctx-size (a `bool | None` setting: "--batch-invariant / --no-batch-invariant")
    env: str  # PARLANCE_CTX_SIZE
    default: str  # as `--help` shows it; "" where the help says it in words
    help: str  # the help text, without the bracketed default and env var


def flag_rows(config: type[ServeConfig] = ServeConfig) -> Iterator[FlagRow]:
    """Each serve setting of `config`, in `--help`'s order."""
    for flag in serve_flags(config):
        spec = flag.spec
        name, text = flag.flag, spec.help
        if spec.off is not None:
            off = "--no-" + flag.flag.removeprefix("--")
            name, text = f"{flag.flag} / {off}", f"{spec.help}; {off}: {spec.off}"
        default = flag.default
        if default is False:
            value = "off"
        elif default in (None, "", ()):
            value = ""
        else:
            value = shown(default)
        yield FlagRow(name, flag.env, value, text)


def flags_markdown(config: type[ServeConfig] = ServeConfig) -> str:
    """The rows as a Markdown table (what the docs' flag reference page shows)."""
    lines = ["| flag | environment | default | what it does |", "|---|---|---|---|"]
    for row in flag_rows(config):
        default = f"`{row.default}`" if row.default else ""
        lines.append(f"| `{row.flag}` | `{row.env}` | {default} | {_cell(row.help)} |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (no column break, emphasis or tag)."""
    for raw, safe in (("|", "\\|"), ("*", "\\*"), ("<", "&lt;"), ("\n", " ")):
        text = text.replace(raw, safe)
    return text
