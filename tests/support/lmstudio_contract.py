"""The `/api/v1/chat` stream contract of seeds 000/001, as a checker: every event's
fields (no more, no fewer), `event:` equal to `type`, `chat.start` first and
`chat.end` last, blocks opened and closed in turn, and `result` well formed.
No LM Studio SDK wraps this API, so this is the oracle the tests use."""

from __future__ import annotations

import json
import re
from typing import Any

NUMBER = (int, float)
PROVIDER = {"type": str}
_FIELDS: dict[str, dict[str, Any]] = {
    "chat.start": {"model_instance_id": str},
    "model_load.start": {"model_instance_id": str},
    "model_load.progress": {"model_instance_id": str, "progress": NUMBER},
    "model_load.end": {"model_instance_id": str, "load_time_seconds": NUMBER},
    "prompt_processing.start": {},
    "prompt_processing.progress": {"progress": NUMBER},
    "prompt_processing.end": {},
    "reasoning.start": {},
    "reasoning.delta": {"content": str},
    "reasoning.end": {},
    "tool_call.start": {"tool": str, "provider_info": dict},
    "tool_call.arguments": {"tool": str, "arguments": dict, "provider_info": dict},
    "tool_call.success": {"tool": str, "arguments": dict, "output": str, "provider_info": dict},
    "tool_call.failure": {"reason": str, "metadata": dict},
    "message.start": {},
    "message.delta": {"content": str},
    "message.end": {},
    "error": {"error": dict},
    "chat.end": {"result": dict},
}
ERROR_TYPES = {"invalid_request", "unknown", "mcp_connection_error", "plugin_connection_error",
               "not_implemented", "model_not_found", "job_not_found", "internal_error"}


def check_provider(info: dict[str, Any]) -> None:
    if info["type"] == "ephemeral_mcp":
        assert set(info) == {"type", "server_label"}, info
    else:
        assert info["type"] == "plugin" and set(info) == {"type", "plugin_id"}, info


def check_error(error: dict[str, Any]) -> None:
    assert error["type"] in ERROR_TYPES, error
    assert isinstance(error["message"], str) and error["message"]
    assert set(error) <= {"type", "message", "code", "param"}, error


def check_result(result: dict[str, Any], *, stored: bool | None = None) -> None:
    """The non-stream body (also chat.end's result)."""
    assert set(result) <= {"model_instance_id", "output", "stats", "response_id"}, result
    assert isinstance(result["model_instance_id"], str)
    for item in result["output"]:
        kind = item["type"]
        if kind in ("message", "reasoning"):
            assert set(item) == {"type", "content"} and isinstance(item["content"], str)
        elif kind == "tool_call":
            assert set(item) == {"type", "tool", "arguments", "output", "provider_info"}, item
            assert isinstance(item["arguments"], dict) and isinstance(item["output"], str)
            check_provider(item["provider_info"])
        else:
            assert kind == "invalid_tool_call", item
            assert set(item) == {"type", "reason", "metadata"}
            meta = item["metadata"]
            assert meta["type"] in ("invalid_name", "invalid_arguments")
            assert set(meta) <= {"type", "tool_name", "arguments", "provider_info"}
    stats = result["stats"]
    required = {"input_tokens", "total_output_tokens", "reasoning_output_tokens",
                "tokens_per_second", "time_to_first_token_seconds"}
    assert required <= set(stats) <= required | {"model_load_time_seconds"}, stats
    assert all(isinstance(v, NUMBER) for v in stats.values())
    if stored is not None:
        assert ("response_id" in result) == stored
    if "response_id" in result:
        assert re.fullmatch(r"resp_[0-9a-f]{48}", result["response_id"])


def check_load_answer(body: dict[str, Any]) -> None:
    """What `POST /api/v1/models/load` answers (LM Studio's documented shape)."""
    assert {"type", "instance_id", "load_time_seconds", "status"} <= set(body), body
    assert set(body) <= {"type", "instance_id", "load_time_seconds", "status",
                         "load_config"}, body
    assert body["type"] == "llm" and body["status"] == "loaded", body
    assert isinstance(body["instance_id"], str) and isinstance(body["load_time_seconds"], NUMBER)
    assert isinstance(body.get("load_config", {}), dict)


def checked_load_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, data) per event of a load asked for as a stream, after checking it: the
    chat stream's `model_load.*` events (`model_load.end` also carrying the load's
    answer in `result`), or an `error` event last."""
    events = parse_events(text)
    names = [name for name, _ in events]
    assert names[0] == "model_load.start" and names.count("model_load.start") == 1, names
    assert names[-1] in ("model_load.end", "error"), names
    assert set(names[1:-1]) <= {"model_load.progress"}, names
    for name, data in events:
        assert data["type"] == name, (name, data)
        fields = {**_FIELDS[name], **({"result": dict} if name == "model_load.end" else {})}
        assert set(data) == {"type", *fields}, (name, data)
        for key, kind in fields.items():
            assert isinstance(data[key], kind), (name, key, data)
        if name == "model_load.end":
            check_load_answer(data["result"])
            assert data["result"]["instance_id"] == data["model_instance_id"]
        elif name == "error":
            check_error(data["error"])
    progress = [data["progress"] for name, data in events if name == "model_load.progress"]
    assert progress == sorted(progress) and all(0 <= p <= 1 for p in progress), progress
    return events


def parse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith(":")]
        if not lines:
            continue  # a keepalive comment
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        out.append((lines[0][len("event: "):], json.loads(lines[1][len("data: "):])))
    return out


def checked_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, data) per event, after checking the whole stream against the contract."""
    events = parse_events(text)
    names = [name for name, _ in events]
    assert names[0] == "chat.start" and names[-1] == "chat.end", names
    assert names.count("chat.start") == 1 and names.count("chat.end") == 1
    open_block = None
    for name, data in events:
        assert data["type"] == name, (name, data)
        fields = _FIELDS[name]
        assert set(data) == {"type", *fields}, (name, data)
        for key, kind in fields.items():
            assert isinstance(data[key], kind), (name, key, data)
        family, _, phase = name.rpartition(".")
        if family in ("reasoning", "message", "prompt_processing", "model_load"):
            if phase == "start":
                assert open_block is None, (open_block, name)
                open_block = family
            else:
                assert open_block == family, (open_block, name)
                if phase == "end":
                    open_block = None
        else:
            assert open_block is None or name == "error", (open_block, name)
        if "provider_info" in data:
            check_provider(data["provider_info"])
        if name.endswith("progress"):
            assert 0.0 <= data["progress"] <= 1.0
        if name == "error":  # a failed prompt or load is not ended: it did not finish
            check_error(data["error"])
            open_block = None
        if name == "chat.end":
            check_result(data["result"])
    return events
