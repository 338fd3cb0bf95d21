"""A model's load progress as `serve` and `load` show it (llama.cpp reports the fraction
loaded; `load` reads it from the server's stream):
a bar per load on a terminal, a plain line at each quarter otherwise (a log file, a
service manager's journal: no control codes, no line per tick)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

Report = Callable[[float], None]
STEP = 0.25  # a plain line each time the load passes another quarter


class LoadProgressView:
    """Loads may run at once (the first model at start, others on demand, each in a
    worker thread): on a terminal they share one live display, a bar each."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._lock = threading.Lock()
        self._bars: Progress | None = None
        self._loads = 0

    @contextmanager
    def load(self, name: str) -> Iterator[Report]:
        """A callback for the fraction loaded, for the time of one load."""
        if not self.console.is_terminal:
            yield self._lines(name)
            return
        with self._lock:
            if self._bars is None:
                self._bars = Progress(TextColumn("[bold]Loading[/] {task.description}"),
                                      BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                                      console=self.console)
                self._bars.start()
            bars = self._bars
            task = bars.add_task(escape(name), total=1.0)
            self._loads += 1
        try:
            yield lambda fraction: bars.update(task, completed=fraction)
        finally:
            with self._lock:
                self._loads -= 1
                if not self._loads:
                    bars.stop()
                    self._bars = None
                else:
                    bars.remove_task(task)

    def _lines(self, name: str) -> Report:
        started = time.perf_counter()
        shown = -1

        def report(fraction: float) -> None:
            nonlocal shown
            step = int(min(max(fraction, 0.0), 1.0) / STEP)
            if step > shown:
                shown = step
                self.console.print(f"Loading {name}: {step * STEP:.0%} "
                                   f"({time.perf_counter() - started:.1f}s)",
                                   markup=False, highlight=False)

        return report
