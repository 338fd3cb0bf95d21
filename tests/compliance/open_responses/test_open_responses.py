"""The Open Responses compliance suite's cases, run against a Parlance server on a
loopback port over the scripted engine: HTTP and WebSocket mode of `/v1/responses`,
and `/v1/responses/compact`.

The suite itself is TypeScript run by bun (the project's `bin/compliance-test.ts`
over `src/lib/compliance-tests.ts`). Its cases are written again here, each under the
suite's id, with the same requests and the same checks: a response (the final one of
a stream, the terminal event of a WebSocket turn) valid for the specification's types
(PyPI `openresponses-types`, strictly), every streamed event valid, `completed`
where the suite wants it, and the error codes of its WebSocket cases. Requests a case
sends on a WebSocket are checked against the specification's `response.create` event
first, as the suite does.

The scripted engine answers every case with its default reply, except `tool-calling`,
whose answer is scripted as a call (the suite leaves calling to the model, with
`tool_choice: "auto"`). The cases it cannot pass are `EXCLUDED`, each with its reason;
`test_every_case_of_the_suite_is_run_or_excluded` keeps the two lists whole.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from openresponses_types import types as spec
from websockets.asyncio.client import connect

from parlance.core.events import Finish, FinishReason, Usage
from parlance.engines.fake import FakeEngine, Generated
from tests.support.fake_app import make_app
from tests.support.live_server import serving
from tests.support.openresponses import check_response, checked_events
from tests.support.responses_socket import response as socket_turn

MODEL = "fake-model"
PATIENCE = 60.0

# The suite's case ids (its version with WebSocket mode and compaction), in its order.
SUITE = (
    "basic-response", "assistant-phase", "response-output-phase-schema",
    "streaming-response", "websocket-response", "websocket-sequential-responses",
    "websocket-continuation", "websocket-reconnect-store-false-recovery",
    "websocket-previous-response-not-found", "websocket-failed-continuation-evicts-cache",
    "websocket-compact-new-chain", "system-prompt", "tool-calling", "image-input",
    "multi-turn", "compact-response", "compact-missing-model",
)
EXCLUDED = {
    "image-input": "an input_image needs a model that sees: Parlance refuses an image for "
                   "a text-only model (400 naming the input), and the scripted engine has "
                   "no vision; tests/dialects/openai/responses cover that refusal",
    "response-output-phase-schema": "sends no request: it validates a response fixture of "
                                    "the suite's own against the specification's schema",
}


@dataclass
class Server:
    """One Parlance server on loopback and its scripted engine."""

    host: str
    http: httpx.AsyncClient
    engine: FakeEngine

    @property
    def socket_url(self) -> str:
        return f"ws://{self.host}/v1/responses"


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    engine = FakeEngine()
    async with serving(make_app(engine)) as host, httpx.AsyncClient(
            base_url=f"http://{host}", timeout=PATIENCE) as http:
        yield Server(host, http, engine)


Case = Callable[[Server], Awaitable[list[str]]]
CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Case], Case]:
    def register(run: Case) -> Case:
        CASES[name] = run
        return run
    return register


def message(role: str, content: Any, **fields: Any) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": content, **fields}


# -- the checks ----------------------------------------------------------------------------


def response_problems(response: Any, *, completed: bool = True) -> list[str]:
    """The suite's checks of one response: the specification's schema, some output,
    and `completed`."""
    if not isinstance(response, dict):
        return [f"no response object: {response!r}"]
    try:
        check_response(response)
    except ValueError as exc:
        return [f"schema: {exc}"]
    problems = []
    if not response.get("output"):
        problems.append("the response has no output items")
    if completed and response.get("status") != "completed":
        problems.append(f"status {response.get('status')!r}, not 'completed'")
    return problems


async def posted(server: Server, body: dict[str, Any], *, stream: bool = False) -> list[str]:
    """One HTTP case: POST /v1/responses, then the suite's checks."""
    answer = await server.http.post("/v1/responses", json={**body, "stream": stream})
    if answer.status_code != 200:
        return [f"HTTP {answer.status_code}: {answer.text}"]
    if not stream:
        return response_problems(answer.json())
    events = checked_events(answer.text)  # each checked against the specification
    terminal = [data for _, data in events if isinstance(data, dict)
                and data.get("type") in ("response.completed", "response.failed",
                                         "response.incomplete")]
    if not terminal:
        return ["the stream has no terminal event"]
    return response_problems(terminal[-1]["response"])


def create(input_: Any, **fields: Any) -> dict[str, Any]:
    """A WebSocket `response.create`, valid for the specification as the suite checks."""
    event = {"type": "response.create", "model": MODEL, "input": input_, **fields}
    spec.WebSocketResponseCreateEvent.model_validate_json(json.dumps(event))
    return event


def terminal(turn: list[dict[str, Any]]) -> dict[str, Any]:
    return turn[-1]


def error_code(turn: list[dict[str, Any]]) -> str | None:
    last = terminal(turn)
    error = last.get("error") or (last.get("response") or {}).get("error") or {}
    return error.get("code")


def turn_problems(turn: list[dict[str, Any]]) -> list[str]:
    last = terminal(turn)
    if last["type"] == "error":
        return [f"error event: {last}"]
    return response_problems(last["response"])


async def chain_start(ws: Any, word: str) -> tuple[str, list[str]]:
    """The opening turn of the suite's WebSocket chains: its response id ("" if it
    failed) and what was wrong with it."""
    turn = await socket_turn(ws, create(f"Remember the code word: {word}. Reply with OK.",
                                        store=False))
    problems = turn_problems(turn)
    return ("" if problems else terminal(turn)["response"]["id"]), problems


# -- HTTP cases ------------------------------------------------------------------------------


@case("basic-response")
async def basic_response(server: Server) -> list[str]:
    return await posted(server, {"model": MODEL, "input": [
        message("user", "Say hello in exactly 3 words.")]})


@case("assistant-phase")
async def assistant_phase(server: Server) -> list[str]:
    return await posted(server, {"model": MODEL, "input": [
        message("assistant", "I should answer with the saved number.", phase="commentary"),
        message("assistant", "The number is four.", phase="final_answer"),
        message("user", "Repeat only the number.")]})


@case("streaming-response")
async def streaming_response(server: Server) -> list[str]:
    return await posted(server, {"model": MODEL, "input": [
        message("user", "Count from 1 to 5.")]}, stream=True)


@case("system-prompt")
async def system_prompt(server: Server) -> list[str]:
    return await posted(server, {"model": MODEL, "input": [
        message("system", "You are a pirate. Always respond in pirate speak."),
        message("user", "Say hello.")]})


@case("tool-calling")
async def tool_calling(server: Server) -> list[str]:
    server.engine.enqueue(Generated(
        '<tool_call>\n{"name": "get_weather", "arguments": '
        '{"location": "San Francisco, CA"}}\n</tool_call>'),
        Finish(FinishReason.STOP), Usage(20, 12))
    answer = await server.http.post("/v1/responses", json={
        "model": MODEL, "input": [message("user", "What's the weather like in San Francisco?")],
        "tools": [{"type": "function", "name": "get_weather",
                   "description": "Get the current weather for a location",
                   "parameters": {"type": "object", "properties": {"location": {
                       "type": "string",
                       "description": "The city and state, e.g. San Francisco, CA"}},
                       "required": ["location"]}}]})
    if answer.status_code != 200:
        return [f"HTTP {answer.status_code}: {answer.text}"]
    body = answer.json()
    problems = response_problems(body, completed=False)
    if not any(item["type"] == "function_call" for item in body.get("output", ())):
        problems.append("no function_call output item")
    return problems


@case("multi-turn")
async def multi_turn(server: Server) -> list[str]:
    return await posted(server, {"model": MODEL, "input": [
        message("user", "My name is Alice."),
        message("assistant", "Hello Alice! Nice to meet you. How can I help you today?"),
        message("user", "What is my name?")]})


async def compacted(server: Server, body: dict[str, Any]) -> tuple[int, Any]:
    answer = await server.http.post("/v1/responses/compact", json=body)
    return answer.status_code, answer.json()


@case("compact-response")
async def compact_response(server: Server) -> list[str]:
    status, body = await compacted(server, {
        "model": MODEL, "prompt_cache_key": "openresponses-compact-test", "input": [
            message("user", "We agreed to launch on Tuesday and notify support first."),
            message("assistant",
                    "Understood. The launch is Tuesday, with support notified beforehand.")]})
    if status != 200:
        return [f"HTTP {status}: {body}"]
    spec.CompactResource.model_validate_json(json.dumps(body))
    problems = []
    if body.get("object") != "response.compaction":
        problems.append(f"object {body.get('object')!r}")
    if not any(item.get("type") == "compaction" for item in body.get("output", ())):
        problems.append("no compaction output item")
    return problems


@case("compact-missing-model")
async def compact_missing_model(server: Server) -> list[str]:
    status, body = await compacted(server, {"input": [message("user", "Compact this.")]})
    return [] if status in (400, 422) else [f"HTTP {status}, not 400 or 422: {body}"]


# -- WebSocket cases ---------------------------------------------------------------------------


@case("websocket-response")
async def websocket_response(server: Server) -> list[str]:
    async with connect(server.socket_url) as ws:
        return turn_problems(await socket_turn(ws, create([
            message("user", "Count from 1 to 3.")])))


@case("websocket-sequential-responses")
async def websocket_sequential(server: Server) -> list[str]:
    problems = []
    async with connect(server.socket_url) as ws:
        for n, word in enumerate(("first", "second"), 1):
            turn = await socket_turn(ws, create(f"Reply with exactly: {word}", store=False))
            problems += [f"turn {n}: {p}" for p in turn_problems(turn)]
    return problems


@case("websocket-continuation")
async def websocket_continuation(server: Server) -> list[str]:
    async with connect(server.socket_url) as ws:
        previous, problems = await chain_start(ws, "cobalt")
        if problems:
            return problems
        second = await socket_turn(ws, create(
            "What is the code word? Reply with only the code word.", store=False,
            previous_response_id=previous))
        return turn_problems(second)


@case("websocket-reconnect-store-false-recovery")
async def websocket_reconnect(server: Server) -> list[str]:
    async with connect(server.socket_url) as ws:
        previous, problems = await chain_start(ws, "copper")
    if problems:
        return problems
    async with connect(server.socket_url) as ws:
        again = await socket_turn(ws, create(
            "Try to continue after reconnect. Reply with exactly: reconnected", store=False,
            previous_response_id=previous))
        recovery = await socket_turn(ws, create([message(
            "user", "The previous store:false chain could not continue after reconnect. "
                    "Start a new response and reply with exactly: recovered")], store=False))
    problems = [f"recovery: {p}" for p in turn_problems(recovery)]
    if error_code(again) != "previous_response_not_found":
        problems.append(f"reconnected continuation: {terminal(again)}")
    return problems


@case("websocket-previous-response-not-found")
async def websocket_not_found(server: Server) -> list[str]:
    async with connect(server.socket_url) as ws:
        turn = await socket_turn(ws, create(
            "This should fail because the previous response is missing.", store=False,
            previous_response_id="resp_openresponses_missing_1"))
    code = error_code(turn)
    return [] if code == "previous_response_not_found" else [f"got {terminal(turn)}"]


@case("websocket-failed-continuation-evicts-cache")
async def websocket_failed_continuation(server: Server) -> list[str]:
    async with connect(server.socket_url) as ws:
        previous, problems = await chain_start(ws, "ember")
        if problems:
            return problems
        failed = await socket_turn(ws, create([{
            "type": "function_call_output", "call_id": "call_openresponses_missing",
            "output": "No matching tool call exists in the previous response."}],
            store=False, previous_response_id=previous))
        retry = await socket_turn(ws, create(
            "Try to continue after the failed turn. Reply with exactly: stale",
            store=False, previous_response_id=previous))
    problems = []
    last = terminal(failed)
    if last["type"] != "error" and last["response"]["status"] != "failed":
        problems.append(f"the orphan tool output was answered: {last['type']}")
    if error_code(retry) != "previous_response_not_found":
        problems.append(f"the failed continuation's response stayed cached: {terminal(retry)}")
    return problems


@case("websocket-compact-new-chain")
async def websocket_compact_new_chain(server: Server) -> list[str]:
    status, body = await compacted(server, {"model": MODEL, "input": [
        message("user", [{"type": "input_text",
                          "text": "Remember the compaction code word: slate."}]),
        message("assistant", [{"type": "output_text", "text": "OK."}]),
        message("user", [{"type": "input_text",
                          "text": "Compress this conversation for later continuation."}])]})
    if status != 200:
        return [f"compact: HTTP {status}: {body}"]
    event = {"type": "response.create", "model": MODEL, "store": False, "tools": [],
             "input": [*body["output"],
                       message("user", "Continue from here. Reply with exactly: compacted")]}
    async with connect(server.socket_url) as ws:  # the compacted window goes back as is
        return turn_problems(await socket_turn(ws, event))


# -- the tests -----------------------------------------------------------------------------------


def test_every_case_of_the_suite_is_run_or_excluded():
    assert sorted(CASES) + sorted(EXCLUDED) != []
    assert sorted([*CASES, *EXCLUDED]) == sorted(SUITE)
    assert not set(CASES) & set(EXCLUDED)


@pytest.mark.parametrize("name", [n for n in SUITE if n in CASES])
async def test_case_passes(server, name):
    assert await CASES[name](server) == []
