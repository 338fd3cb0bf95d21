"""What is known of a model without loading it: what its file's header says, what the
server can do with it, its own defaults. The model listings of the dialects (Ollama's
tags, show and ps; LM Studio's model objects) render it in their own shapes;
`models/facts.py` builds it from the registry entry and the GGUF header.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# The reasoning knob a chat template offers: a level (`reasoning_effort`: low, medium,
# high, off) or a switch (`enable_thinking`: on or off).
ReasoningSwitch = Literal["effort", "on_off"]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the server does with the model, and what its file shows it was trained for."""

    embeds_only: bool = False  # an embedding model (its header names a pooling type)
    thinks: bool = False  # the template it is served with marks reasoning (parsed apart)
    fills_in_middle: bool = False  # its header names the fill-in-the-middle tokens
    trained_for_tools: bool = False  # its file's own chat template mentions tools
    reasoning_switch: ReasoningSwitch | None = None  # the knob its file's template offers
    chat_format: str | None = None  # the family format it is served with (None: no template)


@dataclass(frozen=True, slots=True)
class FileFacts:
    """What a model file's (GGUF) header says. For one shard of a split model,
    `parameter_count` is None (the shard holds part of the tensors only)."""

    architecture: str | None
    name: str | None
    organization: str | None
    quantization: str | None  # llama.cpp's name of the file type, e.g. "Q4_K_M"
    bits_per_weight: float | None
    parameter_count: int | None
    size_label: str | None  # "135M": the header's size label, else the count rounded
    context_length: int | None  # the context it was trained for
    license: str | None
    digest: str  # "sha256:…" of the header and tensor table
    # The header's key/values (arrays beyond a few hundred items left out, their
    # lengths in `array_lengths`, unless the whole header was read).
    metadata: Mapping[str, Any] = field(default_factory=dict)
    array_lengths: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelFacts:
    file: FileFacts | None  # None: no GGUF header to read (an upstream server's model)
    size_bytes: int  # on disk: every shard of a split model
    modified_ns: int | None  # its file's modification time, else when it was loaded
    chat_template: str | None  # the template it is served with (a preset's, else the file's)
    defaults: Mapping[str, Any]  # its own sampling defaults and `ctx_size`
    capabilities: Capabilities
