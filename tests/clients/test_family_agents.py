"""Codex and Claude Code (the real npm clients) against `parlance serve` running the
tiny gpt-oss and Qwen3-Coder GGUFs (tests/support/family_gguf.py: each family's real
tokenizer and chat template, random weights). Every request is answered 2xx and the
call the client gets was parsed from the family's own markup (harmony's
`to=functions.…<|constrain|>json<|message|>`, Qwen3-Coder's `<function=…><parameter=…>`).

A random network calls no tool by itself, so the operator's preset forces the call on
the turn's first step (`tool_choice`, a tool's name) and biases the family's end token,
so that after the results the model ends its answer at once and the agent's turn ends.
The forced tool takes enums only, so the call ends by itself: for Codex an MCP server's
tool (Codex offers it as `mcp__weather.get_weather`), for Claude Code the
`StructuredOutput` tool its `--json-schema` adds."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from tests.support import mcp_server
from tests.support.agent_clients import (
    CLAUDE_CODE_VERSION,
    CODEX_VERSION,
    TURN_TIMEOUT,
    claude_env,
    codex_config,
)
from tests.support.client_runs import assert_all_succeeded
from tests.support.family_gguf import GPT_OSS, QWEN3_CODER, Family, family_gguf, tokenizer_files
from tests.support.npm import npm_bin
from tests.support.serve_process import ServeProcess, serve

pytestmark = [pytest.mark.clients, pytest.mark.model]

FAMILIES = [pytest.param((GPT_OSS, "harmony"), id=GPT_OSS.name),
            pytest.param((QWEN3_CODER, "qwen3_coder"), id=QWEN3_CODER.name)]
SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                         "days": {"type": "integer", "enum": [1, 2, 3, 4, 5, 6, 7]}},
          "required": ["city", "days"], "additionalProperties": False}
SERVE_ARGS = ("--ctx-size", "16384", "--parallel", "1", "--request-timeout", "900")


def end_token(family: Family) -> int:
    """The id of the token the family ends its turn on (its tokenizer's eos)."""
    tokenizer, config = tokenizer_files(family.package)
    eos = config["eos_token"]
    eos = eos["content"] if isinstance(eos, dict) else eos
    (token,) = [t["id"] for t in tokenizer["added_tokens"] if t["content"] == eos]
    return int(token)


def preset(family: Family, tool: str, aliases: tuple[str, ...] = ()) -> str:
    return "\n".join([
        "[presets.agent]",
        f'model = "{family_gguf(family)}"',
        f"aliases = {json.dumps(list(aliases))}",
        f'tool_choice = "{tool}"',
        f"sampling = {{ temperature = 0, logit_bias = [[{end_token(family)}, 100.0]] }}",
        ""])


def agent_server(tmp: Path, family: Family, tool: str,
                 aliases: tuple[str, ...] = ()) -> contextlib.AbstractContextManager[ServeProcess]:
    (tmp / "parlance.toml").write_text(preset(family, tool, aliases))
    return serve(tmp, "--config", str(tmp / "parlance.toml"), "--model", "agent", *SERVE_ARGS)


def assert_format(log: str, name: str) -> None:
    """The startup line names the format the model's markup was parsed in."""
    assert re.search(rf"chat format\s+{name}\b", log), log[-3000:]


@pytest.fixture(scope="module")
def weather() -> Iterator[mcp_server.RunningServer]:
    running = mcp_server.start(build=mcp_server.build_weather_server)
    yield running
    running.stop()


@pytest.mark.parametrize("family", FAMILIES)
def test_codex_calls_the_forced_mcp_tool(family, weather, tmp_path):
    fam, fmt = family
    codex = npm_bin("@openai/codex", CODEX_VERSION, "codex")
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with agent_server(tmp_path, fam, "mcp__weather.get_weather") as server:
        (home / "config.toml").write_text(
            codex_config(server.base_url, websockets=False, model="agent")
            + f'\n[mcp_servers.weather]\nurl = "{weather.url}"\n'
            + 'default_tools_approval_mode = "approve"\n')
        run = subprocess.run(
            [str(codex), "exec", "--skip-git-repo-check", "--sandbox", "read-only", "--json",
             "What is the weather in Paris?"],
            cwd=work, env={**os.environ, "CODEX_HOME": str(home)},
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TURN_TIMEOUT)
        log = server.output()
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-2000:], log[-3000:])
    assert not [e for e in events if e.get("type") in ("turn.failed", "error")], events
    assert "turn.completed" in [e.get("type") for e in events], events
    calls = [e["item"] for e in events if e.get("type") == "item.completed"
             and e["item"].get("type") == "mcp_tool_call"]
    assert [(c["server"], c["tool"], c["status"]) for c in calls] == [
        ("weather", "get_weather", "completed")], events
    jsonschema.validate(calls[0]["arguments"], SCHEMA)
    assert "days of sun in" in json.dumps(calls[0]["result"]), calls[0]
    assert_all_succeeded(log, paths={"/v1/responses", "/v1/models"})
    assert_format(log, fmt)


@pytest.mark.parametrize("family", FAMILIES)
def test_claude_code_structured_output_is_the_forced_call(family, tmp_path):
    fam, fmt = family
    claude = npm_bin("@anthropic-ai/claude-code", CLAUDE_CODE_VERSION, "claude")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with agent_server(tmp_path, fam, "StructuredOutput", aliases=("claude-*",)) as server:
        run = subprocess.run(
            [str(claude), "--bare", "-p", "What is the weather in Paris?",
             "--output-format", "json", "--json-schema", json.dumps(SCHEMA), "--tools", ""],
            cwd=work, env=claude_env(server.base_url, home), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=TURN_TIMEOUT)
        log = server.output()
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:], log[-3000:])
    result = json.loads(run.stdout)
    assert result["subtype"] == "success" and not result["is_error"], result
    jsonschema.validate(result["structured_output"], SCHEMA)
    assert_all_succeeded(log, paths={"/v1/messages", "/"})
    assert re.findall(r"method=POST path=/v1/messages status=(\d+)", log) == ["200"], log
    assert_format(log, fmt)
