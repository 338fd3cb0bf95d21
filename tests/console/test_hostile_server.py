"""The terminal commands against a hostile server (issue 39, items 9-11): control
sequences in every string it sends never reach the terminal; an event of the wrong
shape ends that answer with one `error:` line and the conversation goes on; a 10 MB
delta is drawn with bounded output, and Ctrl-C and Ctrl-D still work."""

from __future__ import annotations

import io
import json
import threading

import pexpect
import pytest

from tests.support.console_server import spawn
from tests.support.hostile_server import PAYLOAD, RAW, answer, hostile_server, ndjson, sse

PROMPT = ">>> "


@pytest.fixture
def server():
    with hostile_server() as running:
        yield running


def run(tmp_path, *args: str) -> tuple[str, int]:
    """`parlance ARGS` to its end: what the terminal got, and the exit status."""
    child = spawn(tmp_path, *args)
    child.expect(pexpect.EOF)
    child.close()
    return child.before, child.exitstatus


def recorded(child: pexpect.spawn) -> io.StringIO:
    child.logfile_read = io.StringIO()
    return child.logfile_read


def ask(child: pexpect.spawn, text: str) -> str:
    child.sendline(text)
    child.expect_exact(PROMPT)
    return child.before


def leave(child: pexpect.spawn) -> int:
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


def assert_clean(shown: str) -> None:
    assert not [raw for raw in RAW if raw in shown], repr(shown[-2000:])


def test_no_control_sequence_of_the_server_reaches_the_terminal(tmp_path, server):
    mcp = {"type": "mcp_call", "name": f"add{PAYLOAD}", "server_label": f"calc{PAYLOAD}",
           "arguments": json.dumps({"a": PAYLOAD}), "output": f"5{PAYLOAD}"}
    server.script("POST", "/v1/responses", sse(
        {"type": "response.created", "response": {"model": f"m{PAYLOAD}"}},
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"type": "mcp_list_tools", "server_label": "calc",
                  "tools": [{"name": f"add{PAYLOAD}"}]}},
        {"type": "response.reasoning_text.delta", "output_index": 1,
         "delta": f"thinking{PAYLOAD}"},
        {"type": "response.output_item.added", "output_index": 2, "item": mcp},
        {"type": "response.output_item.done", "output_index": 2, "item": mcp},
        {"type": "response.output_item.added", "output_index": 3,
         "item": {"type": "function_call", "name": f"f{PAYLOAD}", "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "output_index": 3,
         "delta": json.dumps({"b": PAYLOAD})},
        {"type": "response.output_text.delta", "output_index": 4,
         "delta": f"text{PAYLOAD} and `code{PAYLOAD}`"},
        {"type": "response.completed",
         "response": {"model": f"m{PAYLOAD}", "usage": {"output_tokens": 3},
                      "incomplete_details": {"reason": f"why{PAYLOAD}"}}}), sse(
        {"type": "response.failed", "response": {"error": {"message": f"bad{PAYLOAD}"}}}))
    child = spawn(tmp_path, "chat", "--url", server.url, "--mcp", "calc")
    terminal = recorded(child)
    child.expect_exact(PROMPT)
    shown = ask(child, "hello")
    assert "thinking" in shown and "pwned" in shown and "ended: why" in shown
    assert "error:" in ask(child, "again")
    assert "calc: add]0;pwned" in ask(child, "/mcp")
    assert leave(child) == 0
    assert_clean(terminal.getvalue())

    server.script("GET", "/api/ps", answer({"models": [
        {"name": f"m{PAYLOAD}", "size": 1, "context_length": 8,
         "expires_at": f"soon{PAYLOAD}"}]}))
    server.script("GET", "/api/v1/models", answer({"models": [
        {"key": f"k{PAYLOAD}", "architecture": f"a{PAYLOAD}",
         "quantization": {"name": f"q{PAYLOAD}"}}]}))
    server.script("POST", "/api/pull", ndjson(
        {"status": f"pulling{PAYLOAD}"},
        {"status": f"downloading{PAYLOAD}", "total": 10, "completed": 5},
        {"status": "success"}))
    server.script("POST", "/api/v1/models/load", sse(
        {"type": "model_load.progress", "progress": 0.5},
        {"type": "model_load.end", "result": {"instance_id": f"m{PAYLOAD}",
                                               "load_time_seconds": 1.0}}))
    server.script("POST", "/api/v1/models/unload", answer({"instance_id": f"m{PAYLOAD}"}))
    for args in (("ps",), ("models",), ("pull", "x"), ("load", "x"), ("unload", "x")):
        shown, status = run(tmp_path, *args, "--url", server.url)
        assert status == 0 and "pwned" in shown, shown
        assert_clean(shown)
    server.replies[("GET", "/api/ps")] = [answer({"error": f"no{PAYLOAD}"}, 500)]
    shown, status = run(tmp_path, "ps", "--url", server.url)
    assert status == 1 and "error:" in shown and "pwned" in shown
    assert_clean(shown)


HELLO = sse({"type": "response.output_text.delta", "output_index": 0, "delta": "Hi"},
            {"type": "response.completed", "response": {"model": "m"}})


@pytest.mark.parametrize("malformed", [
    "[1,2]",
    json.dumps({"type": "response.output_text.delta", "output_index": 0, "delta": 5}),
    "{not json",
    json.dumps({"type": "response.output_item.added", "output_index": 0, "item": [1]}),
    json.dumps({"type": "response.failed", "response": "no"}),
])
def test_a_malformed_event_is_one_error_line_and_the_chat_goes_on(tmp_path, server,
                                                                  malformed):
    server.script("POST", "/v1/responses", HELLO, sse(
        {"type": "response.output_text.delta", "output_index": 0, "delta": "partial "},
        malformed), HELLO)
    child = spawn(tmp_path, "chat", "--url", server.url)
    child.expect_exact(PROMPT)
    assert "Hi" in ask(child, "one")
    shown = ask(child, "two")
    assert shown.count("error:") == 1
    assert "malformed" in shown or "not JSON" in shown or "not a JSON object" in shown
    assert "Traceback" not in shown
    assert "Hi" in ask(child, "three")
    assert server.bodies("/v1/responses")[-1]["input"] == [
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "Hi"},
        {"role": "user", "content": "three"}]
    assert leave(child) == 0


@pytest.mark.parametrize(("command", "reply"), [
    (("ps",), answer({"models": [1, 2]})),
    (("ps",), answer([1, 2])),
    (("models",), answer({"models": {"a": 1}})),
    (("models",), answer({"models": [{"key": 5}]})),
    (("pull", "x"), ndjson({"status": "pulling", "total": "lots"})),
    (("load", "x"), sse("{not json")),
    (("load", "x"), sse({"type": "model_load.progress", "progress": "half"})),
    (("unload", "x"), answer("gone")),
])
def test_a_malformed_answer_to_a_model_command_is_one_error_line(tmp_path, server, command,
                                                                 reply):
    path = {"ps": ("GET", "/api/ps"), "models": ("GET", "/api/v1/models"),
            "pull": ("POST", "/api/pull"), "load": ("POST", "/api/v1/models/load"),
            "unload": ("POST", "/api/v1/models/unload")}[command[0]]
    server.script(*path, reply)
    shown, status = run(tmp_path, *command, "--url", server.url)
    assert status == 1 and shown.count("error:") == 1 and "Traceback" not in shown, shown


LINE = "All work and no play makes a dull answer, said the server, again and again.\n"
BIG = LINE * (10 * 2**20 // len(LINE)) + "THE END\n"


def test_a_ten_megabyte_delta_is_drawn_bounded_and_ctrl_c_still_stops_it(tmp_path, server):
    held = threading.Event()
    server.script("POST", "/v1/responses", sse(
        {"type": "response.created", "response": {"model": "m"}},
        {"type": "response.output_text.delta", "output_index": 0, "delta": BIG},
        hold=held))
    child = spawn(tmp_path, "chat", "--url", server.url)
    child.expect_exact(PROMPT)
    terminal = recorded(child)
    child.sendline("write a lot")
    child.expect_exact("THE END")  # the live view draws the answer's end
    child.sendintr()
    child.expect_exact("stopped")
    child.expect_exact(PROMPT)
    # a screenful per redraw, and the answer printed once, cut: far from 10 MB a frame
    assert len(terminal.getvalue()) < len(BIG) // 2
    assert "more characters not shown" in terminal.getvalue()
    assert leave(child) == 0  # Ctrl-D leaves at once
    held.set()
