"""Where a prompt's prefix was sent last, so that the next prompt sharing it goes to
the replica whose KV cache holds it.

A prompt's keys are hashes of its growing prefixes: one per chat message (after a
key for the tools and output format, which templates render first), or one per
512 characters of a raw text prompt. A conversation's next turn (sent whole by Chat
clients, or rebuilt from `previous_response_id` by the Responses store) starts
with every message of the turn before, so its longest known key is that turn's
full prompt, and it goes where that turn went. The table is bounded (least
recently used keys are forgotten).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from parlance.core.request import ChatInput, GenerationRequest, PromptInput

TEXT_BLOCK = 512  # characters per key of a raw prompt
MAX_KEYS = 65_536
T = TypeVar("T")


def prefix_keys(request: GenerationRequest, prompt: PromptInput) -> tuple[int, ...]:
    """Hashes of the prompt's prefixes, shortest first."""
    if isinstance(prompt, ChatInput):
        running = hash((request.model, repr(request.tools), repr(request.response_format)))
        keys = []
        for m in prompt.messages:
            running = hash((running, m.role, m.content, m.name, m.tool_call_id,
                            tuple((c.id, c.name, c.arguments) for c in m.tool_calls)))
            keys.append(running)
        return tuple(keys)
    if prompt.token_ids is not None:
        ids = prompt.token_ids
        running = hash((request.model, "ids"))
        keys = []
        for start in range(0, len(ids), TEXT_BLOCK // 4):
            running = hash((running, ids[start:start + TEXT_BLOCK // 4]))
            keys.append(running)
        return tuple(keys)
    text = prompt.text or ""
    running = hash((request.model, "text"))
    keys = []
    for start in range(0, len(text), TEXT_BLOCK):
        running = hash((running, text[start:start + TEXT_BLOCK]))
        keys.append(running)
    return tuple(keys)


class AffinityTable(Generic[T]):
    def __init__(self, limit: int = MAX_KEYS) -> None:
        self._where: OrderedDict[int, T] = OrderedDict()
        self._limit = limit

    def lookup(self, keys: tuple[int, ...]) -> list[T]:
        """Where the prefixes went, longest prefix first (each place once)."""
        seen: list[T] = []
        for key in reversed(keys):
            place = self._where.get(key)
            if place is not None and place not in seen:
                seen.append(place)
        return seen

    def remember(self, keys: tuple[int, ...], place: T) -> None:
        where = self._where
        for key in keys:
            where[key] = place
            where.move_to_end(key)
        while len(where) > self._limit:
            where.popitem(last=False)

    def forget(self, place: T) -> None:
        """A replica that left the pool: its cache is gone (or will be when it returns)."""
        for key in [k for k, p in self._where.items() if p is place]:
            del self._where[key]

    def __len__(self) -> int:
        return len(self._where)
