"""A fake-engine server that plays a coding agent's model: asked with the agent's file
writing tool on offer, it calls that tool to write `hello.txt` containing `hi`; once the
conversation holds a tool result (or when no such tool is offered), it answers in text.
For the agent CLIs whose first prompt SmolLM2 cannot evaluate on two cores within the
client's own patience: the protocol (every request, the streamed call, the client running
the call it parsed) is what these runs test, over the server's real HTTP stack."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from parlance.core.events import Finish, FinishReason, Usage
from parlance.core.prompts import PromptInfo
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import ToolSpec
from parlance.engines.fake import FakeEngine, Generated, ScriptItem
from tests.support.fake_app import make_app
from tests.support.live_server import ServerThread

FILE_NAME, FILE_TEXT = "hello.txt", "hi"
DONE = "I wrote hello.txt."


def _arguments(tool: ToolSpec, target: Path) -> dict[str, Any]:
    """Arguments for a file-writing tool, by its schema's property names."""
    arguments: dict[str, Any] = {}
    properties = tool.parameters.get("properties", {})
    for name in properties:
        lowered = name.lower()
        if "path" in lowered or "file" in lowered:
            arguments[name] = str(target)
        elif "content" in lowered or "text" in lowered:
            arguments[name] = FILE_TEXT
    return arguments


class FileWritingModel(FakeEngine):
    """The scripted model; `tools`: the names an agent gives its file-writing tool;
    `reply`: its text answer (an agent without tools reads its edits from the text)."""

    def __init__(self, workdir: Path, tools: frozenset[str], reply: str = DONE) -> None:
        super().__init__(context_length=200_000, default_reply=reply)
        self.target = workdir / FILE_NAME
        self.tools = tools
        self.calls_made = 0

    def _default_script(self, request: GenerationRequest, prompts: tuple[PromptInfo, ...],
                        limit: int) -> list[ScriptItem]:
        writer = next((t for t in request.callable_tools if t.name in self.tools), None)
        prompt = request.prompts[0]
        answered = isinstance(prompt, ChatInput) and any(
            m.role == "tool" for m in prompt.messages)
        if writer is None or answered:
            return super()._default_script(request, prompts, limit)
        self.calls_made += 1
        call = {"name": writer.name, "arguments": _arguments(writer, self.target)}
        return [Generated(f"<tool_call>\n{json.dumps(call)}\n</tool_call>"),
                Finish(FinishReason.STOP), Usage(prompts[0].n_tokens, 20, 0.01, 0.02)]


class AccessLines(logging.Handler):
    """The access log's lines, as the server writes them."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(getattr(record, "access", {}))


@contextlib.contextmanager
def agent_server(workdir: Path, tools: frozenset[str], reply: str = DONE) -> Iterator[
        tuple[ServerThread, FileWritingModel, AccessLines]]:
    """A server over `FileWritingModel` (served as `fake-model`), with its access log."""
    model = FileWritingModel(workdir, tools, reply)
    access = AccessLines()
    logger = logging.getLogger("parlance.access")
    level = logger.level
    logger.addHandler(access)
    logger.setLevel(logging.INFO)
    try:
        with ServerThread(make_app(model)) as server:
            yield server, model, access
    finally:
        logger.removeHandler(access)
        logger.setLevel(level)


def assert_protocol_held(access: AccessLines, paths: set[str]) -> None:
    """Every request went to one of `paths` and got a 2xx."""
    requests = [(a.get("method"), a.get("path"), a.get("status")) for a in access.lines]
    assert requests, "the client made no request"
    assert {p for _, p, _ in requests} <= paths, requests
    assert all(200 <= int(s) < 300 for _, _, s in requests), requests
