"""llama.cpp's RPC backend: a model's layers on `rpc-server` processes on other machines
(`parlance serve --rpc HOST:PORT`, repeatable), for models larger than one machine.

As llama.cpp's own `--rpc` does (common/arg.cpp): the RPC backend's
`ggml_backend_rpc_add_server` gives each server's devices, and the model is loaded with
those devices (`llama_model_params.devices`) and every layer offloaded; layers are split
across them by their free memory. The servers are not registered globally, so models
loaded without RPC never see them.

llama.cpp's RPC client has no error path: a server it cannot reach, or one lost
mid-decode, is a `GGML_ABORT`, which ends the whole process. So:

* every server is checked first (`probe`: a connection and the protocol's HELLO, with
  timeouts), at startup and before a load, and one that does not answer is a clear
  error instead of an abort;
* ggml's abort hook is taken over (`_abort_hook`). An abort raised in ggml-rpc.cpp
  marks the servers lost: every engine on them ends its streams with
  `Unavailable(rpc_server_lost)` and refuses new requests, and the thread that hit
  the abort is parked for good instead of returning into `abort()`. The server keeps
  serving its other models. llama.cpp cannot recover that connection (its other
  threads wait forever on the parked one, and its dispatcher stays cached by
  endpoint), so RPC stays unusable in this process: models on RPC need a restart.
  Aborts from anywhere else abort as before.
* loads, context creation and frees on RPC devices run on a helper thread that the
  caller waits for only until the loss (`RpcServers.run`), so nothing waits forever.

An rpc-server serves one client at a time: while this process holds its connection (a
model on it is loaded) a probe would wait in its queue, so none is made then.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
import struct
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import llama_cpp
from llama_cpp._ggml import libggml

from parlance.core.errors import ParlanceError, Unavailable

T = TypeVar("T")
Lost = Callable[[ParlanceError], None]

# ggml-rpc.h of the llama.cpp that llama-cpp-python 0.3.36 bundles: a server must speak
# this major version and at most this minor one (tests check the header).
RPC_PROTO_MAJOR = 7
RPC_PROTO_MINOR = 0
_RPC_CMD_HELLO = 14
_CONN_CAPS = 24  # bytes of transport capabilities in HELLO; zeros: plain TCP
_HELLO_REPLY = 4 + _CONN_CAPS  # major, minor, patch, padding, capabilities
PROBE_SECONDS = 5.0
_RPC_SOURCE = "ggml-rpc.cpp:"  # GGML_ABORT messages start with "<file>:<line>: "

_ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
libggml.ggml_set_abort_callback.argtypes = [_ABORT_CALLBACK]
libggml.ggml_set_abort_callback.restype = ctypes.c_void_p
libggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
libggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
libggml.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
libggml.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
libggml.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
libggml.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
libggml.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libggml.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
libggml.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
libggml.ggml_backend_dev_name.restype = ctypes.c_char_p
libggml.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                            ctypes.POINTER(ctypes.c_size_t)]
libggml.ggml_backend_dev_memory.restype = None
_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)


def unreachable(message: str) -> Unavailable:
    return Unavailable(message, code="rpc_server_unreachable")


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """HOST:PORT as llama.cpp reads it (the port after the last colon)."""
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--rpc {text!r}: expected HOST:PORT of an rpc-server")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def probe(endpoint: Endpoint, timeout: float = PROBE_SECONDS) -> tuple[int, int, int]:
    """Connect and say HELLO as llama.cpp's client does; the server's protocol version.
    Raises `Unavailable(rpc_server_unreachable)` saying what went wrong."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack("<BQ", _RPC_CMD_HELLO, _CONN_CAPS) + bytes(_CONN_CAPS))
            (size,) = struct.unpack("<Q", _receive(sock, 8))
            if size != _HELLO_REPLY:
                raise unreachable(f"{endpoint} answered HELLO with {size} bytes, not an "
                                  f"rpc-server of this llama.cpp version")
            major, minor, patch = _receive(sock, size)[:3]
    except TimeoutError:
        raise unreachable(f"RPC server {endpoint} did not answer within {timeout:g} s (an "
                          "rpc-server serves one client at a time: is another process "
                          "using it?)") from None
    except OSError as exc:
        raise unreachable(f"RPC server {endpoint} is unreachable: "
                          f"{exc.strerror or exc}") from None
    if major != RPC_PROTO_MAJOR or minor > RPC_PROTO_MINOR:
        raise unreachable(f"RPC server {endpoint} speaks RPC protocol {major}.{minor}.{patch}; "
                          f"this Parlance's llama.cpp speaks {RPC_PROTO_MAJOR}."
                          f"{RPC_PROTO_MINOR}: run an rpc-server built from the same "
                          "llama.cpp")
    return major, minor, patch


def _receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the connection was closed during the handshake")
        data += chunk
    return data


@dataclass(frozen=True, slots=True)
class Device:
    name: str  # llama.cpp's: RPC0, RPC1, …
    endpoint: Endpoint
    free_bytes: int
    total_bytes: int


class RpcServers:
    """The rpc-servers this process offloads to; one per process (llama.cpp's RPC client
    and ggml's abort hook are process-wide)."""

    def __init__(self, endpoints: tuple[Endpoint, ...]) -> None:
        if not endpoints:
            raise ValueError("no RPC servers given")
        self.endpoints = endpoints
        self.devices: tuple[Device, ...] = ()
        self._handles: ctypes.Array[ctypes.c_void_p] | None = None  # NULL-terminated
        self._lost: ParlanceError | None = None
        self._watchers: list[weakref.WeakMethod[Lost]] = []
        self._models = 0  # loaded models: they hold the servers' connections
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, texts: tuple[str, ...]) -> RpcServers:
        return cls(tuple(Endpoint.parse(t) for t in texts))

    # -- startup ----------------------------------------------------------------------

    def connect(self) -> tuple[Device, ...]:
        """Check every server, then take its devices; the clear error of the first that
        does not answer (before llama.cpp, which would abort, ever connects)."""
        if not llama_cpp.llama_supports_rpc():
            raise unreachable("this llama-cpp-python was built without llama.cpp's RPC "
                              "backend; reinstall it with CMAKE_ARGS=-DGGML_RPC=ON (make "
                              "install does)")
        for endpoint in self.endpoints:
            probe(endpoint)
        _install_abort_hook(self)
        reg = libggml.ggml_backend_reg_by_name(b"RPC")
        address = reg and libggml.ggml_backend_reg_get_proc_address(
            reg, b"ggml_backend_rpc_add_server")
        if not address:
            raise unreachable("llama.cpp's RPC backend has no ggml_backend_rpc_add_server")
        add_server = _ADD_SERVER(address)
        devices, handles = [], []
        for endpoint in self.endpoints:
            server = self.run(add_server, str(endpoint).encode())
            count = libggml.ggml_backend_reg_dev_count(server) if server else 0
            if not count:
                raise unreachable(f"RPC server {endpoint} has no devices")
            for index in range(count):
                handle = libggml.ggml_backend_reg_dev_get(server, index)
                free, total = ctypes.c_size_t(), ctypes.c_size_t()
                self.run(libggml.ggml_backend_dev_memory, handle, ctypes.byref(free),
                         ctypes.byref(total))
                handles.append(handle)
                devices.append(Device(libggml.ggml_backend_dev_name(handle).decode(),
                                      endpoint, free.value, total.value))
        self._handles = (ctypes.c_void_p * (len(handles) + 1))(*handles, None)
        self.devices = tuple(devices)
        return self.devices

    # -- loading ------------------------------------------------------------------------

    def offload(self, params: llama_cpp.llama_model_params) -> None:
        """Model params that put every layer on the servers' devices."""
        if self._handles is None:
            raise RuntimeError("RpcServers.connect() first")
        # (the binding's hint says array; the field is the pointer to its first item)
        params.devices = ctypes.cast(self._handles, ctypes.c_void_p)  # type: ignore[assignment]
        params.n_gpu_layers = -1  # all of them, and the output layer
        params.split_mode = llama_cpp.LLAMA_SPLIT_MODE_LAYER

    def before_load(self) -> None:
        """Refuse a load on servers that are gone, with the reason, instead of aborting."""
        self.check()
        with self._lock:
            connected = self._models > 0
        if not connected:  # (while connected, a server is busy with us: it would not answer)
            for endpoint in self.endpoints:
                probe(endpoint)

    def loaded(self) -> None:
        """A model on the servers was loaded: it holds their connections."""
        with self._lock:
            self._models += 1

    def released(self) -> None:
        """A model on the servers was freed."""
        with self._lock:
            self._models = max(0, self._models - 1)

    def watch(self, on_lost: Lost) -> None:
        """`on_lost` (a bound method, held weakly) ends an engine's streams and refuses
        its new requests if the servers are lost."""
        with self._lock:
            self._watchers = [w for w in self._watchers if w() is not None]
            self._watchers.append(weakref.WeakMethod(on_lost))

    @property
    def lost(self) -> ParlanceError | None:
        return self._lost

    def check(self) -> None:
        if self._lost is not None:
            raise self._lost

    def run(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)`, a llama.cpp call that talks to the servers, on a helper thread
        waited for until it returns or the servers are lost (then it never will)."""
        self.check()
        outcome: list[tuple[bool, Any]] = []
        done = threading.Event()

        def call() -> None:
            try:
                outcome.append((True, work(*args)))
            except BaseException as exc:  # handed to the caller
                outcome.append((False, exc))
            finally:
                done.set()

        threading.Thread(target=call, name="parlance-rpc-call", daemon=True).start()
        while not done.wait(0.25):
            self.check()
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    # -- the loss -------------------------------------------------------------------------

    def _on_lost(self, reason: str) -> None:
        """On the thread that hit the abort: every engine on these servers is told."""
        names = ", ".join(str(e) for e in self.endpoints)
        error = Unavailable(
            f"The connection to the RPC servers ({names}) was lost: {reason}. Models on "
            "RPC servers cannot be used again until Parlance is restarted.",
            code="rpc_server_lost")
        with self._lock:
            if self._lost is not None:
                return
            self._lost = error
            callbacks = [w() for w in self._watchers]
        for callback in callbacks:
            if callback is not None:
                with contextlib.suppress(Exception):  # the others must still be told
                    callback(error)


_servers: list[RpcServers] = []
_hook: Any = None  # the ctypes callback, kept alive for as long as ggml may call it
_previous: int | None = None


def _install_abort_hook(servers: RpcServers) -> None:
    global _hook, _previous
    _servers.append(servers)
    if _hook is None:
        _hook = _ABORT_CALLBACK(_abort_hook)
        _previous = libggml.ggml_set_abort_callback(_hook)


def _abort_hook(raw: bytes | None) -> None:
    message = (raw or b"").decode("utf-8", "replace")
    if _RPC_SOURCE not in message:
        if _previous:
            _ABORT_CALLBACK(_previous)(raw)
        else:
            print(message, file=sys.stderr, flush=True)
        return  # ggml aborts the process, as it would have without this hook
    reason = message.split(": ", 1)[-1].strip()
    print(f"parlance: llama.cpp's RPC client failed ({reason}); the models on RPC "
          "servers are out of service until Parlance is restarted",
          file=sys.stderr, flush=True)
    for servers in list(_servers):
        servers._on_lost(reason)
    threading.Event().wait()  # parked for good: returning would abort the process
