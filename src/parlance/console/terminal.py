"""What the terminal commands print goes through here: nothing a server (or a model)
sends reaches the terminal raw. A control character in a string shown there could set
the window title (OSC 0), write the clipboard (OSC 52), clear the screen or hide text;
every C0 and C1 control but `\\n` and `\\t` (and DEL) is taken out of the text a
`TerminalConsole` draws, whatever path brought it there (an answer's Markdown, a JSON
string decoded for display, a table of models, an error line). The console's own
styles and cursor moves are not text, so they are kept."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """`text` without C0/C1 controls (`\\n` and `\\t` kept)."""
    return CONTROLS.sub("", text)


class TerminalConsole(Console):
    """A rich `Console` whose rendered text has no control characters. Every print, live
    view and table of rich is rendered through `render` (nested renderables too)."""

    def render(self, renderable: RenderableType,
               options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control or not CONTROLS.search(segment.text):
                yield segment
            else:
                yield Segment(clean(segment.text), segment.style)
