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
from parlance.console.model_table import ModelRow, model_table, size
from parlance.console.wire import an_object_field, field, objects, text


def ps(server: Server, out: Console) -> int:
    loaded = objects(server.get("/api/ps"), "models", "answer to GET /api/ps")
    if not loaded:
        out.print("No model is loaded.")
        return 0
    table = Table("NAME", "SIZE", "CONTEXT", "UNTIL")
    table.columns[0].overflow = "fold"
    where = "model of GET /api/ps"
    for model in loaded:
        # (Ollama's name:latest is the id load, unload and chat take)
        table.add_row(escape(text(model, "name", where).removesuffix(":latest")),
                      size(field(model, "size", int, where)),
                      str(field(model, "context_length", int, where) or ""),
                      until(field(model, "expires_at", str, where)))
    out.print(table)
    return 0


def until(expires_at: str | None) -> str:
    """When an idle model is unloaded; Ollama says "never" as a date centuries ahead."""
    if not expires_at:
        return ""
    try:
        when = datetime.fromisoformat(expires_at)
        seconds = when.timestamp() - time.time()
    except (ValueError, OverflowError, OSError):
        return expires_at
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
    answer: dict[str, Any] = {}
    with (server.events("/api/v1/models/load", body) as events,
          LoadProgressView(err).load(model) as report):
        for event in events:
            if (failed := error_message(event)) is not None:
                raise ServerError(failed)
            kind = text(event, "type", "load event")
            where = f"{kind or 'load'} event"
            if kind == "model_load.progress":
                report(field(event, "progress", float, where) or 0.0)
            elif kind == "model_load.end" or "instance_id" in event:
                # (a server that answers the load at once sends its answer alone)
                answer = (an_object_field(event, "result", where)
                          if kind == "model_load.end" else event)
                report(1.0)
    if not answer:
        raise ServerError("the server ended the load without saying it loaded")
    where = "load answer"
    context = field(an_object_field(answer, "load_config", where), "context_length", int,
                    where)
    seconds = field(answer, "load_time_seconds", float, where) or 0.0
    err.print(f"[green]Loaded[/] {escape(text(answer, 'instance_id', where) or model)} in "
              f"{seconds:.2f}s" + (f", context {context}" if context else ""))
    return 0


def unload(server: Server, model: str, err: Console) -> int:
    answer = server.post("/api/v1/models/unload", {"instance_id": model})
    err.print(f"Unloaded {text(answer, 'instance_id', 'unload answer') or model}",
              markup=False)
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
            status = text(line, "status", "pull line")
            total = field(line, "total", int, "pull line")
            if total is not None:
                completed = field(line, "completed", int, "pull line") or 0
                if task is None:
                    task = progress.add_task(escape(status), total=total)
                progress.update(task, description=escape(status), total=total,
                                completed=completed)
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
    """The server's models (LM Studio's list), in the table `parlance models` prints."""
    where = "model of GET /api/v1/models"
    rows = []
    for model in objects(server.get("/api/v1/models"), "models", "answer to GET "
                         "/api/v1/models"):
        instances = objects(model, "loaded_instances", where)
        quantization = text(an_object_field(model, "quantization", where), "name", where)
        rows.append(ModelRow(text(model, "key", where), field(model, "size_bytes", int, where),
                             field(model, "max_context_length", int, where), quantization,
                             loaded=bool(instances)))
    out.print(model_table(rows))
    return 0


SHOWN_LICENSE = 2  # lines of a model's license `show` prints (Ollama's too)


def show(server: Server, model: str, out: Console) -> int:
    """A model's facts as `ollama show` lays them out: the model, its capabilities, its
    sampling defaults, the start of its license."""
    where = "answer to POST /api/show"
    answer = server.post("/api/show", {"model": model})
    details = an_object_field(answer, "details", where)
    info = an_object_field(answer, "model_info", where)
    arch = text(info, "general.architecture", where) or text(details, "family", where)
    rows = [("architecture", arch),
            ("parameters", text(details, "parameter_size", where)),
            ("context length", _number(info.get(f"{arch}.context_length"))),
            ("embedding length", _number(info.get(f"{arch}.embedding_length"))),
            ("quantization", text(details, "quantization_level", where))]
    sections = [("Model", [(k, v) for k, v in rows if v])]
    capabilities = field(answer, "capabilities", list, where) or []
    sections.append(("Capabilities", [(str(c), "") for c in capabilities]))
    parameters = text(answer, "parameters", where)
    pairs = [line.strip().partition(" ") for line in parameters.splitlines()]
    sections.append(("Parameters", [(k, v.strip()) for k, _, v in pairs if k]))
    license_ = text(answer, "license", where).strip().splitlines()[:SHOWN_LICENSE]
    sections.append(("License", [(line, "") for line in license_]))
    for title, entries in sections:
        if not entries:
            continue
        table = Table(title=None, show_header=False, box=None, padding=(0, 2, 0, 4))
        table.add_column(no_wrap=True)
        table.add_column()
        for key, value in entries:
            table.add_row(escape(key), escape(value))
        out.print(f"  {title}", markup=False)
        out.print(table)
        out.print()
    return 0


def _number(value: Any) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else ""


def rm(server: Server, names: list[str], err: Console) -> int:
    """Delete each model (Ollama's `ollama rm`); the first refusal ends the command."""
    for name in names:
        server.send("DELETE", "/api/delete", {"model": name})
        err.print(f"deleted '{name}'", markup=False)
    return 0


def cp(server: Server, source: str, destination: str, err: Console) -> int:
    server.send("POST", "/api/copy", {"source": source, "destination": destination})
    err.print(f"copied '{source}' to '{destination}'", markup=False)
    return 0
