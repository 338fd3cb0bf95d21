"""Ollama's model-management shapes (its `api/types.go`): the entries of `GET /api/tags`
and `GET /api/ps`, the `POST /api/show` answer, pull progress lines, and the bodies of
show, pull, delete and copy, rendered from a model's facts (`core.model_facts`). Pure: the
server reads the files and knows what is loaded.

Names are listed the way Ollama shows them, with a tag (`smollm2-135m-instruct:latest`);
the registry resolves them back (`models.registry.name_variants`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from parlance.core.errors import InvalidRequest
from parlance.core.model_facts import Capabilities, FileFacts, ModelFacts
from parlance.dialects.shared.wire import WireModel

# The Ollama release whose API (docs/api.md, api/types.go) these endpoints follow.
# `GET /api/version` answers it: clients compare it to decide what they may use (VS
# Code's Copilot Chat, for one, refuses servers older than 0.6.4).
OLLAMA_VERSION = "0.32.15"

FOREVER_NS = (1 << 63) - 1  # Go's time.Duration max: Ollama's `keep_alive: -1`
# Arrays longer than this show as [] unless `verbose` (Ollama's getModelData).
SHORT_ARRAY = 5
# GGUF keys Ollama leaves out of `model_info` (they are shown elsewhere or are noise).
_HIDDEN_KEYS = ("general.name", "tokenizer.chat_template")
# Sampling fields (SamplingParams names) and load settings as Modelfile PARAMETERs.
_PARAMETER_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                    "min_p": "min_p", "seed": "seed", "repeat_penalty": "repeat_penalty",
                    "presence_penalty": "presence_penalty",
                    "frequency_penalty": "frequency_penalty", "ctx_size": "num_ctx"}


# -- requests ---------------------------------------------------------------------


class _Named(WireModel):
    """Ollama's clients send `model`; older ones `name`."""

    model: str | None = None
    name: str | None = None

    @property
    def target(self) -> str:
        target = self.model or self.name
        if not target:
            raise InvalidRequest("model is required", param="model")
        return target


class ShowRequest(_Named):
    verbose: bool = False


class DeleteRequest(_Named):
    pass


class PullRequest(_Named):
    stream: bool | None = None  # streamed unless false
    insecure: bool | None = None  # deprecated, ignored (as Ollama does)


class CopyRequest(WireModel):
    source: str = ""
    destination: str = ""

    def checked(self) -> tuple[str, str]:
        if not self.source:
            raise InvalidRequest(f'source "{self.source}" is invalid', param="source")
        if not self.destination:
            raise InvalidRequest(f'destination "{self.destination}" is invalid',
                                 param="destination")
        return self.source, self.destination


# -- values -----------------------------------------------------------------------


ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time: what Ollama shows for unknown


def timestamp(epoch_ns: int | None) -> str:
    """RFC 3339 in UTC with nanoseconds, trailing zeros of the fraction dropped (Go's
    RFC3339Nano), as `created_at` is written (result.timestamp); None: unknown."""
    if epoch_ns is None:
        return ZERO_TIME
    seconds, fraction = divmod(epoch_ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{fraction:09d}".rstrip("0")
    return f"{stamp}.{digits}Z" if digits else f"{stamp}Z"


def expiry(expires_at: float | None, now_ns: int) -> str:
    """`expires_at` (wall-clock seconds); None: never, which Ollama shows as now plus
    the longest Go duration (some 292 years)."""
    if expires_at is None:
        return timestamp(now_ns + FOREVER_NS)
    return timestamp(int(expires_at * 1e9))


def human_number(count: int) -> str:
    """Ollama's `format.HumanNumber`: 134_515_008 -> "134.52M", 8_030_261_248 -> "8.0B"."""
    for scale, suffix, places in ((10**9, "B", 1), (10**6, "M", 2)):
        if count >= scale:
            value = count / scale
            return f"{value:.0f}{suffix}" if value == int(value) else f"{value:.{places}f}{suffix}"
    if count >= 1000:
        return f"{count / 1000:.0f}K"
    return str(count)


# -- objects ----------------------------------------------------------------------


def details(file: FileFacts | None) -> dict[str, Any]:
    """None: no GGUF header could be read (a model an upstream server serves, say), so
    nothing is claimed."""
    if file is None:
        return {"parent_model": "", "format": "", "family": "", "families": None,
                "parameter_size": "", "quantization_level": ""}
    family = file.architecture
    count = file.parameter_count
    size = human_number(count) if count else file.size_label or ""
    return {
        "parent_model": "",
        "format": "gguf",
        "family": family or "",
        "families": [family] if family else None,
        "parameter_size": size,
        "quantization_level": file.quantization or "",
    }


def capabilities(caps: Capabilities) -> list[str]:
    """An embedding model only embeds; any other generates, with tools (its template's,
    or Parlance's built-in prompt for templates that know none), thinking when its
    template marks reasoning, and fill-in-the-middle (`insert`)."""
    if caps.embeds_only:
        return ["embedding"]
    out = ["completion", "tools"]
    if caps.thinks:
        out.append("thinking")
    if caps.fills_in_middle:
        out.append("insert")
    return out


def model_info(metadata: Mapping[str, Any], array_lengths: Mapping[str, int],
               parameter_count: int | None, verbose: bool) -> dict[str, Any]:
    """The GGUF header's key/values as Ollama shows them: long arrays empty unless
    `verbose` (those the header reader did not keep are always empty), and the
    parameter count the tensor table gives."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if key in _HIDDEN_KEYS:
            continue
        if isinstance(value, list) and len(value) > SHORT_ARRAY and not verbose:
            value = []
        out[key] = value
    for key in array_lengths:
        out.setdefault(key, [])
    if parameter_count:
        out["general.parameter_count"] = parameter_count
    return dict(sorted(out.items()))


def _go_value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value).removesuffix(".0")
    return str(value)


def parameters(settings: Mapping[str, Any]) -> str:
    """Modelfile `PARAMETER` lines for the model's own defaults (a preset's sampling
    and context size), as Ollama's show prints them: `name` padded to 30, then the value."""
    lines = []
    for key, value in settings.items():
        name = _PARAMETER_NAMES.get(key)
        if name is None or value is None:
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            lines.append(f"{name:<30} {_go_value(item)}")
    return "\n".join(lines)


def modelfile(shown: str, settings: Mapping[str, Any]) -> str:
    """A Modelfile that builds the same model from this one by name. The chat template
    is a Jinja one (the GGUF's), which Ollama's TEMPLATE (Go templates) cannot take, so
    it is left out: `FROM` a GGUF already carries it."""
    lines = ['# Modelfile generated by "parlance"', f"FROM {shown}"]
    for line in parameters(settings).splitlines():
        name, _, value = line.partition(" ")
        lines.append(f"PARAMETER {name} {value.strip()}")
    return "\n".join(lines) + "\n"


def _digest(file: FileFacts | None) -> str:
    return file.digest if file is not None else ""


def tag_entry(shown: str, facts: ModelFacts) -> dict[str, Any]:
    """One model of `GET /api/tags`."""
    return {"name": shown, "model": shown, "modified_at": timestamp(facts.modified_ns),
            "size": facts.size_bytes, "digest": _digest(facts.file),
            "details": details(facts.file), "capabilities": capabilities(facts.capabilities)}


def ps_entry(shown: str, facts: ModelFacts, size: int, expires: str,
             context_length: int) -> dict[str, Any]:
    """One loaded model of `GET /api/ps`: `size` is its memory; everything runs on the
    CPU (`size_vram` 0)."""
    return {"name": shown, "model": shown, "size": size, "digest": _digest(facts.file),
            "details": details(facts.file), "expires_at": expires, "size_vram": 0,
            "context_length": context_length}


def show(shown: str, facts: ModelFacts, verbose: bool) -> dict[str, Any]:
    """`POST /api/show`: the template is the chat template the model is served with;
    `model_info` is empty when no GGUF header could be read (Ollama's default too)."""
    file = facts.file
    out: dict[str, Any] = {}
    if file is not None and file.license:
        out["license"] = file.license
    out["modelfile"] = modelfile(shown, facts.defaults)
    if params := parameters(facts.defaults):
        out["parameters"] = params
    if facts.chat_template:
        out["template"] = facts.chat_template
    info_map = ({} if file is None else
                model_info(file.metadata, file.array_lengths, file.parameter_count, verbose))
    if facts.capabilities.chat_format:
        out["chat_format"] = facts.capabilities.chat_format  # Parlance's: which parser
    out.update({"details": details(file), "model_info": info_map,
                "capabilities": capabilities(facts.capabilities),
                "modified_at": timestamp(facts.modified_ns)})
    return out


def progress(status: str, digest: str | None = None, total: int | None = None,
             completed: int | None = None) -> dict[str, Any]:
    """A pull progress line; Go leaves out empty and zero fields (`omitempty`)."""
    out: dict[str, Any] = {"status": status}
    if digest:
        out["digest"] = digest
    if total:
        out["total"] = total
    if completed:
        out["completed"] = completed
    return out


# -- refusals ---------------------------------------------------------------------

_NOT_PULLABLE = ("Parlance cannot pull '{name}': it is no model this server has, and "
                 "{why}. Pull a direct link to a .gguf file instead, e.g. https://"
                 "huggingface.co/<owner>/<repo>/resolve/main/<file>.gguf, or name a model "
                 "GET /api/tags lists.")
_REGISTRY = "names from Ollama's registry cannot be fetched here"
_HUGGING_FACE = ("Hugging Face names (hf.co/<owner>/<repo>:<quantization>) are not looked "
                 "up here")


def not_pullable(name: str) -> InvalidRequest:
    """A pull of a name this server does not have: it would need Ollama's registry (or
    Hugging Face's lookup of a quantization), which Parlance does not reach."""
    why = _HUGGING_FACE if name.lower().startswith(("hf.co/", "huggingface.co/")) else _REGISTRY
    return InvalidRequest(_NOT_PULLABLE.format(name=name, why=why), param="model",
                          code="not_pullable")
