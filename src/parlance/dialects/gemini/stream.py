"""The streamGenerateContent stream: GenerateContentResponse chunks, each with the
candidates' new parts, `modelVersion`, `responseId` and the usage so far
(`usageMetadata`: the prompt from the first chunk, the answer's counts on the last).

Framing: with `alt=sse` one `data: <json>` per chunk, no event names, no `[DONE]`;
without it one JSON array of the chunks, written as they come (`[`, chunks separated
by `,`, `]`). Text comes as it is generated; a function call comes whole, once its
arguments are complete. Each candidate's last part is held back until the next one
or the end, so the last chunk carries it with the `finishReason` and the final usage,
as Gemini's own streams do. A failure after the stream began is a last chunk
`{"error": {code, message, status}}`, which the SDKs raise."""

from __future__ import annotations

import json
from typing import Any

from parlance.core.errors import ParlanceError
from parlance.core.events import (
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from parlance.dialects.base import Frame
from parlance.dialects.gemini.errors import error_body
from parlance.dialects.gemini.result import (
    call_part,
    finish_fields,
    logprobs_result,
    usage_metadata,
)
from parlance.dialects.gemini.thoughts import signature


class _Candidate:
    def __init__(self) -> None:
        self.held: dict[str, Any] | None = None  # the last part, not sent yet
        self.logprobs: list[TokenLogprob] = []  # the held part's
        self.thoughts = ""  # thoughts since the last part that was not one
        self.call: tuple[str, str] | None = None  # the open call's id and name
        self.arguments = ""
        self.finish: Finish | None = None


class GenerateEncoder:
    def __init__(self, response_id: str, model: str, prompt_tokens: int, *,
                 show_thoughts: bool, array: bool, logprobs: bool = False) -> None:
        self._shell = {"modelVersion": model, "responseId": response_id}
        self._prompt_tokens = prompt_tokens
        self._show_thoughts = show_thoughts
        self._array = array  # the JSON-array stream (no `alt=sse`)
        self._logprobs = logprobs
        self._candidates: dict[int, _Candidate] = {}
        self._usage: Usage | None = None
        self._sent = 0  # chunks sent so far

    def open(self) -> list[Frame]:
        return [Frame("[")] if self._array else []

    def feed(self, ev: Event) -> list[Frame]:
        match ev:
            case TextDelta(text=text, index=index) if text or ev.logprobs:
                return self._text(index, text, ev.logprobs or ())
            case ReasoningDelta(text=text, index=index) if text:
                cand = self._candidate(index)
                cand.thoughts += text
                if not self._show_thoughts:
                    return []
                return self._hold(index, {"text": text, "thought": True})
            case ToolCallStart(call_id=call_id, name=name, index=index):
                self._candidate(index).call = (call_id, name)
                self._candidate(index).arguments = ""
            case ToolCallArgs(fragment=fragment, index=index):
                self._candidate(index).arguments += fragment
            case ToolCallEnd(index=index):
                cand = self._candidate(index)
                if cand.call is not None:
                    part = call_part(*cand.call, cand.arguments)
                    cand.call = None
                    return self._hold(index, self._signed(cand, part))
            case Finish(index=index):
                self._candidate(index).finish = ev
            case Usage():
                self._usage = ev
        return []

    def close(self) -> list[Frame]:
        candidates = []
        for index in sorted(self._candidates):
            cand = self._candidates[index]
            parts = [cand.held] if cand.held is not None else []
            if cand.thoughts:  # thoughts with nothing after them: sign them here
                if parts and parts[-1].get("thought"):
                    parts[-1]["thoughtSignature"] = signature(cand.thoughts)
                else:
                    parts.append({"text": "", "thoughtSignature": signature(cand.thoughts)})
            entry = self._entry(index, cand, parts or [{"text": ""}])
            candidates.append(entry | finish_fields(cand.finish.reason if cand.finish
                                                    else None))
        if not candidates:
            candidates = [{"content": {"role": "model", "parts": [{"text": ""}]},
                           **finish_fields(None), "index": 0}]
        frames = [self._chunk(candidates, final=True)]
        return [*frames, Frame("]")] if self._array else frames

    def fail(self, error: ParlanceError) -> list[Frame]:
        """What each candidate held back is sent first, then the error."""
        frames = [self._chunk([self._entry(index, cand, [cand.held])])
                  for index, cand in sorted(self._candidates.items()) if cand.held is not None]
        body = error_body(error)
        if not self._array:
            return [*frames, Frame(body)]
        return [*frames, Frame(("," if self._sent else "") + _dumps(body) + "]")]

    def _candidate(self, index: int) -> _Candidate:
        found = self._candidates.get(index)
        if found is None:
            found = self._candidates[index] = _Candidate()
        return found

    def _text(self, index: int, text: str, logprobs: tuple[TokenLogprob, ...]) -> list[Frame]:
        cand = self._candidate(index)
        frames = self._hold(index, self._signed(cand, {"text": text}))
        cand.logprobs = list(logprobs)
        return frames

    def _signed(self, cand: _Candidate, part: dict[str, Any]) -> dict[str, Any]:
        """The first part after thoughts carries their signature."""
        if cand.thoughts and not part.get("thought"):
            part["thoughtSignature"] = signature(cand.thoughts)
            cand.thoughts = ""
        return part

    def _hold(self, index: int, part: dict[str, Any]) -> list[Frame]:
        """Send what this candidate held and hold `part` instead."""
        cand = self._candidate(index)
        frames = []
        if cand.held is not None:
            frames.append(self._chunk([self._entry(index, cand, [cand.held])]))
        cand.held, cand.logprobs = part, []
        return frames

    def _entry(self, index: int, cand: _Candidate, parts: list[dict[str, Any]]
               ) -> dict[str, Any]:
        entry: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": index}
        if self._logprobs:
            entry["logprobsResult"] = logprobs_result(cand.logprobs)
        return entry

    def _chunk(self, candidates: list[dict[str, Any]], final: bool = False) -> Frame:
        counts = self._usage if final else None
        body = {"candidates": candidates,
                "usageMetadata": usage_metadata(self._prompt_tokens, counts), **self._shell}
        self._sent += 1
        if not self._array:
            return Frame(body)
        return Frame(("," if self._sent > 1 else "") + "\r\n" + _dumps(body))


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
