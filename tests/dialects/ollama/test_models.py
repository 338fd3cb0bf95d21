"""Ollama's model endpoints with the official `ollama` Python client as oracle, over a
fake engine and real GGUF headers (the SmolLM2 file, tiny synthetic ones): list,
show, ps, version, copy, delete, and pull streamed from a local origin (uvicorn on
loopback, allow-listed as --download-allow-host would), errors in Ollama's envelope."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import ollama
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from parlance.engines.fake import FakeEngine
from parlance.models import downloads
from parlance.models.catalog import catalog
from parlance.models.downloads import DownloadLimits
from parlance.models.registry import BUILTIN, ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.net.guard import public_only_client
from parlance.server import ServerSettings, create_app
from tests.support.gguf_writer import ARR, STR, U32, write_gguf
from tests.support.live_server import serving as _serving

PATIENCE = 60.0


def smollm2_path() -> Path:
    return BUILTIN[0].locate()


def modified(path: Path) -> datetime:
    """The file's modification time, to the microsecond a client's datetime keeps."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=path.stat().st_mtime_ns
                                                        // 1000)


WARM = ModelSpec(id="fake-model", locate=smollm2_path, aliases=("fake-alias",),
                 ctx_size=2048, sampling={"temperature": 0.7, "top_k": 20})
COLD = ModelSpec(id="acme/cold-model", locate=smollm2_path)


class Loader:
    def __init__(self) -> None:
        self.loaded: list[str] = []

    def __call__(self, spec, plan, on_progress):
        self.loaded.append(spec.id)
        return FakeEngine(context_length=plan.context_length)


def make(tmp_path: Path, **settings: Any) -> tuple[ServedModels, Starlette]:
    models_dir = tmp_path / "models"
    models_dir.mkdir(exist_ok=True)
    warm = ServedModel(WARM, FakeEngine(context_length=2048), 1700000000, size_bytes=123_456)
    models = ServedModels([warm], catalog=catalog({COLD.id: COLD}, models_dir),
                          loader=Loader(), idle_ttl=600.0)
    settings = {"models_dir": models_dir, "data_dir": tmp_path / "data",
                "download_allow_hosts": ("127.0.0.1",), **settings}
    return models, create_app(models, ServerSettings(**settings))


@contextlib.asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[str]:
    """The app on a loopback port, with its lifespan: downloads still running at the
    end are cancelled, as at a server's shutdown."""
    async with app.router.lifespan_context(app), _serving(app) as address:
        yield address


def oracle(app: Starlette) -> ollama.AsyncClient:
    """The official client, talking to the app in process."""
    return ollama.AsyncClient(host="http://parlance.test", transport=httpx.ASGITransport(app=app))


@pytest.fixture
def served(tmp_path: Path) -> tuple[ServedModels, Starlette]:
    return make(tmp_path)


@pytest.fixture
def client(served) -> ollama.AsyncClient:
    return oracle(served[1])


@pytest.fixture
def raw(served) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=served[1]),
                             base_url="http://parlance.test")


def tiny_gguf(path: Path, data_bytes: int = 64, **extra: tuple[int, Any]) -> bytes:
    """A small valid GGUF file (and its bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    kv = {"general.architecture": (STR, "llama"), "general.name": (STR, "Tiny"),
          "general.file_type": (U32, 7), "llama.context_length": (U32, 512),
          "general.license": (STR, "apache-2.0"),
          "tokenizer.ggml.tokens": (ARR, (STR, [f"t{i}" for i in range(300)])),
          "tokenizer.chat_template": (STR, "{{ messages }}<think></think>"), **extra}
    write_gguf(path, kv, [("token_embd.weight", (data_bytes,), data_bytes)])
    return path.read_bytes()


# -- listings -------------------------------------------------------------------------


async def test_list_names_every_model_with_a_tag_and_its_gguf_details(client):
    listing = await client.list()
    assert [m.model for m in listing.models] == ["fake-model:latest", "acme/cold-model:latest"]
    path = smollm2_path()
    for model in listing.models:
        assert model.size == path.stat().st_size
        assert model.modified_at == modified(path)
        assert model.digest.startswith("sha256:") and len(model.digest) == 71
        details = model.details
        assert details.format == "gguf" and details.family == "llama"
        assert details.families == ["llama"] and details.parameter_size == "134.52M"
        assert details.quantization_level == "Q4_1" and details.parent_model == ""
    assert listing.models[0].digest == listing.models[1].digest  # the same file


async def test_show_reads_the_gguf_header(client, raw):
    shown = await client.show("fake-model")
    info = shown.modelinfo
    assert info["general.architecture"] == "llama" and info["llama.context_length"] == 8192
    assert info["general.parameter_count"] == 134_515_008
    assert info["tokenizer.ggml.tokens"] == [] and info["tokenizer.ggml.merges"] == []
    assert "general.name" not in info and "tokenizer.chat_template" not in info
    assert shown.template.startswith("{% for message in messages %}")
    assert shown.capabilities == ["completion", "tools"]  # no reasoning markers, no FIM
    assert shown.details.family == "llama" and shown.details.quantization_level == "Q4_1"
    assert shown.parameters.splitlines() == [f"{'temperature':<30} 0.7",
                                             f"{'top_k':<30} 20", f"{'num_ctx':<30} 2048"]
    assert shown.modelfile.splitlines()[1:] == ["FROM fake-model:latest",
                                                "PARAMETER temperature 0.7",
                                                "PARAMETER top_k 20", "PARAMETER num_ctx 2048"]
    assert shown.modified_at == modified(smollm2_path())
    assert (await client.show("fake-alias:latest")).modelinfo == info  # an alias, tagged
    verbose = (await raw.post("/api/show", json={"name": "fake-model", "verbose": True})).json()
    assert len(verbose["model_info"]["tokenizer.ggml.tokens"]) == 49152
    assert verbose["model_info"]["tokenizer.ggml.tokens"][:2] == ["<|endoftext|>", "<|im_start|>"]


async def test_show_capabilities_and_license_of_another_model(tmp_path):
    tiny = tmp_path / "models" / "acme" / "tiny" / "tiny.gguf"
    tiny_gguf(tiny, **{"tokenizer.ggml.fim_pre_token_id": (U32, 1),
                       "tokenizer.ggml.fim_suf_token_id": (U32, 2),
                       "tokenizer.ggml.fim_mid_token_id": (U32, 3)})
    embedder = tmp_path / "models" / "acme" / "embed.gguf"
    tiny_gguf(embedder, **{"llama.pooling_type": (U32, 1)})
    _, app = make(tmp_path)
    client = oracle(app)
    shown = await client.show("acme/tiny")
    assert shown.capabilities == ["completion", "tools", "thinking", "insert"]
    assert shown.license == "apache-2.0" and shown.details.quantization_level == "Q8_0"
    assert shown.modelinfo["tokenizer.ggml.tokens"] == []  # 300 items: longer than 5
    assert (await client.show("acme/embed")).capabilities == ["embedding"]


async def test_a_planted_gguf_leaves_every_listing_up(tmp_path):
    """A file whose one value nests arrays 5000 deep (60 KB, past a download's check of
    the magic bytes) is listed without its details, in Ollama's and LM Studio's lists."""
    planted = tmp_path / "models" / "evil" / "deep.gguf"
    planted.parent.mkdir(parents=True)
    nesting = struct.pack("<I", ARR) + struct.pack("<IQ", ARR, 1) * 4999 + struct.pack(
        "<IQ", U32, 0)
    planted.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k"
                        + nesting)
    _, app = make(tmp_path)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://parlance.test") as http:
        for _ in range(2):  # and again: nothing was left broken
            tags = await http.get("/api/tags")
            assert tags.status_code == 200, tags.text
            names = [m["model"] for m in tags.json()["models"]]
            assert "evil/deep:latest" in names
            shown = await http.post("/api/show", json={"model": "evil/deep", "verbose": True})
            assert shown.status_code == 200, shown.text
            assert shown.json()["model_info"] == {}
            listed = await http.get("/api/v1/models")
            assert listed.status_code == 200, listed.text
            assert "evil/deep" in [m["key"] for m in listed.json()["models"]]


async def test_errors_use_ollamas_envelope_and_statuses(client, raw):
    with pytest.raises(ollama.ResponseError) as caught:
        await client.show("nope:latest")
    assert caught.value.status_code == 404 and caught.value.error == "model 'nope:latest' not found"
    with pytest.raises(ollama.ResponseError) as caught:
        await client.show("fake-model:v2")  # another tag is another model
    assert caught.value.status_code == 404
    for path, body, status in [("/api/show", {}, 400), ("/api/show", {"model": 3}, 400),
                               ("/api/copy", {"source": "fake-model"}, 400),
                               ("/api/pull", [], 400)]:
        answer = await raw.post(path, json=body)
        assert answer.status_code == status and set(answer.json()) == {"error"}, path
    assert (await raw.post("/api/show", json={})).json() == {"error": "model is required"}
    wrong = await raw.post("/api/tags")
    assert wrong.status_code == 405 and set(wrong.json()) == {"error"}


async def test_api_keys_guard_the_model_endpoints(tmp_path):
    _, app = make(tmp_path, api_keys=("sekrit",))
    with pytest.raises(ollama.ResponseError) as caught:
        await oracle(app).list()
    assert caught.value.status_code == 401 and "API key" in caught.value.error
    allowed = ollama.AsyncClient(host="http://parlance.test", transport=httpx.ASGITransport(
        app=app), headers={"Authorization": "Bearer sekrit"})
    assert (await allowed.copy("fake-model", "mine")).status == "success"


async def test_ps_shows_loaded_models_with_their_expiry(served, client):
    models, _ = served
    before = datetime.now(UTC)
    await models.acquire("acme/cold-model:latest")  # loaded just in time: the TTL applies
    listing = (await client.ps()).models
    assert [m.model for m in listing] == ["fake-model:latest", "acme/cold-model:latest"]
    warm, cold = listing
    assert warm.expires_at > before + timedelta(days=365 * 200)  # pinned: never
    ttl = timedelta(seconds=600)
    assert before + ttl <= cold.expires_at <= datetime.now(UTC) + ttl
    assert warm.size == 123_456 and cold.size == models.resolve("acme/cold-model")[0].size_bytes
    assert cold.size > 0 and warm.size_vram == 0 and cold.size_vram == 0
    assert warm.context_length == 2048 and cold.context_length == 4096  # the default load
    assert warm.details.parameter_size == "134.52M" and cold.digest.startswith("sha256:")
    await models.unload("acme/cold-model")
    assert [m.model for m in (await client.ps()).models] == ["fake-model:latest"]


async def test_version_and_liveness_probes(raw):
    version = await raw.get("/api/version")
    assert version.status_code == 200 and version.json() == {"version": "0.32.15"}
    assert (await raw.head("/api/version")).status_code == 200
    assert (await raw.head("/")).status_code == 200
    assert (await raw.head("/api/tags")).status_code == 200


# -- copy and delete --------------------------------------------------------------------


async def test_copy_makes_a_name_that_every_dialect_resolves_and_that_outlives_a_restart(
        tmp_path, served, client, raw):
    assert (await client.copy("fake-alias", "backup")).status == "success"
    names = [m.model for m in (await client.list()).models]
    assert names == ["fake-model:latest", "acme/cold-model:latest", "backup:latest"]
    chat = await raw.post("/v1/chat/completions", json={
        "model": "backup:latest", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 200 and chat.json()["model"] == "backup:latest"
    kept = json.loads((tmp_path / "data" / "model_copies.json").read_text())
    assert kept == {"copies": {"backup": "fake-model"}}
    restarted = oracle(make(tmp_path)[1])
    assert "backup:latest" in [m.model for m in (await restarted.list()).models]
    assert (await restarted.delete("backup:latest")).status == "success"  # the name only
    assert [m.model for m in (await restarted.list()).models] == [
        "fake-model:latest", "acme/cold-model:latest"]
    assert json.loads((tmp_path / "data" / "model_copies.json").read_text()) == {"copies": {}}
    assert smollm2_path().is_file()


async def test_copy_refusals(client):
    with pytest.raises(ollama.ResponseError) as caught:
        await client.copy("nope", "x")
    assert caught.value.status_code == 404 and caught.value.error == "model 'nope' not found"
    with pytest.raises(ollama.ResponseError) as caught:
        await client.copy("fake-model", "acme/cold-model:latest")
    assert caught.value.status_code == 400 and "already names" in caught.value.error


async def test_delete_removes_a_downloaded_file_and_only_that(tmp_path):
    models_dir = tmp_path / "models"
    tiny = models_dir / "acme" / "tiny-repo" / "tiny.gguf"
    tiny_gguf(tiny)
    (tiny.parent / "tiny.gguf.part").write_bytes(b"GGUF")  # an old partial download
    split = [models_dir / "acme" / f"big-0000{i}-of-00002.gguf" for i in (1, 2)]
    tiny_gguf(split[0])
    split[1].write_bytes(b"second shard")
    outside = tmp_path / "elsewhere.gguf"
    tiny_gguf(outside)
    (models_dir / "linked.gguf").symlink_to(outside)
    models, app = make(tmp_path)
    client = oracle(app)
    await client.copy("acme/tiny-repo", "tiny-copy")
    await models.acquire("acme/tiny-repo")  # loaded: unloaded by the delete
    assert (await client.delete("acme/tiny-repo:latest")).status == "success"
    assert not tiny.exists() and not (tiny.parent / "tiny.gguf.part").exists()
    assert not tiny.parent.exists() and (models_dir / "acme").is_dir()  # other models there
    assert not models.is_loaded("acme/tiny-repo")
    assert "tiny-copy" not in models.copies  # names of a deleted model go with it
    await client.delete("acme/big")
    assert not any(p.exists() for p in split) and not (models_dir / "acme").exists()
    assert models_dir.is_dir()
    for name, status in [("linked", 400),  # a link out of the models directory
                         ("acme/cold-model", 400),  # the wheel's file
                         ("fake-model", 400),  # the model the server started with
                         ("fake-alias", 400),  # a configured name: not the model's own
                         ("acme/tiny-repo", 404)]:
        with pytest.raises(ollama.ResponseError) as caught:
            await client.delete(name)
        assert caught.value.status_code == status, name
    assert outside.is_file() and smollm2_path().is_file()


# -- pull -----------------------------------------------------------------------------


class Origin:
    """Serves files (`/<name>`) whose second half waits for `gate`; `missing*` is a 404;
    `vanishing*` sends its first half, then drops the connection and answers 404."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.gate = threading.Event()
        self.vanished = False
        self.ranges: list[str | None] = []  # the Range header of each request
        self.dropped = threading.Event()  # a download left before the end of its file
        self.holding = threading.Event()  # the first half went out; the rest waits for gate

    async def serve(self, request: Request) -> Response:
        name = request.path_params["name"]
        self.ranges.append(request.headers.get("range"))
        vanishing = name.startswith("vanishing")
        if name.startswith("missing") or (vanishing and self.vanished):
            return PlainTextResponse("no such file", status_code=404)
        data = self.files[name]
        half = len(data) // 2
        start = int(request.headers.get("range", "bytes=0-")[6:].rstrip("-"))
        if start:  # a resumed pull: the rest, as a 206
            return Response(data[start:], status_code=206, headers={
                "content-range": f"bytes {start}-{len(data) - 1}/{len(data)}"})

        async def body() -> AsyncIterator[bytes]:
            yield data[:half]
            if vanishing:
                self.vanished = True
                raise ConnectionAbortedError("the origin drops the connection")
            try:
                self.holding.set()
                while not self.gate.is_set():
                    await asyncio.sleep(0.005)
            except BaseException:
                self.dropped.set()
                raise
            yield data[half:]

        return StreamingResponse(body(), headers={"content-length": str(len(data))},
                                 media_type="application/octet-stream")


@pytest.fixture
def origin() -> Iterator[tuple[Origin, str]]:
    state = Origin()
    app = Starlette(routes=[Route("/files/{name}", state.serve)])
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="critical"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + PATIENCE
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.01)
    yield state, f"http://127.0.0.1:{sock.getsockname()[1]}/files"
    state.gate.set()
    server.should_exit = True
    thread.join(PATIENCE)
    sock.close()


async def test_pull_streams_progress_while_the_download_runs(tmp_path, origin):
    state, base = origin
    data = tiny_gguf(tmp_path / "src" / "tiny.gguf", data_bytes=200_000)
    state.files["Tiny-Q8_0.gguf"] = data
    models, app = make(tmp_path)
    async with serving(app) as address, ollama.AsyncClient(host=f"http://{address}",
                                                           timeout=PATIENCE) as client:
        lines = []
        async for line in await client.pull(f"{base}/Tiny-Q8_0.gguf", stream=True):
            lines.append(line)
            if line.completed == len(data) // 2:  # the origin holds the rest until now
                state.gate.set()
        shown = [line.model_dump(exclude_none=True) for line in lines]
        progress = shown[:-2]
        assert all(line["status"] == "pulling Tiny-Q8_0.gguf" for line in progress)
        assert all(line["digest"] == "Tiny-Q8_0.gguf" and line["total"] == len(data)
                   for line in progress)
        done = [line.get("completed", 0) for line in progress]
        assert len(data) // 2 in done and done == sorted(done) and done[-1] == len(data)
        assert shown[-2:] == [{"status": "pulled Tiny-Q8_0.gguf as 127.0.0.1/tiny-q8_0:latest"},
                              {"status": "success"}]
        path = tmp_path / "models" / "127.0.0.1" / "Tiny-Q8_0.gguf"
        assert path.read_bytes() == data
        shown_model = await client.show("127.0.0.1/tiny-q8_0")
        assert shown_model.details.quantization_level == "Q8_0"
        again = await client.pull(f"{base}/Tiny-Q8_0.gguf")  # there already
        assert again.status == "success"


async def test_pull_without_streaming_waits_for_the_file(tmp_path, origin):
    state, base = origin
    state.files["tiny.gguf"] = tiny_gguf(tmp_path / "src" / "tiny.gguf")
    state.gate.set()
    _, app = make(tmp_path)
    async with serving(app) as address, ollama.AsyncClient(host=f"http://{address}",
                                                           timeout=PATIENCE) as client:
        done = await client.pull(f"{base}/tiny.gguf")
        assert done.model_dump(exclude_none=True) == {"status": "success"}
        assert "127.0.0.1/tiny:latest" in [m.model for m in (await client.list()).models]


async def test_pull_of_a_served_model_succeeds_at_once(client, raw):
    assert (await client.pull("fake-model:latest")).status == "success"
    streamed = [line async for line in await client.pull("acme/cold-model", stream=True)]
    assert [line.status for line in streamed] == ["success"]
    answer = await raw.post("/api/pull", json={"name": "fake-alias"})  # older clients
    assert answer.headers["content-type"] == "application/x-ndjson"
    assert answer.text == '{"status":"success"}\n'


async def test_pull_refusals_come_before_any_line(tmp_path, client, origin):
    _, base = origin
    cases = [("llama3.2", "names from Ollama's registry"),  # only Ollama's registry has it
             ("hf.co/a/b/c.gguf", "no catalog name"),  # (catalog names: tests/cli)
             ("https://example.com/model.bin", "direct link to a .gguf"),
             (f"{base}/missing.gguf", "HTTP 404"),
             (f"{base}/{'m' * 295}.gguf", "too long")]  # issue 39: was a 500
    for name, words in cases:
        for stream in (True, False):
            with pytest.raises(ollama.ResponseError) as caught:
                answer = await client.pull(name, stream=stream)
                if stream:
                    [line async for line in answer]
            assert caught.value.status_code == 400 and words in caught.value.error, name
    _, guarded = make(tmp_path, download_allow_hosts=())
    with pytest.raises(ollama.ResponseError) as caught:
        await oracle(guarded).pull(f"{base}/x.gguf")
    assert caught.value.status_code == 400 and "--download-allow-host" in caught.value.error
    _, no_dir = make(tmp_path, models_dir=None)
    with pytest.raises(ollama.ResponseError) as caught:
        await oracle(no_dir).pull(f"{base}/x.gguf")
    assert caught.value.status_code == 400 and "--models-dir" in caught.value.error


async def test_a_download_that_fails_midway_ends_the_stream_with_an_error_line(tmp_path,
                                                                               origin):
    state, base = origin
    state.files["vanishing.gguf"] = tiny_gguf(tmp_path / "src" / "v.gguf", data_bytes=100_000)
    _, app = make(tmp_path)
    async with (serving(app) as address, httpx.AsyncClient(timeout=PATIENCE) as http,
                http.stream("POST", f"http://{address}/api/pull",
                            json={"model": f"{base}/vanishing.gguf"}) as answer):
        assert answer.status_code == 200
        lines = [json.loads(line) async for line in answer.aiter_lines()]
    assert lines[0]["status"] == "pulling vanishing.gguf"
    assert lines[-1] == {"error": f"the server answered HTTP 404 for {base}/vanishing.gguf"}
    assert not (tmp_path / "models" / "127.0.0.1" / "vanishing.gguf").exists()


async def test_a_pull_stream_ends_when_the_server_drains(tmp_path, origin):
    state, base = origin
    state.files["held.gguf"] = tiny_gguf(tmp_path / "src" / "h.gguf", data_bytes=100_000)
    _, app = make(tmp_path)
    async with (serving(app) as address, httpx.AsyncClient(timeout=PATIENCE) as http,
                http.stream("POST", f"http://{address}/api/pull",
                            json={"model": f"{base}/held.gguf"}) as answer):
        lines = answer.aiter_lines()
        assert json.loads(await anext(lines))["status"] == "pulling held.gguf"
        app.state.drain.end_grace()  # the grace is over: the origin still holds the rest
        rest = [json.loads(line) async for line in lines]
    assert rest[-1] == {"error": "The server is shutting down; retry once it is back "
                                 "(or against another instance)."}


async def until(predicate: Any, what: str) -> None:
    for _ in range(int(PATIENCE / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_a_pull_not_streamed_is_answered_503_when_the_server_drains(tmp_path, origin):
    state, base = origin
    state.files["held.gguf"] = tiny_gguf(tmp_path / "src" / "h.gguf", data_bytes=100_000)
    _, app = make(tmp_path)
    async with serving(app) as address, httpx.AsyncClient(timeout=PATIENCE) as http:
        pull = asyncio.ensure_future(http.post(f"http://{address}/api/pull", json={
            "model": f"{base}/held.gguf", "stream": False}))
        await until(lambda: app.state.drain.running, "the pull waits for its file")
        app.state.drain.end_grace()
        answer = await pull
    assert answer.status_code == 503
    assert answer.json() == {"error": "The server is shutting down; retry once it is back "
                                      "(or against another instance)."}


async def test_a_pull_not_streamed_whose_client_leaves_stops_its_download(tmp_path, origin,
                                                                        monkeypatch):
    """The same rule as for a stream (and as for every call): a client that leaves is
    not followed any more, so the download stops and a later pull resumes it. (The
    download's client waits for the held bytes without a read timeout here, so nothing
    else can stop it.)"""
    monkeypatch.setattr(downloads, "download_client", lambda hosts: public_only_client(
        hosts, timeout=httpx2.Timeout(30, read=None), follow_redirects=True))
    state, base = origin
    data = tiny_gguf(tmp_path / "src" / "gone.gguf", data_bytes=100_000)
    state.files["gone.gguf"] = data
    part = tmp_path / "models" / "127.0.0.1" / "gone.gguf.part"
    _, app = make(tmp_path)
    async with serving(app) as address, httpx.AsyncClient(timeout=PATIENCE) as http:
        pull = asyncio.ensure_future(http.post(f"http://{address}/api/pull", json={
            "model": f"{base}/gone.gguf", "stream": False}))
        assert await asyncio.to_thread(state.holding.wait, PATIENCE)
        await until(lambda: app.state.drain.running, "the pull waits for its file")
        await until(lambda: part.exists() and part.stat().st_size, "some bytes arrived")
        pull.cancel()  # the client leaves: its connection closes
        with contextlib.suppress(asyncio.CancelledError):
            await pull
        assert await asyncio.to_thread(state.dropped.wait, PATIENCE)
        state.gate.set()
        done = await http.post(f"http://{address}/api/pull",
                               json={"model": f"{base}/gone.gguf", "stream": False})
        assert done.json() == {"status": "success"}
    first, resumed = state.ranges  # stopped, then resumed from what it had
    assert first is None and resumed is not None and resumed != "bytes=0-"
    assert (tmp_path / "models" / "127.0.0.1" / "gone.gguf").read_bytes() == data


async def test_a_model_without_a_readable_gguf_header_is_listed_and_shown_plainly():
    """(an upstream server's model, or here the fake model's /dev/null)"""
    from tests.support.fake_app import make_app

    client = oracle(make_app(FakeEngine()))
    [listed] = (await client.list()).models
    assert listed.model == "fake-model:latest" and listed.size == 0 and listed.digest == ""
    assert listed.details.format == "" and listed.details.families is None
    shown = await client.show("fake-alias")
    assert shown.modelinfo == {} and shown.capabilities == ["completion", "tools"]
    assert shown.modelfile.splitlines()[1] == "FROM fake-alias:latest"
    [running] = (await client.ps()).models
    assert running.model == "fake-model:latest" and running.context_length == 2048


async def test_a_streamed_pull_whose_client_leaves_stops_its_download(tmp_path, origin):
    """Ollama has no cancel call: a pull's download stops once nobody follows it, and
    the next pull resumes what it fetched."""
    state, base = origin
    data = tiny_gguf(tmp_path / "src" / "left.gguf", data_bytes=100_000)
    state.files["left.gguf"] = data
    part = tmp_path / "models" / "127.0.0.1" / "left.gguf.part"
    _, app = make(tmp_path)
    async with serving(app) as address, httpx.AsyncClient(timeout=PATIENCE) as http:
        async with http.stream("POST", f"http://{address}/api/pull",
                               json={"model": f"{base}/left.gguf"}) as answer:
            lines = answer.aiter_lines()
            while json.loads(await anext(lines)).get("completed") != len(data) // 2:
                pass
        # the client left while the origin holds the second half: the download stops
        assert await asyncio.to_thread(state.dropped.wait, PATIENCE)
        state.gate.set()
        done = await http.post(f"http://{address}/api/pull",
                               json={"model": f"{base}/left.gguf", "stream": False})
        assert done.json() == {"status": "success"}
    assert state.ranges == [None, f"bytes={len(data) // 2}-"]  # stopped, then resumed
    assert not part.exists()
    assert (tmp_path / "models" / "127.0.0.1" / "left.gguf").read_bytes() == data


async def test_pulls_beyond_the_download_limit_are_refused_in_each_envelope(tmp_path, origin):
    state, base = origin
    for name in ("one.gguf", "two.gguf"):
        state.files[name] = tiny_gguf(tmp_path / "src" / name, data_bytes=100_000)
    _, app = make(tmp_path, download_limits=DownloadLimits(max_jobs=1, min_free_bytes=0))
    async with serving(app) as address, httpx.AsyncClient(timeout=PATIENCE) as http:
        held = await http.post(f"http://{address}/api/v1/models/download",
                               json={"model": f"{base}/one.gguf"})
        assert held.json()["status"] == "downloading"
        refused = await http.post(f"http://{address}/api/pull",
                                  json={"model": f"{base}/two.gguf"})
        assert refused.status_code == 503 and "--download-max-jobs" in refused.json()["error"]
        lmstudio = await http.post(f"http://{address}/api/v1/models/download",
                                   json={"model": f"{base}/two.gguf"})
        assert lmstudio.status_code == 429 and "retry-after" in lmstudio.headers
        assert "--download-max-jobs" in lmstudio.json()["error"]["message"]
        state.gate.set()


async def test_copy_names_are_bounded(client, raw):
    for destination in ["x" * 1_048_576, "a\u0000b", "bell\u0007", "new\nline"]:
        answer = await raw.post("/api/copy", json={"source": "fake-model",
                                                   "destination": destination})
        assert answer.status_code == 400 and set(answer.json()) == {"error"}
        assert len(answer.text) < 300  # the name is not echoed back
    assert (await client.copy("fake-model", "ok-name:v1")).status == "success"


async def test_a_pull_with_no_room_on_disk_is_a_507_with_the_figures(tmp_path, origin):
    """Issue 39: it was a 500."""
    state, base = origin
    state.gate.set()
    state.files["big.gguf"] = tiny_gguf(tmp_path / "src" / "big.gguf", data_bytes=100_000)
    reserve = 2**62  # more than any disk has free
    _, app = make(tmp_path, download_limits=DownloadLimits(min_free_bytes=reserve))
    async with serving(app) as address, httpx.AsyncClient(timeout=PATIENCE) as http:
        answer = await http.post(f"http://{address}/api/pull",
                                 json={"model": f"{base}/big.gguf", "stream": False})
    assert answer.status_code == 507, answer.text
    error = answer.json()["error"]
    assert "not enough free disk space" in error and str(reserve) in error
    assert str(tmp_path) not in error
