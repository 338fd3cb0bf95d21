"""Folds core events into Responses output items, in generation order, and names the
stream events each step takes: one item is opened and closed at a time, with
`output_index` 0, 1, 2… (reasoning, message text, function calls)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from parlance.core.accumulate import ChoiceResult
from parlance.core.events import (
    Event,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
)
from parlance.dialects.openai_common import new_id, token_spelling

StreamEvent = tuple[str, dict[str, Any]]  # (type, fields other than type/sequence_number)


def logprob_entries(tokens: tuple[TokenLogprob, ...] | list[TokenLogprob]) -> list[dict]:
    return [{"token": t.token, "logprob": t.logprob if t.logprob is not None else 0.0,
             "bytes": list(t.bytes),
             "top_logprobs": [{"token": token_spelling(a), "logprob": a.logprob,
                               "bytes": list(a.bytes)} for a in t.top]}
            for t in tokens]


class OutputBuilder:
    def __init__(self, *, logprobs: bool = False, ids: Iterator[str] | None = None) -> None:
        self.items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._logprobs = logprobs
        self._ids = ids  # item ids to reuse (replaying a stored response)

    def _new_id(self, prefix: str) -> str:
        return next(self._ids) if self._ids is not None else new_id(prefix)

    @property
    def _index(self) -> int:
        return len(self.items) - 1

    def feed(self, event: Event) -> list[StreamEvent]:
        match event:
            case TextDelta(text=text, logprobs=logprobs) if text or logprobs:
                return self._text(text, logprobs or ())
            case ReasoningDelta(text=text) if text:
                return self._reasoning(text)
            case ToolCallStart(call_id=call_id, name=name):
                out = self.close()
                item = {"type": "function_call", "id": self._new_id("fc_"), "call_id": call_id,
                        "name": name, "arguments": "", "status": "in_progress"}
                return out + self._add(item)
            case ToolCallArgs(fragment=fragment) if self._is_open("function_call"):
                self._open["arguments"] += fragment  # type: ignore[index]
                return [("response.function_call_arguments.delta",
                         {"item_id": self._open["id"], "output_index": self._index,  # type: ignore[index]
                          "delta": fragment})]
            case ToolCallEnd():
                return self.close()
        return []

    def close(self, *, incomplete: bool = False) -> list[StreamEvent]:
        """Close the open item, if any."""
        item, self._open = self._open, None
        if item is None:
            return []
        where = {"item_id": item["id"], "output_index": self._index}
        out: list[StreamEvent] = []
        if item["type"] == "function_call":
            out.append(("response.function_call_arguments.done",
                        {**where, "name": item["name"], "arguments": item["arguments"]}))
        elif item["type"] == "message":
            part = item["content"][0]
            done = {**where, "content_index": 0, "text": part["text"],
                    "logprobs": part["logprobs"]}
            out += [("response.output_text.done", done),
                    ("response.content_part.done", {**where, "content_index": 0, "part": part})]
        else:
            part = item["content"][0]
            out += [("response.reasoning_text.done", {**where, "content_index": 0,
                                                      "text": part["text"]}),
                    ("response.content_part.done", {**where, "content_index": 0, "part": part})]
        item["status"] = "incomplete" if incomplete else "completed"
        out.append(("response.output_item.done", {"output_index": self._index, "item": item}))
        return out

    def replay_items(self, items: list[dict[str, Any]]) -> list[StreamEvent]:
        """Stored output items again as stream events (one delta per item)."""
        out: list[StreamEvent] = []
        for item in items:
            match item.get("type"):
                case "message":
                    text = "".join(p.get("text", "") for p in item.get("content", []))
                    out += self._text(text, ())
                case "reasoning":
                    text = "".join(p.get("text", "") for p in item.get("content", []))
                    out += self._reasoning(text)
                case "function_call":
                    out += self.feed(ToolCallStart(item["call_id"], item["name"]))
                    out += self.feed(ToolCallArgs(item.get("arguments", "")))
            out += self.close(incomplete=item.get("status") == "incomplete")
        return out

    def replay(self, choice: ChoiceResult) -> None:
        """A finished choice, in the order a stream would have produced it."""
        if choice.reasoning:
            self._reasoning(choice.reasoning)
        if choice.text or choice.logprobs:
            self._text(choice.text, tuple(choice.logprobs or ()))
        for call in choice.tool_calls:
            self.feed(ToolCallStart(call.call_id, call.name))
            self.feed(ToolCallArgs(call.arguments))
            self.close()
        self.close()

    # -- items ----------------------------------------------------------------

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
        part = self._open["content"][0]  # type: ignore[index]
        part["text"] += text
        entries = logprob_entries(logprobs) if self._logprobs else []
        part["logprobs"] += entries
        out.append(("response.output_text.delta",
                    {"item_id": self._open["id"], "output_index": self._index,  # type: ignore[index]
                     "content_index": 0, "delta": text, "logprobs": entries}))
        return out

    def _reasoning(self, text: str) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if not self._is_open("reasoning"):
            out += self.close()
            item = {"type": "reasoning", "id": self._new_id("rs_"), "summary": [], "content": [],
                    "status": "in_progress"}
            out += self._add(item, {"type": "reasoning_text", "text": ""})
        self._open["content"][0]["text"] += text  # type: ignore[index]
        out.append(("response.reasoning_text.delta",
                    {"item_id": self._open["id"], "output_index": self._index,  # type: ignore[index]
                     "content_index": 0, "delta": text}))
        return out


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    """The item as announced: later deltas must not change what was already sent."""
    out = dict(item)
    if "content" in out:
        out["content"] = []
    return out
