"""llama.cpp's RPC backend (`parlance serve --rpc`): every server is checked before
llama.cpp connects (llama.cpp itself would abort the process), a model split across two
loopback rpc-servers generates what the local engine does, and a server lost mid-stream
ends that stream by its contract while the process keeps serving.

The rpc-servers are the real ones, built by `tests/support/llama_cpp_programs.py` from the
llama.cpp llama-cpp-python binds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import llama_cpp
import pytest

from parlance.core.errors import Unavailable
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.model import ContextSettings
from parlance.engines.llamacpp.rpc import (
    RPC_PROTO_MAJOR,
    RPC_PROTO_MINOR,
    Endpoint,
    RpcServers,
    probe,
)
from tests.support.llama_cpp_programs import build_root, require
from tests.support.real_engine import (
    CHAT_PROMPT,
    MODEL_ID,
    PATIENCE,
    chat_request,
    no_eog_bias,
    run,
)
from tests.support.serve_process import free_port, serve

SETTINGS = ContextSettings(n_ctx=1024, n_threads=2, parallel=1)


# -- the check before llama.cpp connects (no rpc-server needed) --------------------------


def test_endpoints_are_host_and_port():
    assert Endpoint.parse("10.0.0.5:50052") == Endpoint("10.0.0.5", 50052)
    assert str(Endpoint.parse(" gpu-box:1 ")) == "gpu-box:1"
    for bad in ("50052", "host:", ":50052", "host:port", "host:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            Endpoint.parse(bad)


def test_a_closed_port_is_unreachable():
    endpoint = Endpoint("127.0.0.1", free_port())
    with pytest.raises(Unavailable, match=f"{endpoint} is unreachable") as caught:
        probe(endpoint)
    assert caught.value.code == "rpc_server_unreachable"


@contextlib.contextmanager
def fake_server(reply: bytes | None) -> Iterator[Endpoint]:
    """A listener that reads the HELLO and answers `reply` (None: never answers)."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve_one() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1 + 8 + 24)
            if reply is not None:
                conn.sendall(reply)
            done.wait(PATIENCE)

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    try:
        yield Endpoint("127.0.0.1", listener.getsockname()[1])
    finally:
        done.set()
        thread.join(PATIENCE)
        listener.close()


def test_a_server_that_never_answers_times_out():
    with fake_server(None) as endpoint, pytest.raises(Unavailable, match="one client at a time"):
        probe(endpoint, timeout=0.5)


def test_a_server_of_another_protocol_version_is_named():
    reply = struct.pack("<Q", 28) + bytes([RPC_PROTO_MAJOR + 1, 0, 0, 0]) + bytes(24)
    with fake_server(reply) as endpoint, pytest.raises(Unavailable) as caught:
        probe(endpoint)
    assert f"RPC protocol {RPC_PROTO_MAJOR + 1}.0.0" in caught.value.message
    assert "built from the same llama.cpp" in caught.value.message


def test_serve_with_an_unreachable_rpc_server_is_a_clear_startup_error(tmp_path):
    assert llama_cpp.llama_supports_rpc(), "llama-cpp-python must be built with GGML_RPC=ON"
    endpoint = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "parlance", "serve", "--port", str(free_port()), "--data-dir",
         str(tmp_path), "--rpc", endpoint], capture_output=True, text=True, timeout=PATIENCE)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert f"RPC server {endpoint} is unreachable" in output
    assert "Traceback" not in output


# ggml's abort, as llama.cpp's RPC client raises it, in a child process: one from
# ggml-rpc.cpp marks the servers lost and the process lives on; any other still aborts.
ABORT = """
import ctypes, sys, threading
from llama_cpp._ggml import libggml
from parlance.engines.llamacpp import rpc

servers = rpc.RpcServers.parse(("127.0.0.1:1",))
told = threading.Event()

class Engine:
    def on_lost(self, error):
        print("told:", error.code, flush=True)
        told.set()

engine = Engine()
servers.watch(engine.on_lost)
rpc._install_abort_hook(servers)
libggml.ggml_abort.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
threading.Thread(target=libggml.ggml_abort, args=(sys.argv[1].encode(), 7, b"boom"),
                 daemon=True).start()
told.wait(float(sys.argv[2]))
servers.check()
"""


def abort_in_child(source_file: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", ABORT, source_file, str(PATIENCE)],
                          capture_output=True, text=True, timeout=PATIENCE * 2)


def test_an_abort_in_the_rpc_client_ends_its_engines_streams_not_the_process():
    done = abort_in_child("/src/ggml/src/ggml-rpc/ggml-rpc.cpp")
    assert "told: rpc_server_lost" in done.stdout, done.stderr
    assert "llama.cpp's RPC client failed (boom)" in done.stderr
    # servers.check() raises the loss from now on
    assert "Unavailable: The connection to the RPC servers (127.0.0.1:1) was lost" in done.stderr
    assert done.returncode == 1  # that exception, not SIGABRT


def test_any_other_abort_still_aborts_with_its_message():
    done = abort_in_child("/src/ggml/src/ggml.c")
    assert done.returncode == -signal.SIGABRT
    assert "/src/ggml/src/ggml.c:7: boom" in done.stderr
    assert "told:" not in done.stdout


# -- real rpc-servers ------------------------------------------------------------------------


@dataclass
class RpcProcess:
    proc: subprocess.Popen[bytes]
    endpoint: Endpoint
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def rpc_server(tmp: Path, name: str) -> Iterator[RpcProcess]:
    """A loopback rpc-server on a free port (one CPU thread), logging its commands."""
    binary = require("rpc-server")
    endpoint = Endpoint("127.0.0.1", free_port())
    log = tmp / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(binary), "-H", endpoint.host, "-p", str(endpoint.port), "-t", "1"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "GGML_RPC_DEBUG": "1"})
    server = RpcProcess(proc, endpoint, log)
    try:
        deadline = time.monotonic() + PATIENCE
        while True:
            assert proc.poll() is None, f"rpc-server exited: {server.output()[-2000:]}"
            try:
                probe(endpoint, timeout=PATIENCE)
                break
            except Unavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield server
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture
def two_rpc_servers(tmp_path):
    with rpc_server(tmp_path, "first") as first, rpc_server(tmp_path, "second") as second:
        yield first, second


@pytest.mark.peers
def test_the_protocol_version_is_the_bundled_llama_cpp_one():
    """The version `probe` asks for is the one in ggml-rpc.h of the llama.cpp that
    llama-cpp-python bundles: an upgrade of the pin must update it."""
    require("rpc-server")
    header = (build_root() / "src" / "vendor" / "llama.cpp" / "ggml" / "include"
              / "ggml-rpc.h").read_text()
    defined = dict(re.findall(r"#define RPC_PROTO_(MAJOR|MINOR)_VERSION\s+(\d+)", header))
    assert (int(defined["MAJOR"]), int(defined["MINOR"])) == (RPC_PROTO_MAJOR, RPC_PROTO_MINOR)


@pytest.mark.peers
@pytest.mark.model
async def test_a_model_split_across_two_rpc_servers_generates_what_the_local_engine_does(
        two_rpc_servers, llama):
    first, second = two_rpc_servers
    servers = RpcServers((first.endpoint, second.endpoint))
    devices = await asyncio.to_thread(servers.connect)
    assert [d.endpoint for d in devices] == [first.endpoint, second.endpoint]
    path = llama.model.path
    request = chat_request(CHAT_PROMPT, max_tokens=48)
    local = await asyncio.to_thread(LlamaCppEngine.load, path, SETTINGS)
    try:
        expected = await run(local, request)
    finally:
        await local.aclose()
    split = await asyncio.to_thread(LlamaCppEngine.load, path, SETTINGS, rpc=servers)
    try:
        got = await run(split, request)
    finally:
        await split.aclose()
    assert got.failed is None
    assert expected.text and got.text == expected.text
    assert got.usage.completion_tokens == expected.usage.completion_tokens
    for server in (first, second):  # each held layers and computed them
        assert "[graph_compute]" in server.output(), server.output()[-2000:]


@pytest.mark.peers
def test_startup_names_the_one_rpc_server_that_does_not_answer(tmp_path):
    with rpc_server(tmp_path, "alive") as alive:
        dead = f"127.0.0.1:{free_port()}"
        done = subprocess.run(
            [sys.executable, "-m", "parlance", "serve", "--port", str(free_port()),
             "--data-dir", str(tmp_path / "data"), "--rpc", str(alive.endpoint), "--rpc", dead],
            capture_output=True, text=True, timeout=PATIENCE)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert f"RPC server {dead} is unreachable" in output
    assert "Traceback" not in output


@pytest.mark.peers
@pytest.mark.model
def test_an_rpc_server_lost_mid_stream_ends_the_stream_and_the_server_lives_on(
        tmp_path, two_rpc_servers, llama):
    """The second rpc-server is killed while a chat stream runs on the split model: the
    stream ends with OpenAI's error frame and [DONE], later requests get a 503 saying
    why, the server still answers and shuts down cleanly."""
    first, second = two_rpc_servers
    body = {"model": MODEL_ID, "stream": True, "max_tokens": 2000, "temperature": 0,
            "logit_bias": no_eog_bias(llama),
            "messages": [{"role": "user", "content": CHAT_PROMPT}]}
    with serve(tmp_path, "--rpc", str(first.endpoint), "--rpc", str(second.endpoint),
               "--ctx-size", "2048", "--parallel", "1") as server:
        payloads = []
        with httpx.Client(base_url=server.base_url, timeout=PATIENCE) as client:
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                assert response.status_code == 200
                for line in response.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[len("data: "):]
                    payloads.append(data if data == "[DONE]" else json.loads(data))
                    if len(payloads) == 3:  # streaming: take the second server away
                        second.proc.send_signal(signal.SIGKILL)
            assert payloads[-1] == "[DONE]"
            error = payloads[-2]["error"]
            assert error["code"] == "rpc_server_lost", error
            assert "restarted" in error["message"]

            again = client.post("/v1/chat/completions", json={**body, "stream": False})
            assert again.status_code == 503
            assert again.json()["error"]["code"] == "rpc_server_lost"
            assert client.get("/health").status_code == 200
        assert first.proc.poll() is None
    assert server.proc.returncode == 0, server.output()[-3000:]
    assert "llama.cpp's RPC client failed" in server.output()
