"""Alias patterns: `--model-alias PATTERN=MODEL` (flag, env, or the file's [serve]
model_alias), glob aliases in presets; an exact name wins over a pattern; the name a
request sends is echoed."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from parlance.cli.dispatch import build_parser
from parlance.config import resolve_config
from parlance.core.errors import InvalidRequest
from parlance.engines.fake import FakeEngine
from parlance.models.registry import DEFAULT_MODEL, ModelSpec, resolve_spec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app

TOML = """
[serve]
model_alias = ["codex-5*=smollm2"]

[presets.coder]
model = "smollm2-135m-instruct"
aliases = ["codev-5*"]
"""


def test_flag_env_and_file_add_glob_aliases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "parlance.toml"
    path.write_text(TOML)
    args = vars(build_parser().parse_args(["serve", "--model-alias", "claude-*=smollm2",
                                      "--model-alias", "gpt-5=coder"]))
    config, registry = resolve_config(args, {}, path)
    assert config.model_alias == ("claude-*=smollm2", "gpt-5=coder")
    assert resolve_spec("claude-sonnet-4-5", registry).id == DEFAULT_MODEL
    assert resolve_spec("gpt-5", registry).id == "coder"
    assert resolve_spec("codev-5.1", registry).id == "coder"  # a preset's glob alias
    _, registry = resolve_config({}, {}, path)  # the file's [serve] list
    assert resolve_spec("codex-5.2-mini", registry).id == DEFAULT_MODEL
    _, registry = resolve_config({}, {"PARLANCE_MODEL_ALIAS": "o4-*=coder"}, None)
    assert resolve_spec("o4-mini", registry).id == "coder"


@pytest.mark.parametrize("entry", ["claude-*", "=smollm2", "claude-*=", "x=no-such-model"])
def test_bad_alias_entries_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       entry: str):
    monkeypatch.chdir(tmp_path)
    with pytest.raises((ValueError, InvalidRequest), match="alias|Unknown model"):
        resolve_config({"model_alias": [entry]}, {}, None)


def _models() -> ServedModels:
    engine = FakeEngine()
    glob = ModelSpec(id="general", locate=lambda: Path("/dev/null"), aliases=("claude-*",))
    exact = ModelSpec(id="claude-exact", locate=lambda: Path("/dev/null"))
    return ServedModels([ServedModel(glob, engine, 1), ServedModel(exact, engine, 2)])


def test_exact_name_wins_over_a_pattern_and_the_request_name_is_echoed():
    models = _models()
    model, echoed = models.resolve("claude-exact")
    assert model.spec.id == "claude-exact" and echoed == "claude-exact"
    model, echoed = models.resolve("claude-opus-4-8")
    assert model.spec.id == "general" and echoed == "claude-opus-4-8"
    assert models.spec("claude-haiku").id == "general"
    assert not models.is_loaded("gpt-4o")


async def test_messages_echo_the_alias_claude_code_sends():
    app = create_app(_models(), ServerSettings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        response = await client.post("/v1/messages", json={
            "model": "claude-sonnet-4-5", "max_tokens": 8,
            "messages": [{"role": "user", "content": "Hi"}]})
        listed = await client.get("/v1/models/claude-sonnet-4-5",
                                  headers={"anthropic-version": "2023-06-01"})
    assert response.status_code == 200, response.text
    assert response.json()["model"] == "claude-sonnet-4-5"
    assert listed.json()["id"] == "claude-sonnet-4-5"
