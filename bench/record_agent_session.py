"""Record what Claude Code and Codex really send, for `bench/agent_turns.py` to replay.

Each client runs in its default mode (Claude Code without `--bare`, Codex's `exec` with
its default tools) against an in-process Parlance app on the scripted fake engine: the
answers only become part of the next turn's prompt, who wrote them does not matter.
A recording middleware (here, not in the product) keeps every POST's path, the headers
that shape a request and its body. A recording is one session of three turns (the first
request, then two more in the same conversation) and a second session (a new process,
a new conversation), as an agent on a laptop sends them.

The client's home and working directories are temporary; they are replaced in every
recorded byte by fixed strings (`/home/user`, `/home/user/project`), the same in every
turn, so prefixes still match; API keys are never recorded.

    python bench/record_agent_session.py            # both clients, into bench/sessions/
    python bench/record_agent_session.py --client codex

The client versions are those the client tests install (`tests/clients/`).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parlance.engines.fake import FakeEngine  # noqa: E402
from parlance.models.registry import ModelSpec  # noqa: E402
from parlance.models.served import ServedModel, ServedModels  # noqa: E402
from parlance.server import ServerSettings, create_app  # noqa: E402
from tests.support.agent_clients import (  # noqa: E402
    CLAUDE_CODE_VERSION,
    CODEX_VERSION,
    claude_env,
    codex_config,
)
from tests.support.agent_sessions import SESSIONS  # noqa: E402
from tests.support.npm import npm_bin  # noqa: E402
from tests.support.serve_process import free_port  # noqa: E402

HOME, CWD = "/home/user", "/home/user/project"
TURN_TIMEOUT = 600
# Headers that shape what a server does with a request; the rest (keys, connection
# details) are neither needed to replay it nor safe to keep.
KEPT_HEADERS = ("content-type", "anthropic-version", "anthropic-beta", "user-agent",
                "openai-beta", "x-app", "originator", "version")
TURNS = ("List the files in this project and say what it is for.",
         "Now suggest one improvement to it.",
         "Thanks. Summarize what we discussed in one sentence.")
SECOND_SESSION = "What does this project do?"


class Recorder:
    """ASGI middleware keeping each POST request (path, kept headers, body)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests: list[dict[str, Any]] = []
        self.session = 0

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        query = scope.get("query_string", b"").decode()
        self.requests.append({
            "session": self.session, "path": scope["path"] + (f"?{query}" if query else ""),
            "headers": {k: headers[k] for k in KEPT_HEADERS if k in headers},
            "body": json.loads(body) if body else None})
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


@contextlib.contextmanager
def fake_server() -> Iterator[tuple[str, Recorder]]:
    """The fake engine answering every model name, behind the recorder, on a free port."""
    spec = ModelSpec(id="fake-model", locate=lambda: Path("/dev/null"),
                     aliases=("claude-*", "gpt-*", "smollm2-*"))
    engine = FakeEngine(context_length=1_000_000, default_reply="Done: nothing more to do.")
    app = create_app(ServedModels([ServedModel(spec, engine, 1700000000)]),
                     ServerSettings(request_timeout=TURN_TIMEOUT))
    recorder = Recorder(app)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(recorder, port=port, log_level="warning", ws="none"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", recorder
    finally:
        server.should_exit = True
        thread.join(30)


def claude_turns(base: str, home: Path, work: Path, prompts: tuple[str, ...]) -> None:
    """One Claude Code process (default mode), the prompts sent one after another into
    one conversation through its stream-json input."""
    claude = npm_bin("@anthropic-ai/claude-code", CLAUDE_CODE_VERSION, "claude")
    proc = subprocess.Popen(
        [str(claude), "-p", "--input-format", "stream-json", "--output-format", "stream-json",
         "--verbose"], cwd=work, env=claude_env(base, home), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin and proc.stdout
    try:
        for prompt in prompts:
            proc.stdin.write(json.dumps({"type": "user", "message": {
                "role": "user", "content": [{"type": "text", "text": prompt}]}}) + "\n")
            proc.stdin.flush()
            for line in proc.stdout:
                if line.startswith("{") and json.loads(line).get("type") == "result":
                    break
            else:
                error = proc.stderr.read() if proc.stderr else ""
                raise RuntimeError(f"claude ended early: {error[-2000:]}")
        proc.stdin.close()
        proc.wait(TURN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def codex_turns(base: str, home: Path, work: Path, prompts: tuple[str, ...]) -> None:
    """Codex's `exec` for the first prompt, `exec resume --last` for the others: each a
    process, one conversation."""
    codex = npm_bin("@openai/codex", CODEX_VERSION, "codex")
    (home / "config.toml").write_text(codex_config(base, websockets=False))
    env = {**os.environ, "CODEX_HOME": str(home), "HOME": str(home.parent)}
    common = ["--skip-git-repo-check", "--sandbox", "read-only", "--json"]
    for i, prompt in enumerate(prompts):
        command = [str(codex), "exec", *common, *([] if i == 0 else ["resume", "--last"]),
                   prompt]
        run = subprocess.run(command, cwd=work, env=env, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=TURN_TIMEOUT)
        if run.returncode != 0:
            raise RuntimeError(f"codex failed: {run.stderr[-2000:]}")


CLIENTS = {"claude-code": (claude_turns, f"@anthropic-ai/claude-code {CLAUDE_CODE_VERSION}"),
           "codex": (codex_turns, f"@openai/codex {CODEX_VERSION}")}


def record(client: str) -> dict[str, Any]:
    run_turns, version = CLIENTS[client]
    with tempfile.TemporaryDirectory(prefix="agent-session-") as tmp, \
            fake_server() as (base, recorder):
        home, work = Path(tmp) / "home", Path(tmp) / "home" / "project"
        (home / "client").mkdir(parents=True)
        work.mkdir()
        (work / "README.md").write_text("# notes\n\nA tiny project that keeps notes.\n")
        (work / "notes.py").write_text("def add(notes, text):\n    notes.append(text)\n")
        client_home = home / "client"
        recorder.session = 0
        run_turns(base, client_home, work, TURNS)
        recorder.session = 1
        run_turns(base, client_home, work, (SECOND_SESSION,))
        text = json.dumps(recorder.requests)
        # the longest paths first: the working dir lies inside the home dir
        for real, fixed in ((str(work.resolve()), CWD), (str(work), CWD),
                            (str(home.resolve()), HOME), (str(home), HOME),
                            (str(Path(tmp).resolve()), "/tmp/agent"), (tmp, "/tmp/agent")):
            text = text.replace(real, fixed)
        return {"client": version, "recorded_with": "parlance fake engine",
                "requests": json.loads(text)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=sorted(CLIENTS), action="append")
    args = parser.parse_args()
    SESSIONS.mkdir(exist_ok=True)
    for client in args.client or sorted(CLIENTS):
        recording = record(client)
        path = SESSIONS / f"{client}.json.gz"
        text = json.dumps(recording, indent=1).encode()
        with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
            out.write(text)
        paths = [f"{r['session']}:{r['path']}" for r in recording["requests"]]
        print(f"{path}: {recording['client']}, {len(paths)} requests: {paths}")


if __name__ == "__main__":
    main()
