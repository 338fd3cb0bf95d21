"""Settings precedence (flag > env > file > default) and presets."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from parlance.config import CHOICES, ServeConfig, resolve_config
from parlance.core.errors import InvalidRequest
from parlance.engines.fake import FakeEngine
from parlance.models.registry import DEFAULT_MODEL, builtin_registry, resolve_spec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app

TOML = """
[serve]
port = 9000
keepalive_seconds = 3
model = "creative"

[presets.creative]
model = "smollm2-135m-instruct"
ctx_size = 8192
aliases = ["gpt-4o-mini"]
chat_template = "{{ messages[0]['content'] }}"

[presets.creative.sampling]
temperature = 0.7
top_k = 5
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "parlance.toml"
    path.write_text(TOML)
    return path


def test_defaults_without_anything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    config, registry = resolve_config({}, {}, None)
    data = tmp_path / "xdg" / "parlance"
    assert config == ServeConfig(data_dir=str(data), models_dir=str(data / "models"))
    assert DEFAULT_MODEL in registry


def test_data_dir_from_flag_or_env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config, _ = resolve_config({"data_dir": tmp_path / "d"}, {}, None)
    assert config.data_dir == str(tmp_path / "d")
    config, _ = resolve_config({}, {"PARLANCE_DATA_DIR": "/srv/p",
                                    "PARLANCE_RESPONSES_RETENTION": "5"}, None)
    assert (config.data_dir, config.responses_retention) == ("/srv/p", 5)


def test_precedence_flag_over_env_over_file(config_file):
    env = {"PARLANCE_PORT": "9100", "PARLANCE_API_KEY": "a, b", "PARLANCE_THREADS": "3"}
    config, _ = resolve_config({"port": 9200, "api_key": None}, env, config_file)
    assert config.port == 9200
    assert config.api_key == ("a", "b")
    assert config.threads == 3
    assert config.keepalive_seconds == 3.0
    assert config.model == "creative"
    config, _ = resolve_config({}, env, config_file)
    assert config.port == 9100


def test_preset_becomes_a_registry_entry(config_file):
    _, registry = resolve_config({}, {}, config_file)
    spec = resolve_spec("gpt-4o-mini", registry)
    assert spec.id == "creative"
    assert spec.ctx_size == 8192
    assert spec.chat_template == "{{ messages[0]['content'] }}"
    assert dict(spec.sampling) == {"temperature": 0.7, "top_k": 5}
    assert spec.locate == builtin_registry()[DEFAULT_MODEL].locate


def test_model_may_be_a_gguf_path_but_must_exist(tmp_path):
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF")
    assert resolve_spec(str(weights), builtin_registry()).locate() == weights
    with pytest.raises(InvalidRequest):
        resolve_spec(str(tmp_path / "missing.gguf"), builtin_registry())
    with pytest.raises(InvalidRequest, match="Known models"):
        resolve_spec("no-such-model", builtin_registry())


async def test_preset_sampling_fills_only_unset_fields(config_file):
    _, registry = resolve_config({}, {}, config_file)
    engine = FakeEngine()
    app = create_app(ServedModels([ServedModel(registry["creative"], engine, 0)]),
                     ServerSettings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        messages = [{"role": "user", "content": "hi"}]
        await client.post("/v1/chat/completions", json={"messages": messages})
        await client.post("/v1/chat/completions", json={"messages": messages,
                                                        "temperature": 0})
    defaulted, explicit = (r.sampling for r in engine.requests)
    assert (defaulted.temperature, defaulted.top_k) == (0.7, 5)
    assert (explicit.temperature, explicit.top_k) == (0, 5)


def test_batching_settings_from_flags_env_and_file(tmp_path):
    config = tmp_path / "parlance.toml"
    config.write_text("[serve]\nparallel = 8\nkv_unified = true\n")
    resolved, _ = resolve_config({"queue_size": 3}, {"PARLANCE_PARALLEL": "2"}, config)
    assert (resolved.parallel, resolved.queue_size, resolved.kv_unified) == (2, 3, True)
    resolved, _ = resolve_config({}, {"PARLANCE_KV_UNIFIED": "0"}, config)
    assert resolved.kv_unified is False


def test_download_and_upstream_limits_from_flags_env_and_file(tmp_path):
    from parlance.cli.dispatch import build_parser
    from parlance.cli.wiring import server_settings, upstream_models
    from parlance.models.downloads import DownloadLimits

    config = tmp_path / "parlance.toml"
    config.write_text("[serve]\ndownload_timeout = 60\nupstream_max_event_mb = 2\n"
                      'upstream = ["http://127.0.0.1:9"]\n')
    flags = vars(build_parser().parse_args(["serve", "--download-max-jobs", "2"]))
    resolved, _ = resolve_config(flags, {"PARLANCE_DOWNLOAD_MIN_FREE_MB": "10"}, config)
    assert server_settings(resolved).download_limits == DownloadLimits(
        max_jobs=2, timeout=60.0, min_free_bytes=10 * 2**20)
    upstreams = upstream_models(resolved)
    assert upstreams is not None
    assert [r.max_event_bytes for r in upstreams.fleet.replicas] == [2 * 2**20]
    defaults, _ = resolve_config({}, {}, None)
    assert server_settings(defaults).download_limits == DownloadLimits(
        max_jobs=4, timeout=21600.0, min_free_bytes=2**30)
    assert defaults.upstream_max_event_mb == 8


def test_mcp_settings_from_flags_env_and_mcp_json(tmp_path):
    from parlance.cli.wiring import integration_settings

    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {
        "hub": {"url": "http://10.0.0.5/mcp", "headers": {"Authorization": "Bearer t"}},
        "files": {"command": "npx", "args": ["-y", "server-files"], "env": {"A": "1"}}}}))
    config, _ = resolve_config({"allow_request_mcp": True, "data_dir": str(tmp_path)},
                               {"PARLANCE_MCP_ALLOW_HOST": "localhost, mcp.lan"}, None)
    settings = integration_settings(config)
    assert settings.allow_request_servers and settings.allowed_hosts == ("localhost", "mcp.lan")
    assert settings.plugin("mcp/hub").headers == (("Authorization", "Bearer t"),)
    assert settings.plugin("files").command == "npx" and settings.plugin("nope") is None
    (tmp_path / "bad.json").write_text('{"mcpServers": {"x": {}}}')
    config, _ = resolve_config({"mcp_config": str(tmp_path / "bad.json")}, {}, None)
    with pytest.raises(ValueError, match="needs a"):
        integration_settings(config)


def test_the_speculative_mode_is_checked_wherever_it_comes_from(tmp_path):
    """argparse's choices see only the flag: the environment and the file are checked
    here, each refusal naming where the value came from."""
    from parlance.engines.llamacpp.speculation import SPECULATIVE_MODES

    assert CHOICES["speculative"] == SPECULATIVE_MODES  # the engine's own list
    config = tmp_path / "parlance.toml"
    config.write_text('[serve]\nspeculative = "eagle"\n')
    with pytest.raises(ValueError, match=r"\[serve\] in .*parlance.toml: speculative must be "
                                         r"one of ngram, draft, off, not 'eagle'"):
        resolve_config({}, {}, config)
    with pytest.raises(ValueError, match="PARLANCE_SPECULATIVE: speculative must be one of"):
        resolve_config({}, {"PARLANCE_SPECULATIVE": "medusa"}, config)
    resolved, _ = resolve_config({}, {"PARLANCE_SPECULATIVE": " NGRAM "}, config)
    assert resolved.speculative == "ngram"
    resolved, _ = resolve_config({"speculative": "off"}, {}, config)  # the flag wins
    assert resolved.speculative == "off"


def test_a_draft_model_implies_draft_mode_and_contradictions_are_refused(tmp_path):
    model = tmp_path / "draft.gguf"
    resolved, _ = resolve_config({"draft_model": str(model)}, {}, None)
    assert (resolved.speculative, resolved.draft_model) == ("draft", str(model))
    resolved, _ = resolve_config({}, {"PARLANCE_DRAFT_MODEL": "smollm2",
                                      "PARLANCE_SPECULATIVE": "draft",
                                      "PARLANCE_DRAFT_COST": "0.1"}, None)
    assert (resolved.speculative, resolved.draft_cost) == ("draft", 0.1)
    with pytest.raises(ValueError, match="speculative must be 'draft'.*not 'ngram'"):
        resolve_config({"draft_model": "smollm2", "speculative": "ngram"}, {}, None)
    with pytest.raises(ValueError, match="not 'off'"):
        resolve_config({"draft_model": "smollm2"}, {"PARLANCE_SPECULATIVE": "off"}, None)
    with pytest.raises(ValueError, match="needs a draft model"):
        resolve_config({"speculative": "draft"}, {}, None)
    with pytest.raises(ValueError, match="give one"):
        resolve_config({"draft_cost": 0.5}, {}, None)
    with pytest.raises(ValueError, match="draft_cost must be a number of 0 or more"):
        resolve_config({"draft_model": "smollm2", "draft_cost": -1}, {}, None)
    with pytest.raises(ValueError, match="none is given"):  # a gateway loads no model
        resolve_config({"draft_model": "smollm2", "upstream": ["http://127.0.0.1:1"]}, {},
                       None)


def test_a_value_of_the_wrong_type_is_refused_naming_its_source(tmp_path):
    config = tmp_path / "parlance.toml"
    config.write_text('[serve]\nparallel = "many"\n')
    with pytest.raises(ValueError, match=r"\[serve\] in .*: parallel must be int, not 'many'"):
        resolve_config({}, {}, config)
    with pytest.raises(ValueError, match="PARLANCE_PORT: port must be int, not 'http'"):
        resolve_config({}, {"PARLANCE_PORT": "http"}, None)


def test_chat_format_from_a_preset_or_the_flag(tmp_path):
    path = tmp_path / "parlance.toml"
    path.write_text('[presets.oss]\nmodel = "smollm2-135m-instruct"\nchat_format = "harmony"\n')
    config, registry = resolve_config({"chat_format": "qwen3_coder"}, {}, path)
    assert resolve_spec("oss", registry).chat_format == "harmony"
    assert config.chat_format == "qwen3_coder"
    path.write_text('[presets.oss]\nmodel = "smollm2-135m-instruct"\nchat_format = "nope"\n')
    with pytest.raises(ValueError, match="chat_format must be one of"):
        resolve_config({}, {}, path)


def test_tool_choice_from_a_preset(tmp_path):
    path = tmp_path / "parlance.toml"
    path.write_text('[presets.agent]\nmodel = "smollm2-135m-instruct"\ntool_choice = "required"\n')
    assert resolve_spec("agent", resolve_config({}, {}, path)[1]).tool_choice == "required"
    for bad in ('"auto"', '""', "3"):
        path.write_text(f'[presets.agent]\nmodel = "smollm2-135m-instruct"\ntool_choice = {bad}\n')
        with pytest.raises(ValueError, match="tool_choice must be"):
            resolve_config({}, {}, path)
