"""A synthetic OpenAI-compatible upstream: it generates nothing, it streams.

Each `POST /v1/chat/completions` (or `/v1/completions`) streams `tokens` chunks of
`piece` (the role chunk first, then a finish and a usage chunk, then `[DONE]`) as
fast as the socket takes them, or `delay` seconds apart. It can refuse (`status`),
break its streams after some chunks (`break_after`: the connection is aborted, as a
killed server's is) and it counts what happened, so tests can assert on the
upstream's side: the chunks it wrote, the streams whose client left early.

It is a real HTTP/1.1 server on a loopback socket (keep-alive, chunked responses),
written on asyncio streams only so that it costs little CPU: the gateway capacity
bench (`bench/upstream.py`) runs it as a process of its own
(`python tests/support/synthetic_upstream.py --port P`), tests run it in a thread.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

BATCH_BYTES = 32 * 1024  # chunked frames written together when there is no delay


@dataclass
class Counters:
    requests: list[dict[str, Any]] = field(default_factory=list)
    chunks_written: int = 0
    streams_finished: int = 0
    streams_left_early: int = 0  # the client (the gateway) closed before the end


def _sse(payload: Any) -> bytes:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return b"data: " + data + b"\n\n"


def _chunked(frame: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(frame), frame)


class SyntheticUpstream:
    def __init__(self, *, model: str = "synthetic", tokens: int = 16, piece: str = " tok",
                 delay: float = 0.0, status: int = 200, break_after: int | None = None,
                 port: int = 0, host: str = "127.0.0.1", vary: int = 1,
                 owned_by: str = "synthetic", hang: bool = False) -> None:
        self.model = model
        self.tokens = tokens
        self.piece = piece
        self.delay = delay
        self.status = status
        self.break_after = break_after
        self.vary = vary  # distinct pieces cycled (`piece` + a number when more than one)
        # what its model list says it is; "vllm" also answers vLLM's /tokenize (a count of
        # the words in the messages or prompt)
        self.owned_by = owned_by
        self.hang = hang  # never answer a generation request (a stuck server)
        self.host = host
        self.port = port
        self.counters = Counters()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        # The connections being served: held here, since the loop keeps only weak
        # references to tasks (a hung one, its client gone, would be collected unclosed).
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- running ----------------------------------------------------------------------

    async def serve(self) -> asyncio.AbstractServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._connection, sock=sock, backlog=1024)
        return self._server

    def start(self) -> SyntheticUpstream:
        """Serve from a thread of its own (its own event loop), until `stop()`."""
        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self.serve())
            self._ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._ready.clear()
        self._thread = threading.Thread(target=run, daemon=True, name="synthetic-upstream")
        self._thread.start()
        self._ready.wait(30)
        return self

    def stop(self) -> None:
        """Close the listening socket and every connection (streams break)."""
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def close() -> None:
            server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            # each connection closes its writer on the way out
            await asyncio.gather(*tasks, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(30)
        self._loop = self._server = None

    def __enter__(self) -> SyntheticUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- HTTP -------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (line.partition(":") for line in lines[1:] if line)}
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                if not await self._answer(method, path, body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._connections.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _answer(self, method: str, path: str, body: bytes,
                      writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is over."""
        if method == "GET" and path in ("/v1/models", "/models"):
            return await self._json(writer, 200, {"object": "list", "data": [
                {"id": self.model, "object": "model", "owned_by": self.owned_by}]})
        if method == "GET" and path == "/health":
            return await self._json(writer, 200, {"status": "ok"})
        if method == "POST" and path == "/tokenize" and self.owned_by == "vllm":
            request = json.loads(body or b"{}")
            self.counters.requests.append(request)
            texts = [m["content"] for m in request.get("messages", ())] or [request["prompt"]]
            count = sum(len(t.split()) for t in texts)
            return await self._json(writer, 200, {"count": count, "max_model_len": 4096,
                                                  "tokens": list(range(count))})
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
            return await self._json(writer, 404, {"error": {"message": "no such route"}})
        request = json.loads(body or b"{}")
        self.counters.requests.append(request)
        if self.hang:
            await asyncio.Event().wait()
        if self.status != 200:
            return await self._json(writer, self.status, {"error": {
                "message": f"synthetic refusal {self.status}", "type": "server_error"}})
        return await self._stream(writer, path == "/v1/chat/completions", request)

    async def _json(self, writer: asyncio.StreamWriter, status: int, payload: Any) -> bool:
        data = json.dumps(payload).encode()
        writer.write(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (status, len(data), data))
        await writer.drain()
        return True

    async def _stream(self, writer: asyncio.StreamWriter, chat: bool,
                      request: dict[str, Any]) -> bool:
        tokens = int(request.get("max_tokens") or self.tokens)
        tokens = min(tokens, self.tokens)
        kind = "chat.completion.chunk" if chat else "text_completion"
        shell = {"id": "synthetic-1", "object": kind, "created": 1763900000,
                 "model": self.model}

        def choice(delta: str | None, finish: str | None = None) -> dict[str, Any]:
            if chat:
                return {"index": 0, "delta": {} if delta is None else {"content": delta},
                        "finish_reason": finish}
            return {"index": 0, "text": delta or "", "finish_reason": finish}

        pieces = [self.piece] if self.vary <= 1 else [f"{self.piece}{i}"
                                                        for i in range(self.vary)]
        token_frames = [_chunked(_sse({**shell, "choices": [choice(p)]})) for p in pieces]
        first = ({**shell, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                              "content": ""}}]}
                 if chat else None)
        tail = b"".join(_chunked(_sse(p)) for p in (
            {**shell, "choices": [choice(None, "length" if tokens == self.tokens
                                         and request.get("max_tokens") else "stop")]},
            {**shell, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": tokens,
                                               "total_tokens": 3 + tokens}},
            b"[DONE]")) + b"0\r\n\r\n"
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        if first is not None:
            writer.write(_chunked(_sse(first)))
        counters = self.counters
        try:
            pending = bytearray()
            for written in range(tokens):
                if self.break_after is not None and written >= self.break_after:
                    writer.write(bytes(pending))
                    await writer.drain()
                    writer.transport.abort()  # as a killed server's socket
                    return False
                token_frame = token_frames[written % len(token_frames)]
                if self.delay:
                    writer.write(token_frame)
                    counters.chunks_written += 1
                    await writer.drain()
                    await asyncio.sleep(self.delay)
                    if writer.transport.is_closing():
                        raise ConnectionResetError
                    continue
                pending += token_frame
                counters.chunks_written += 1
                if len(pending) >= BATCH_BYTES:
                    writer.write(bytes(pending))
                    pending.clear()
                    await writer.drain()
            writer.write(bytes(pending) + tail)
            await writer.drain()
        except ConnectionError:
            counters.streams_left_early += 1
            return False
        counters.streams_finished += 1
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default="synthetic")
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--piece", default=" tok")
    parser.add_argument("--vary", type=int, default=1,
                        help="distinct pieces to cycle through (a relay may refuse a stream "
                             "that repeats one chunk: LiteLLM does)")
    args = parser.parse_args()
    upstream = SyntheticUpstream(model=args.model, tokens=args.tokens, piece=args.piece,
                                 port=args.port, vary=args.vary)

    async def run() -> None:
        server = await upstream.serve()
        print(f"listening {upstream.port}", flush=True)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        try:
            import uvloop
            uvloop.run(run())
        except ImportError:
            asyncio.run(run())


if __name__ == "__main__":
    main()
