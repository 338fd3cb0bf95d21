"""Upstream servers in the settings: --upstream (repeatable), the file's [[upstreams]]
tables, and whether a local model is loaded beside them; then `parlance serve` as a
gateway in front of a real Parlance replica."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from parlance.config import UpstreamEntry, resolve_config
from tests.support.serve_process import serve

TOML = """
[[upstreams]]
url = "http://10.0.0.5:8000/v1"
api_key = "sk-a"
models = ["Qwen/Qwen3-8B"]
weight = 2

[[upstreams]]
url = "http://10.0.0.6:8080"
"""


def resolve(tmp_path: Path, flags: dict, text: str | None = None, env: dict | None = None):
    path = None
    if text is not None:
        path = tmp_path / "parlance.toml"
        path.write_text(text)
    return resolve_config(flags, env or {}, path)[0]


def test_upstream_tables_and_flags(tmp_path):
    config = resolve(tmp_path, {"upstream": ["http://127.0.0.1:9001"]}, TOML)
    assert config.upstreams == (
        UpstreamEntry("http://10.0.0.5:8000/v1", "sk-a", ("Qwen/Qwen3-8B",), 2.0),
        UpstreamEntry("http://10.0.0.6:8080"))
    assert config.upstream == ("http://127.0.0.1:9001",)
    assert not config.local_model  # a gateway: no model was named


def test_a_named_model_is_served_beside_the_upstreams(tmp_path):
    assert resolve(tmp_path, {"upstream": ["http://h:1"], "model": "smollm2"}).local_model
    assert resolve(tmp_path, {}, env={"PARLANCE_UPSTREAM": "http://h:1",
                                      "PARLANCE_MODEL": "smollm2"}).local_model
    assert resolve(tmp_path, {}).local_model  # no upstreams: the default model as always


@pytest.mark.parametrize("table, words", [
    ('[[upstreams]]\napi_key = "x"\n', "needs a url"),
    ('[[upstreams]]\nurl = "http://h"\nweight = 0\n', "weight must be a positive number"),
    ('[[upstreams]]\nurl = "http://h"\nmodel = "m"\n', "unknown keys model"),
    ('upstreams = "http://h"\n', "must be an array of tables"),
])
def test_bad_upstream_tables_are_refused_by_name(tmp_path, table, words):
    with pytest.raises(ValueError, match=words):
        resolve(tmp_path, {}, table)


@pytest.mark.model
def test_parlance_serve_as_a_gateway_in_front_of_a_replica(tmp_path):
    """`parlance serve --upstream URL` loads no model, discovers the replica's models at
    start, and serves them in every listing and dialect."""
    (tmp_path / "replica").mkdir()
    (tmp_path / "gateway").mkdir()
    with serve(tmp_path / "replica", "--parallel", "2") as replica, \
            serve(tmp_path / "gateway", "--upstream", replica.base_url + "/v1",
                  "--upstream-health-interval", "1") as gateway:
        assert "Loaded" not in gateway.output()
        with httpx.Client(base_url=gateway.base_url, timeout=300) as client:
            assert [m["id"] for m in client.get("/v1/models").json()["data"]] == [
                "smollm2-135m-instruct"]
            answer = client.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8,
                "temperature": 0})  # no model named: the first upstream model
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"]
            metrics = client.get("/metrics").text
            assert f'parlance_upstream_requests_total{{replica="{replica.base_url}"}} 1' \
                in metrics
            assert f'parlance_upstream_healthy{{replica="{replica.base_url}"}} 1' in metrics
