"""The model commands against a running server: `ps` (Ollama's `/api/ps`), `load` and
`unload` (LM Studio's `/api/v1/models/load|unload`; the load asked for as a stream, its
`model_load.progress` drawn as `serve` draws its loads), `pull` (Ollama's `/api/pull`,
its NDJSON progress drawn as a bar with bytes, speed and ETA) and `models` (LM Studio's
`/api/v1/models`). Each returns the process's exit status; a failure raises
`ServerError`."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from parlance.console.client import Server, ServerError, error_message
from parlance.console.load_progress import LoadProgressView


def size(count: int | None) -> str:
    if not count:
        return ""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def ps(server: Server, out: Console) -> int:
    loaded = server.get("/api/ps").get("models", [])
    if not loaded:
        out.print("No model is loaded.")
        return 0
    table = Table("NAME", "SIZE", "CONTEXT", "UNTIL")
    table.columns[0].overflow = "fold"
    for model in loaded:
        # (Ollama's name:latest is the id load, unload and chat take)
        table.add_row(escape(model.get("name", "").removesuffix(":latest")),
                      size(model.get("size")), str(model.get("context_length") or ""),
                      until(model.get("expires_at")))
    out.print(table)
    return 0


def until(expires_at: str | None) -> str:
    """When an idle model is unloaded; Ollama says "never" as a date centuries ahead."""
    if not expires_at:
        return ""
    try:
        when = datetime.fromisoformat(expires_at)
    except ValueError:
        return expires_at
    seconds = when.timestamp() - time.time()
    if seconds > 100 * 365 * 86400:
        return "forever"
    if seconds <= 0:
        return "now"
    minutes, secs = divmod(int(seconds), 60)
    return f"in {minutes} min {secs} s" if minutes else f"in {secs} s"


def load(server: Server, model: str, context_length: int | None, err: Console) -> int:
    body: dict[str, Any] = {"model": model, "echo_load_config": True}
    if context_length is not None:
        body["context_length"] = context_length
    answer = None
    with (server.events("/api/v1/models/load", body) as events,
          LoadProgressView(err).load(model) as report):
        for event in events:
            if (failed := error_message(event)) is not None:
                raise ServerError(failed)
            kind = event.get("type")
            if kind == "model_load.progress":
                report(float(event.get("progress", 0.0)))
            elif kind == "model_load.end" or "instance_id" in event:
                # (a server that answers the load at once sends its answer alone)
                answer = event.get("result") if kind == "model_load.end" else event
                report(1.0)
    if not isinstance(answer, dict):
        raise ServerError("the server ended the load without saying it loaded")
    config = answer.get("load_config") or {}
    shown = f", context {config['context_length']}" if config.get("context_length") else ""
    err.print(f"[green]Loaded[/] {escape(answer.get('instance_id', model))} in "
              f"{answer.get('load_time_seconds', 0):.2f}s{shown}")
    return 0


def unload(server: Server, model: str, err: Console) -> int:
    answer = server.post("/api/v1/models/unload", {"instance_id": model})
    err.print(f"Unloaded {answer.get('instance_id', model)}", markup=False)
    return 0


def pull(server: Server, name: str, err: Console) -> int:
    """Follow the pull to its end; leaving early (Ctrl-C) lets the server stop the
    download once no one else follows it (its partial file kept for a resume)."""
    progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), TimeRemainingColumn(), console=err,
                        disable=not err.is_terminal)
    task = None
    with server.lines("/api/pull", {"model": name, "stream": True}) as lines, progress:
        for line in lines:
            if (failed := error_message(line)) is not None:
                raise ServerError(failed)
            status = str(line.get("status", ""))
            if "total" in line:
                if task is None:
                    task = progress.add_task(status, total=line["total"])
                progress.update(task, description=status, total=line["total"],
                                completed=line.get("completed", 0))
            elif status == "success":
                if task is not None:
                    progress.update(task, completed=progress.tasks[task].total)
                progress.stop()
                err.print(f"[green]Pulled[/] {escape(name)}")
                return 0
            else:
                progress.console.print(status, markup=False)
    raise ServerError("the server ended the pull without saying it succeeded")


def models(server: Server, out: Console) -> int:
    table = Table("id", "loaded", "size", "context", "architecture", "quantization")
    table.columns[0].overflow = "fold"  # an id is shown whole: it is what commands take
    for model in server.get("/api/v1/models").get("models", []):
        instances = model.get("loaded_instances") or []
        context = next((i["config"].get("context_length") for i in instances
                        if isinstance(i.get("config"), dict)), None)
        quantization = (model.get("quantization") or {}).get("name") or ""
        table.add_row(escape(model.get("key", "")), "yes" if instances else "",
                      size(model.get("size_bytes")),
                      str(context or model.get("max_context_length") or ""),
                      escape(model.get("architecture") or ""), escape(quantization))
    out.print(table)
    return 0
