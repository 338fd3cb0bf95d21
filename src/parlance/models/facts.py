"""A model's facts (`core.model_facts.ModelFacts`) for the model listings, from its
registry entry and its file's GGUF header (`headers.py`). Blocking: a header may be
read (once per version of the file)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parlance.core.model_facts import Capabilities, FileFacts, ModelFacts, ReasoningSwitch
from parlance.engines.parsing.formats import format_for_template
from parlance.engines.parsing.syntax import reasoning_for_template
from parlance.models.gguf import GgufHeader, GgufInfo, describe
from parlance.models.headers import file_size, header_of, whole_header
from parlance.models.registry import ModelSpec

__all__ = ["capabilities", "facts_of"]

_FIM_KEYS = ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
             "tokenizer.ggml.fim_mid_token_id")


def facts_of(spec: ModelSpec, created: int | None = None, *,
             whole_arrays: bool = False) -> ModelFacts:
    """`created`: when the model was loaded (epoch seconds), its time when it has no
    file. `whole_arrays` reads the header afresh keeping every array (a vocabulary
    too), where a listing takes the cached header."""
    found = header_of(spec)
    header = whole_header(spec) if whole_arrays else found.header if found else None
    template = spec.chat_template
    file = info = None
    if header is not None:
        info = describe(header)
        template = template or info.chat_template
        file = _file_facts(header, info, found.digest if found else "")
    return ModelFacts(
        file=file,
        size_bytes=found.size if found else file_size(spec),
        modified_ns=found.modified_ns if found else _modified(spec, created),
        chat_template=template,
        defaults={**spec.sampling, "ctx_size": spec.ctx_size},
        capabilities=capabilities(header.metadata if header else {}, template,
                                  info.chat_template if info else None, spec.chat_format))


def capabilities(metadata: Mapping[str, Any], template: str | None,
                 file_template: str | None, chat_format: str | None = None) -> Capabilities:
    """An embedding model is one whose header names a pooling type; a model thinks when
    the template it is served with (`template`) has the reasoning markers the engines
    parse; fill-in-the-middle needs its header to name the FIM tokens. What it was
    trained for (tools, a reasoning knob) its file's own template shows; its chat format
    is the override's (`chat_format`), else the one detected from `template`."""
    arch = metadata.get("general.architecture")
    source = file_template or ""
    switch: ReasoningSwitch | None = None
    if "reasoning_effort" in source:
        switch = "effort"
    elif "enable_thinking" in source:
        switch = "on_off"
    return Capabilities(
        embeds_only=isinstance(arch, str) and f"{arch}.pooling_type" in metadata,
        thinks=template is not None and reasoning_for_template(template) is not None,
        fills_in_middle=all(key in metadata for key in _FIM_KEYS),
        trained_for_tools="tools" in source,
        reasoning_switch=switch,
        chat_format=chat_format or (format_for_template(template).name if template else None))


def _file_facts(header: GgufHeader, info: GgufInfo, digest: str) -> FileFacts:
    license_text = header.metadata.get("general.license")
    return FileFacts(
        architecture=info.architecture,
        name=info.name,
        organization=info.organization,
        quantization=info.quantization,
        bits_per_weight=info.bits_per_weight,
        parameter_count=info.parameter_count,
        size_label=info.params_string,
        context_length=info.context_length,
        license=license_text if isinstance(license_text, str) else None,
        digest=digest,
        metadata=header.metadata,
        array_lengths=header.array_lengths)


def _modified(spec: ModelSpec, created: int | None) -> int | None:
    """When the model came to be (ns): its file's modification time, else when it was
    loaded; None: unknown."""
    try:
        return spec.locate().stat().st_mtime_ns
    except (OSError, ValueError):
        return created * 1_000_000_000 if created else None
