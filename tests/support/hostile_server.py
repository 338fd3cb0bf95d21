"""A server that says whatever a test scripts, byte for byte: what the terminal
commands are probed against (escape sequences in every string, events that are not
JSON or not of their shape, a 10 MB delta). A plain `http.server` in a thread,
answering HTTP/1.0 (a body ends when the connection closes), each request recorded."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.live_server import STARTUP

# What a hostile string carries: a window title (OSC 0), the clipboard (OSC 52), a
# cleared screen, concealed text, a C1 CSI; each still shows "pwned" once stripped.
PAYLOAD = "\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b[8mpwned\x9b31m\r"
RAW = ("\x1b]", "\x07", "\x1b[2J", "\x1b[8m", "\x9b")  # none may reach the pty (its own
# line ends are "\r\n": a "\r" is checked where no terminal is)


@dataclass
class Reply:
    body: bytes
    status: int = 200
    content_type: str = "application/json"
    hold: threading.Event | None = None  # keep the stream open after the body until set


def answer(value: Any, status: int = 200) -> Reply:
    return Reply(json.dumps(value).encode(), status)


def ndjson(*lines: Any) -> Reply:
    """Newline-delimited JSON (Ollama's pull)."""
    return Reply("".join(json.dumps(line) + "\n" for line in lines).encode(),
                 content_type="application/x-ndjson")


def sse(*events: Any, hold: threading.Event | None = None) -> Reply:
    """An event stream: each event's data as JSON, or as it is when it is a str."""
    frames = "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n"
                     for e in events)
    return Reply(frames.encode(), content_type="text/event-stream", hold=hold)


@dataclass
class HostileServer:
    url: str = ""
    replies: dict[tuple[str, str], list[Reply]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)

    def script(self, method: str, path: str, *replies: Reply) -> None:
        """The next answers to `method path`, in order; the last one stays."""
        self.replies.setdefault((method, path), []).extend(replies)

    def bodies(self, path: str) -> list[Any]:
        return [body for _, p, body in self.requests if p == path]

    def reply(self, method: str, path: str) -> Reply:
        queue = self.replies.get((method, path))
        if not queue:
            return answer({"error": {"message": f"nothing scripted for {method} {path}"}},
                          404)
        return queue.pop(0) if len(queue) > 1 else queue[0]


def _handler(server: HostileServer, holds: list[threading.Event]) -> type:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, method: str) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0]
            server.requests.append((method, path, json.loads(raw) if raw else None))
            reply = server.reply(method, path)
            self.send_response(reply.status)
            self.send_header("content-type", reply.content_type)
            if reply.hold is None:
                self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            self.wfile.flush()
            if reply.hold is not None:
                holds.append(reply.hold)
                reply.hold.wait(STARTUP)
                self.close_connection = True

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def hostile_server() -> Iterator[HostileServer]:
    scripted, holds = HostileServer(), []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(scripted, holds))
    httpd.daemon_threads = True
    scripted.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    scripted.script("GET", "/v1/models", answer({"object": "list", "data": []}))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield scripted
    finally:
        for hold in holds:
            hold.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(STARTUP)
