"""Folds core events into Responses output items, in generation order, and names the
stream events each step takes: one item is opened and closed at a time, with
`output_index` 0, 1, 2… (tool lists, reasoning, message text, function calls, custom
tool calls, shell and tool-search calls, MCP calls and approval requests).

An MCP call stays open until its result: when the model made several calls in one
turn, the later ones are held back until the earlier one's result closes it. A
shell or tool-search call is announced whole, once its arguments are complete
(`items.py` builds it from them)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from parlance.core.accumulate import ChoiceResult, TextPart, ToolCallResult
from parlance.core.events import (
    Event,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    ToolRefused,
    ToolResult,
    ToolsListed,
)
from parlance.core.tools import ToolProvider, ToolSpec
from parlance.dialects.openai.common import new_id, token_spelling
from parlance.dialects.openai.responses import items as calls
from parlance.dialects.openai.responses.tools import ToolRef, Toolset

PENDING = "pending"  # an item announced once whole: its arguments are still coming

StreamEvent = tuple[str, dict[str, Any]]  # (type, fields other than type/sequence_number)


def logprob_entries(
        tokens: tuple[TokenLogprob, ...] | list[TokenLogprob]) -> list[dict[str, Any]]:
    return [{"token": t.token, "logprob": t.logprob if t.logprob is not None else 0.0,
             "bytes": list(t.bytes),
             "top_logprobs": [{"token": token_spelling(a), "logprob": a.logprob,
                               "bytes": list(a.bytes)} for a in t.top]}
            for t in tokens]


class OutputBuilder:
    def __init__(self, *, logprobs: bool = False, ids: Iterator[str] | None = None,
                 listed: frozenset[str] = frozenset(), tools: Toolset | None = None,
                 seal: Callable[[str], str] | None = None) -> None:
        """`tools`: what the model's calls are, in the client's terms; `seal`: seals a
        reasoning item's text into its `encrypted_content`."""
        self.items: list[dict[str, Any]] = []
        self._tools = tools or Toolset((), {})
        self._seal = seal
        self._open: dict[str, Any] | None = None
        self._logprobs = logprobs
        self._ids = ids  # item ids to reuse (replaying a stored response)
        self._listed = listed  # servers whose tools the conversation already listed
        self._awaiting: int | None = None  # call_index of the open MCP call
        self._held: list[Event] = []  # events after that call, until its result

    def _new_id(self, prefix: str) -> str:
        return next(self._ids) if self._ids is not None else new_id(prefix)

    @property
    def _index(self) -> int:
        return len(self.items) - 1

    def feed(self, event: Event) -> list[StreamEvent]:
        if self._awaiting is not None:
            if isinstance(event, ToolResult | ToolRefused) and event.call_index == self._awaiting:
                return self._outcome(event) + self._release()
            self._held.append(event)
            return []
        match event:
            case TextDelta(text=text, logprobs=logprobs) if text or logprobs:
                return self._text(text, logprobs or ())
            case ReasoningDelta(text=text) if text:
                return self._reasoning(text)
            case ToolsListed(provider=provider, tools=tools):
                return [] if provider.label in self._listed else self._tool_list(provider, tools)
            case ToolCallStart(provider=provider) if provider is not None:
                return self.close() + self._mcp_call(event, provider)
            case ToolCallStart(call_id=call_id, name=name):
                return self.close() + self._client_call(call_id, self._tools.ref(name))
            case ToolCallArgs(fragment=fragment) if self._open is not None:
                return self._arguments(fragment)
            case ToolCallEnd(call_index=call_index) if self._is_open("mcp_call"):
                self._awaiting = call_index
                arguments = self._current["arguments"]
                return [("response.mcp_call_arguments.done",
                         {**self._where(), "arguments": arguments})]
            case ToolCallEnd():
                return self.close()
        return []

    def close(self, *, incomplete: bool = False) -> list[StreamEvent]:
        """Close the open item, if any (and then whatever was held back behind it)."""
        item, self._open = self._open, None
        if item is None:
            return []
        out: list[StreamEvent]
        if item["type"] == PENDING:
            item = self.items[self._index] = self._whole(item, incomplete)
            out = [("response.output_item.added", {"output_index": self._index,
                                                   "item": {**item, "status": "in_progress"}})]
            out.append(("response.output_item.done", {"output_index": self._index, "item": item}))
            return out + self._after_close(incomplete)
        where = {"item_id": item["id"], "output_index": self._index}
        out = []
        match item["type"]:
            case "function_call":
                out.append(("response.function_call_arguments.done",
                            {**where, "name": item["name"], "arguments": item["arguments"]}))
            case "custom_tool_call":
                out.append(("response.custom_tool_call_input.done",
                            {**where, "input": item["input"]}))
            case "message":
                part = item["content"][0]
                done = {**where, "content_index": 0, "text": part["text"],
                        "logprobs": part["logprobs"]}
                out += [("response.output_text.done", done),
                        ("response.content_part.done",
                         {**where, "content_index": 0, "part": part})]
            case "reasoning":
                part = item["content"][0]
                out += [("response.reasoning_text.done", {**where, "content_index": 0,
                                                          "text": part["text"]}),
                        ("response.content_part.done",
                         {**where, "content_index": 0, "part": part})]
                if self._seal is not None:
                    item["encrypted_content"] = self._seal(part["text"])
        if "status" in item and item["status"] == "in_progress":
            item["status"] = "incomplete" if incomplete else "completed"
        out.append(("response.output_item.done", {"output_index": self._index, "item": item}))
        return out + self._after_close(incomplete)

    def _after_close(self, incomplete: bool) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if self._awaiting is not None:  # the stream ends before the call's result
            self._awaiting = None
            out += self._release()
            out += self.close(incomplete=incomplete)
        return out

    def replay_items(self, items: list[dict[str, Any]]) -> list[StreamEvent]:
        """Stored output items again as stream events (one delta per item)."""
        out: list[StreamEvent] = []
        for n, item in enumerate(items):
            match item.get("type"):
                case "message":
                    text = "".join(p.get("text", "") for p in item.get("content", []))
                    out += self._text(text, ())
                case "reasoning":
                    text = "".join(p.get("text", "") for p in item.get("content", []))
                    out += self._reasoning(text)
                    if "encrypted_content" in item:  # as sealed when it was made
                        self._current["encrypted_content"] = item["encrypted_content"]
                case "function_call":
                    out += self._reopen(item, "arguments")
                case "custom_tool_call":
                    out += self._reopen(item, "input")
                case kind if kind in calls.CALLS:  # announced whole
                    self._new_id("")
                    self.items.append(item)
                    self._open = {"type": PENDING, "whole": item}
                case "mcp_list_tools":
                    out += self.feed(ToolsListed(
                        ToolProvider("ephemeral_mcp", item["server_label"]),
                        tuple(ToolSpec(t["name"], t.get("description") or "",
                                       t.get("input_schema") or {}) for t in item["tools"])))
                case "mcp_call" | "mcp_approval_request":
                    out += self._replay_call(_stored_call(item), n)
            out += self.close(incomplete=item.get("status") == "incomplete")
        return out

    def replay(self, choice: ChoiceResult) -> None:
        """A finished choice, in the order a stream would have produced it."""
        calls = 0
        for part in choice.parts:
            match part:
                case TextPart(kind="reasoning", text=text):
                    self._reasoning(text)
                case TextPart(text=text, logprobs=logprobs):
                    self._text(text, tuple(logprobs))
                case ToolsListed():
                    self.feed(part)
                case ToolCallResult():
                    self._replay_call(part, calls)
                    calls += 1
        self.close()

    def _reopen(self, item: dict[str, Any], streamed: str) -> list[StreamEvent]:
        """A stored call opened again, its `streamed` field streamed in one delta."""
        opened = {**item, "id": self._new_id(""), streamed: "", "status": "in_progress"}
        return self._add(opened) + self._arguments(str(item.get(streamed, "")))

    def _replay_call(self, call: ToolCallResult, call_index: int) -> list[StreamEvent]:
        provider = call.provider
        out = self.feed(ToolCallStart(call.call_id, call.name, call_index=call_index,
                                      provider=provider, awaits_approval=call.awaits_approval,
                                      approved_by=call.approved_by))
        out += self.feed(ToolCallArgs(call.arguments, call_index=call_index))
        out += self.feed(ToolCallEnd(call_index=call_index))
        if call.refused is not None:
            out += self.feed(replace(call.refused, call_index=call_index))
        elif call.output is not None:
            out += self.feed(ToolResult(call.output, call_index=call_index,
                                        is_error=call.output_is_error))
        return out

    # -- items ----------------------------------------------------------------

    @property
    def _current(self) -> dict[str, Any]:
        """The open item, where the stream's order guarantees there is one."""
        if self._open is None:
            raise RuntimeError("no output item is open")
        return self._open

    def _where(self) -> dict[str, Any]:
        return {"item_id": self._current["id"], "output_index": self._index}

    def _release(self) -> list[StreamEvent]:
        """The events held back behind an MCP call, now that it is closed."""
        held, self._held = self._held, []
        out: list[StreamEvent] = []
        for event in held:
            out += self.feed(event)
        return out

    def _arguments(self, fragment: str) -> list[StreamEvent]:
        item = self._current
        item["input" if item["type"] == "custom_tool_call" else "arguments"] += fragment
        kind = {"function_call": "response.function_call_arguments.delta",
                "custom_tool_call": "response.custom_tool_call_input.delta",
                "mcp_call": "response.mcp_call_arguments.delta"}.get(item["type"])
        return [] if kind is None else [(kind, {**self._where(), "delta": fragment})]

    def _client_call(self, call_id: str, ref: ToolRef) -> list[StreamEvent]:
        """The item of a call the client runs: a function call, a custom tool call, or
        (announced once whole) a shell or tool-search call."""
        if ref.kind == "custom":
            return self._add(calls.custom_call(self._new_id("ctc_"), call_id, ref))
        if ref.kind != "function":
            self.items.append({})  # its place; the item is made when it is whole
            self._open = {"type": PENDING, "ref": ref, "call_id": call_id, "arguments": ""}
            return []
        item = {"type": "function_call", "id": self._new_id("fc_"), "call_id": call_id,
                "name": ref.name, "arguments": "", "status": "in_progress"}
        return self._add(item | ({"namespace": ref.namespace} if ref.namespace else {}))

    def _whole(self, pending: dict[str, Any], incomplete: bool) -> dict[str, Any]:
        """A pending call's item, now that its arguments are complete (or cut short)."""
        if "whole" in pending:  # replayed as stored
            whole: dict[str, Any] = pending["whole"]
            return whole
        ref: ToolRef = pending["ref"]
        prefix = {"local_shell": "lsh_", "shell": "sh_", "tool_search": "tsc_"}[ref.kind]
        item_id = self._new_id(prefix)
        item = None if incomplete else calls.finished_call(ref, item_id, pending["call_id"],
                                                           pending["arguments"])
        if item is None:  # not what the item needs: kept as the call the model made
            item = {"type": "function_call", "id": item_id, "call_id": pending["call_id"],
                    "name": ref.name, "arguments": pending["arguments"],
                    "status": "incomplete" if incomplete else "completed"}
        return item

    def _tool_list(self, provider: ToolProvider, tools: tuple[ToolSpec, ...]) -> list[StreamEvent]:
        out = self.close()
        item: dict[str, Any] = {"type": "mcp_list_tools", "id": self._new_id("mcpl_"),
                                "server_label": provider.label, "tools": []}
        out += self._add(item)
        item["tools"] = [{"name": t.name, "description": t.description,
                          "input_schema": t.parameters, "annotations": None} for t in tools]
        out += [("response.mcp_list_tools.in_progress", self._where()),
                ("response.mcp_list_tools.completed", self._where())]
        return out + self.close()

    def _mcp_call(self, start: ToolCallStart, provider: ToolProvider) -> list[StreamEvent]:
        if start.awaits_approval:
            return self._add({"type": "mcp_approval_request", "id": self._new_id("mcpr_"),
                              "server_label": provider.label, "name": start.name,
                              "arguments": ""})
        item = {"type": "mcp_call", "id": self._new_id("mcp_"), "server_label": provider.label,
                "name": start.name, "arguments": "", "status": "in_progress", "output": None,
                "error": None, "approval_request_id": start.approved_by}
        return self._add(item) + [("response.mcp_call.in_progress", self._where())]

    def _outcome(self, event: ToolResult | ToolRefused) -> list[StreamEvent]:
        """The open MCP call's result (or why it did not run) closes it."""
        self._awaiting = None
        item = self._current
        if isinstance(event, ToolResult) and not event.is_error:
            item["output"], item["status"] = event.output, "completed"
            done = "response.mcp_call.completed"
        elif isinstance(event, ToolResult):  # the tool ran and reported failure (isError)
            item["error"] = {"type": "mcp_tool_execution_error",
                             "content": _content_blocks(event.output)}
            item["status"] = "failed"
            done = "response.mcp_call.failed"
        else:  # JSON-RPC "invalid params", which MCP also uses for an unknown tool
            item["error"] = {"type": "mcp_protocol_error", "code": -32602,
                             "message": event.reason}
            item["status"] = "failed"
            done = "response.mcp_call.failed"
        return [(done, self._where()), *self.close()]

    def _is_open(self, kind: str) -> bool:
        return self._open is not None and self._open["type"] == kind

    def _add(self, item: dict[str, Any], part: dict[str, Any] | None = None) -> list[StreamEvent]:
        self.items.append(item)
        self._open = item
        out: list[StreamEvent] = [("response.output_item.added",
                                   {"output_index": self._index, "item": _copy(item)})]
        if part is not None:
            item["content"].append(part)
            out.append(("response.content_part.added",
                        {"item_id": item["id"], "output_index": self._index, "content_index": 0,
                         "part": dict(part)}))
        return out

    def _text(self, text: str, logprobs: tuple[TokenLogprob, ...]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if not self._is_open("message"):
            out += self.close()
            item = {"type": "message", "id": self._new_id("msg_"), "status": "in_progress",
                    "role": "assistant", "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out += self._add(item, part)
        part = self._current["content"][0]
        part["text"] += text
        entries = logprob_entries(logprobs) if self._logprobs else []
        part["logprobs"] += entries
        out.append(("response.output_text.delta",
                    {**self._where(), "content_index": 0, "delta": text, "logprobs": entries}))
        return out

    def _reasoning(self, text: str) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if not self._is_open("reasoning"):
            out += self.close()
            item = {"type": "reasoning", "id": self._new_id("rs_"), "summary": [], "content": [],
                    "status": "in_progress"}
            out += self._add(item, {"type": "reasoning_text", "text": ""})
        self._current["content"][0]["text"] += text
        out.append(("response.reasoning_text.delta",
                    {**self._where(), "content_index": 0, "delta": text}))
        return out


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    """The item as announced: later deltas must not change what was already sent."""
    out = dict(item)
    if "content" in out:
        out["content"] = []
    return out


def _stored_call(item: dict[str, Any]) -> ToolCallResult:
    """A stored MCP call (or approval request) as the call it records."""
    call = ToolCallResult(item.get("approval_request_id") or item["id"], item["name"],
                          item.get("arguments", ""),
                          ToolProvider("ephemeral_mcp", item["server_label"]),
                          output=item.get("output"),
                          awaits_approval=item["type"] == "mcp_approval_request",
                          approved_by=item.get("approval_request_id"))
    error = item.get("error")
    if isinstance(error, dict) and error.get("type") == "mcp_tool_execution_error":
        call.output = json.dumps(error.get("content"), ensure_ascii=False, separators=(",", ":"))
        call.output_is_error = True
    elif error is not None:
        message = error.get("message", "") if isinstance(error, dict) else str(error)
        call.refused = ToolRefused("invalid_arguments", message)
    return call


def _content_blocks(output: str) -> Any:
    """A tool's output (its MCP content blocks as JSON) as the blocks themselves."""
    try:
        return json.loads(output)
    except ValueError:
        return [{"type": "text", "text": output}]
