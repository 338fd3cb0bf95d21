"""Ollama's `/api/chat` and `/api/generate` contract (its `api/types.go`), as a checker:
every line's fields (no more, no fewer than Go would write), `done: false` until the
one final line with `done_reason` and the metrics, or a last `{"error": "..."}` line;
each line also validated by the official `ollama` client's own types."""

from __future__ import annotations

import json
import re
from typing import Any

import ollama

RFC3339_NANO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
METRICS = {"total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
           "eval_count", "eval_duration"}
DONE_REASONS = {"stop", "length", "load", "unload"}


def ndjson(body: str) -> list[dict[str, Any]]:
    assert body.endswith("\n"), body[-200:]
    lines = body.split("\n")[:-1]
    out = [json.loads(line) for line in lines]
    assert all(isinstance(line, dict) for line in out), body
    return out


def check_error(body: Any) -> str:
    assert isinstance(body, dict) and set(body) == {"error"}, body
    assert isinstance(body["error"], str) and body["error"], body
    return body["error"]


def _check_tool_calls(calls: Any) -> None:
    assert isinstance(calls, list) and calls
    for call in calls:
        assert set(call) <= {"id", "function"}, call
        function = call["function"]
        assert set(function) == {"index", "name", "arguments"}, function
        assert isinstance(function["index"], int) and isinstance(function["name"], str)
        assert isinstance(function["arguments"], dict), function


def _check_logprobs(entries: Any) -> None:
    assert isinstance(entries, list) and entries
    for entry in entries:
        assert set(entry) <= {"token", "logprob", "bytes", "top_logprobs"}, entry
        assert isinstance(entry["token"], str) and isinstance(entry["logprob"], float)
        for alternative in entry.get("top_logprobs", ()):
            assert set(alternative) <= {"token", "logprob", "bytes"}, alternative


def check_line(line: dict[str, Any], *, generate: bool) -> None:
    """One object: a stream line or a whole `stream: false` answer."""
    if "error" in line:
        check_error(line)
        return
    head = {"model", "created_at", "done"} | ({"response"} if generate else {"message"})
    optional = {"logprobs"} | ({"thinking"} if generate else set())
    if line["done"]:
        optional |= {"done_reason"} | METRICS | ({"context"} if generate else set())
    assert head <= set(line) <= head | optional, line
    assert isinstance(line["model"], str) and line["model"]
    assert RFC3339_NANO.match(line["created_at"]), line["created_at"]
    if generate:
        assert isinstance(line["response"], str)
        assert line.get("thinking", "x") != "", line  # omitted when empty, as Go does
        if "context" in line:
            assert line["context"] and all(isinstance(t, int) for t in line["context"])
        ollama.GenerateResponse.model_validate(line)
    else:
        message = line["message"]
        assert message["role"] == "assistant" and isinstance(message["content"], str)
        assert set(message) <= {"role", "content", "thinking", "tool_calls"}, message
        assert message.get("thinking", "x") != "", message
        if "tool_calls" in message:
            _check_tool_calls(message["tool_calls"])
        ollama.ChatResponse.model_validate(line)
    if "logprobs" in line:
        _check_logprobs(line["logprobs"])
    if line["done"]:
        assert line["done_reason"] in DONE_REASONS, line
        if line["done_reason"] in ("stop", "length"):  # an answer: Ollama always says
            assert "load_duration" in line, line  # how long the model took to be ready
        for key in METRICS & set(line):
            assert isinstance(line[key], int) and line[key] > 0, (key, line)  # zero: omitted


def check_stream(body: str, *, generate: bool) -> list[dict[str, Any]]:
    """A whole NDJSON stream: lines with `done: false`, then one final line (or an error
    line, which ends it)."""
    lines = ndjson(body)
    assert lines, body
    for line in lines:
        check_line(line, generate=generate)
    *rest, last = lines
    assert all("error" not in line and line["done"] is False for line in rest), body
    assert "error" in last or last["done"] is True, last
    return lines
