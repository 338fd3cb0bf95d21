"""`parlance chat` in a pseudo-terminal against a real server over the fake engine: an
answer streams (reasoning, Markdown, tool calls), Ctrl-C stops it (the server cancels
the generation, or abandons a request still being set up) and the prompt comes back,
the slash commands change what the next request carries, the operator's MCP servers
run on the server (a real loopback MCP server) with their calls and results drawn and
kept, multi-line input, Ctrl-D and /exit leave with status 0."""

from __future__ import annotations

import contextlib
import io
import signal
import sys
import time

import pexpect
import pytest
from rich.console import Console
from rich.live import Live

from parlance.console.chat import ChatSession
from parlance.core.errors import EngineFailure
from parlance.core.events import (
    Finish,
    FinishReason,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from parlance.engines.fake import Generated
from parlance.integrations.settings import ConfiguredServer, IntegrationSettings
from tests.support.console_server import (
    conversation,
    fake_server,
    interrupt_at_prompt,
    spawn,
)
from tests.support.live_server import STARTUP

PROMPT = ">>> "


@pytest.fixture
def server(tmp_path):
    with fake_server(tmp_path) as running:
        yield running


@pytest.fixture
def chat(tmp_path, server):
    child = spawn(tmp_path, "chat", "--url", server.url)
    child.expect_exact(PROMPT)
    yield child
    child.close(force=True)


def ask(child: pexpect.spawn, text: str) -> str:
    """Send a message; what the terminal showed until the next prompt."""
    child.sendline(text)
    child.expect_exact(PROMPT)
    return child.before


def leave(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


def test_an_answer_streams_with_its_reasoning_and_tool_calls(chat, server):
    server.engine.enqueue(Generated("<think>pondering deeply</think>The **bold** answer"))
    shown = ask(chat, "hello")
    assert "pondering deeply" in shown and "bold" in shown and "**" not in shown
    assert "\x1b[2;3mpondering" in shown  # dim italic
    server.engine.enqueue(ToolCallStart("call_1", "get_weather"),
                          ToolCallArgs('{"city": "Paris"}'), ToolCallEnd())
    assert 'get_weather({"city": "Paris"})' in ask(chat, "weather?")
    chat.sendline("/exit")
    assert leave(chat) == 0


def test_ctrl_c_stops_the_answer_not_the_program(chat, server):
    server.engine.enqueue(TextDelta("Once upon a time "), 600.0)  # then silence
    chat.sendline("tell a story")
    chat.expect_exact("Once upon a time")
    chat.sendintr()
    chat.expect_exact("stopped")
    chat.expect_exact(PROMPT)
    generation = server.engine.generations[-1]
    deadline = time.monotonic() + STARTUP  # the server sees the closed stream soon
    while not generation.cancelled and time.monotonic() < deadline:
        time.sleep(0.02)
    assert generation.cancelled
    # the conversation goes on, the stopped answer kept as far as it went
    assert "Hello there!" in ask(chat, "and then?")
    assert conversation(server.engine)[-2:] == [("assistant", "Once upon a time "),
                                               ("user", "and then?")]
    interrupt_at_prompt(chat)  # at the prompt: a new line, still running
    chat.expect_exact(PROMPT)
    chat.sendeof()
    assert leave(chat) == 0


def test_ctrl_c_before_the_answer_begins_cancels_it_too(chat, server):
    """Ctrl-C while the request is still being set up (the server loads the model
    before its answer's first byte): the turn is cancelled, the prompt comes back, and
    the server abandons the request (the model, once loaded, never generates it)."""
    ask(chat, "/model acme/cold-model")
    server.loader.gate.clear()  # the load holds half way
    chat.sendline("tell a story")
    assert server.loader.halfway.wait(STARTUP)
    chat.sendintr()
    chat.expect_exact("stopped")
    chat.expect_exact(PROMPT)
    server.loader.gate.set()
    deadline = time.monotonic() + STARTUP
    while not server.models.is_loaded("acme/cold-model") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "Hello there!" in ask(chat, "and then?")
    engine = next(m.engine for m in server.models if m.spec.id == "acme/cold-model")
    assert len(engine.requests) == 1  # the cancelled turn never reached it, nor is kept
    assert conversation(engine) == [("user", "and then?")]
    chat.sendeof()
    assert leave(chat) == 0


class InterruptedTerminal(io.StringIO):
    """A terminal where Ctrl-C (SIGINT, delivered as in a real one) lands during the
    first thing written to it: the live view's start."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = False

    def write(self, text: str) -> int:
        if not self.interrupted:
            self.interrupted = True
            signal.raise_signal(signal.SIGINT)
        return super().write(text)


class NoServer:
    """A server the turn never reaches: the interrupt comes before its request."""

    url = "http://127.0.0.1:9"
    asked = 0

    @contextlib.contextmanager
    def events(self, path, body):
        self.asked += 1
        yield iter(())


def test_ctrl_c_while_the_live_view_starts_leaves_no_view_behind():
    terminal, server = InterruptedTerminal(), NoServer()
    console = Console(file=terminal, force_terminal=True, width=80)
    stdout = sys.stdout
    ChatSession(server, console).ask("hello")  # type: ignore[arg-type]
    assert terminal.interrupted and "stopped" in terminal.getvalue()
    assert server.asked == 0  # the turn ended there
    assert sys.stdout is stdout  # the view's redirection undone
    probe = Live(console=console)
    assert console.set_live(probe)  # no view left behind: a new one is the only one
    console.clear_live()


def test_slash_commands_change_the_next_request(chat, server):
    ask(chat, "one")
    assert conversation(server.engine) == [("user", "one")]
    assert "System prompt set" in ask(chat, "/system Be brief.")
    ask(chat, "two")
    assert conversation(server.engine) == [
        ("system", "Be brief."), ("user", "one"), ("assistant", "Hello there!"),
        ("user", "two")]
    assert "cleared" in ask(chat, "/reset")
    ask(chat, "three")
    assert conversation(server.engine) == [("system", "Be brief."), ("user", "three")]
    assert "acme/cold-model" in ask(chat, "/model acme/cold-model")
    ask(chat, "four")
    assert server.loader.loaded == ["acme/cold-model"]  # loaded for it, just in time
    assert "/system TEXT" in ask(chat, "/help")
    assert "Unknown command /nope" in ask(chat, "/nope")
    chat.sendline("/exit")
    assert leave(chat) == 0


def test_a_model_the_server_has_not_is_refused_with_the_list(chat, server):
    shown = ask(chat, "/model no-such-[bold]model")  # (shown as it is: no markup)
    assert "Model unchanged" in shown and "no-such-[bold]model" in shown
    assert "fake-model" in shown
    assert "acme/cold-model" in ask(chat, "/model acme/cold-model")  # (loadable: taken)
    assert "fake-alias" in ask(chat, "/model fake-alias")
    ask(chat, "hello")
    assert conversation(server.engine) == [("user", "hello")]
    chat.sendeof()
    assert leave(chat) == 0


def test_a_stream_that_fails_midway_says_why(chat, server):
    server.engine.enqueue(TextDelta("partial "), EngineFailure("the engine broke"))
    shown = ask(chat, "hi")
    assert "partial" in shown and "error:" in shown and "the engine broke" in shown
    ask(chat, "again")
    assert conversation(server.engine) == [("user", "again")]
    chat.sendeof()
    assert leave(chat) == 0


def test_multi_line_messages(chat, server):
    chat.sendline("first line \\")
    chat.expect_exact("... ")
    ask(chat, "second line")
    assert conversation(server.engine)[-1] == ("user", "first line \nsecond line")
    chat.sendline('"""')
    chat.sendline("a block")
    chat.sendline("")
    ask(chat, 'of lines"""')
    assert conversation(server.engine)[-1] == ("user", "a block\n\nof lines")
    chat.sendeof()
    assert leave(chat) == 0


def test_history_is_kept_between_sessions(tmp_path, server):
    child = spawn(tmp_path, "chat", "--url", server.url)
    child.expect_exact(PROMPT)
    ask(child, "remember me")
    child.sendeof()
    assert leave(child) == 0
    history = tmp_path / "xdg" / "parlance" / "chat_history"
    assert "remember me" in history.read_text()
    again = spawn(tmp_path, "chat", "--url", server.url)
    again.expect_exact(PROMPT)
    again.send("\x1b[A")  # up: the last line of the previous session
    again.expect_exact("remember me")
    again.sendeof()  # (a line is being edited: Ctrl-D there is no EOF)
    again.send("\x15")  # Ctrl-U: the line erased
    assert "this list" in ask(again, "/help")  # still running: the Ctrl-D was no EOF
    again.sendeof()
    assert leave(again) == 0


def test_a_wrong_key_is_said_before_the_first_prompt(tmp_path):
    with fake_server(tmp_path, api_keys=("sekrit",)) as server:
        child = spawn(tmp_path, "chat", "--url", server.url, "--api-key", "wrong")
        child.expect_exact("needs a valid API key")
        assert leave(child) == 1
        child = spawn(tmp_path, "chat", "--url", server.url, PARLANCE_API_KEY="sekrit")
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        assert leave(child) == 0


def calls(text: str) -> Generated:
    """The scripted model calling a tool (Hermes, as the fake engine parses it)."""
    return Generated(f"<tool_call>\n{text}\n</tool_call>")


def test_the_operators_mcp_servers_run_on_the_server(tmp_path, mcp):
    tools = IntegrationSettings(configured={"calc": ConfiguredServer("calc", url=mcp.url)})
    with fake_server(tmp_path, integrations=tools) as server:
        engine = server.engine
        engine.enqueue(calls('{"name": "add", "arguments": {"a": 2, "b": 3}}'),
                       Finish(FinishReason.STOP), Usage(10, 12))
        engine.enqueue(Generated("The sum is 5."), Finish(FinishReason.STOP), Usage(30, 5))
        child = spawn(tmp_path, "chat", "--url", server.url, "--mcp", "calc")
        try:
            child.expect_exact(PROMPT)
            assert "tools listed with the next answer" in ask(child, "/mcp")
            child.sendline("What is 2 + 3?")
            child.expect_exact('add({"a": 2, "b": 3})')
            child.expect_exact("on calc")
            child.expect_exact('"text":"5"')  # the MCP server's result
            child.expect_exact("The sum is 5.")
            child.expect_exact(PROMPT)
            assert engine.requests[0].tool_servers[0].provider.label == "calc"
            listed = ask(child, "/mcp")
            assert "calc: " in listed and "add" in listed and "explode" in listed
            # the next turn: the call and its result are part of the conversation
            engine.enqueue(calls('{"name": "explode", "arguments": {}}'),
                           Finish(FinishReason.STOP), Usage(40, 8))
            engine.enqueue(Generated("That tool failed."), Finish(FinishReason.STOP),
                           Usage(50, 4))
            shown = ask(child, "And explode?")
            assert "explode({})" in shown and "✗ Error executing tool explode" in shown
            assert "That tool failed." in shown
            seen = engine.requests[-2].prompts[0].messages
            assert [m.role for m in seen] == ["user", "assistant", "tool", "assistant",
                                              "user"]
            assert seen[1].tool_calls[0].name == "add" and '"5"' in seen[2].content
            assert "none" in ask(child, "/mcp none")
            ask(child, "No tools now.")
            assert engine.requests[-1].tool_servers == ()
            child.sendline("/exit")
            assert leave(child) == 0
        finally:
            child.close(force=True)


def test_an_mcp_server_the_operator_has_not_is_refused_and_not_kept(chat, server):
    assert "nope" in ask(chat, "/mcp nope")
    shown = ask(chat, "hi")
    assert "error:" in shown and "No plugin 'nope' is configured" in shown  # (OpenAI: 424)
    ask(chat, "/mcp none")
    ask(chat, "hello")
    assert conversation(server.engine) == [("user", "hello")]
    chat.sendeof()
    assert leave(chat) == 0
