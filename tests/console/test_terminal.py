"""`console.terminal`: no control character of a drawn string reaches the terminal,
whatever renders it; the console's own styles still do."""

from __future__ import annotations

import io

from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

from parlance.console.terminal import TerminalConsole, clean

HOSTILE = "a\x1b]0;title\x07b\x1b[2Jc\x9b31md\re\x7ff\x00g\tend\n"


def drawn(*renderables) -> str:
    out = io.StringIO()
    console = TerminalConsole(file=out, force_terminal=True, width=200)
    console.print(*renderables)
    return out.getvalue()


def test_clean_keeps_newlines_and_tabs_only():
    assert clean(HOSTILE) == "a]0;titleb[2Jc31mdefg\tend\n"


def test_nothing_of_a_string_controls_the_terminal_whatever_draws_it():
    table = Table("id")
    table.add_row(HOSTILE)
    shown = drawn(Text(HOSTILE, style="bold"), Markdown(f"# {HOSTILE}\n\n`{HOSTILE}`"),
                  table, HOSTILE)
    for raw in ("\x1b]", "\x07", "\x1b[2J", "\x9b", "\r", "\x7f", "\x00"):
        assert raw not in shown
    assert shown.count("]0;title") == 4
    assert "\x1b[1m" in shown  # (its own styles are kept)
