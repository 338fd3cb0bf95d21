"""`console.load_progress`: plain lines at each quarter without a terminal; on one, a
bar per load, concurrent loads sharing one live display."""

from __future__ import annotations

import io
import threading

from rich.console import Console

from parlance.console.load_progress import LoadProgressView


def test_without_a_terminal_a_line_per_quarter():
    out = io.StringIO()
    progress = LoadProgressView(Console(file=out, force_terminal=False, width=200))
    with progress.load("acme/[b]model") as report:
        for i in range(101):
            report(i / 100)
        report(1.0)
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        f"Loading acme/[b]model: {p}%" for p in (0, 25, 50, 75, 100)]
    assert "\x1b" not in out.getvalue()


def test_on_a_terminal_loads_at_once_share_one_display():
    out = io.StringIO()
    progress = LoadProgressView(Console(file=out, force_terminal=True, width=100))
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with progress.load("second") as report:
            report(0.5)
            inside.set()
            leave.wait(60)

    thread = threading.Thread(target=other)
    with progress.load("first") as report:
        thread.start()
        assert inside.wait(60)
        report(1.0)
        assert progress._bars is not None and len(progress._bars.tasks) == 2
    assert progress._bars is not None  # the other load still shows
    leave.set()
    thread.join(60)
    assert progress._bars is None
    shown = out.getvalue()
    assert "Loading" in shown and "first" in shown and "second" in shown


def test_on_a_terminal_the_bar_ends_full():
    out = io.StringIO()
    progress = LoadProgressView(Console(file=out, force_terminal=True, width=100))
    with progress.load("model") as report:
        report(0.3)
        report(1.0)
    assert "100%" in out.getvalue() and progress._bars is None
