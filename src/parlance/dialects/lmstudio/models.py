"""LM Studio's model objects (`GET /api/v1/models`) and load/unload bodies, from a
model's facts (`core.model_facts`) and what is loaded; the load's answer, and its
opt-in stream (`LoadEncoder`). Pure: the server reads the files and loads."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from parlance.core.errors import ParlanceError
from parlance.core.events import ModelLoad
from parlance.core.model_facts import Capabilities, ModelFacts
from parlance.dialects.base import Frame
from parlance.dialects.lmstudio.errors import error_object
from parlance.dialects.lmstudio.stream import LoadFrames, frame
from parlance.dialects.shared.wire import WireModel


class LoadRequest(WireModel):
    model: Annotated[str, Field(min_length=1)]
    # Ranges depend on the model (its trained context) and the memory free: the load
    # plan checks them (models/load_plan.py), for a chat's context_length too.
    context_length: int | None = None
    eval_batch_size: int | None = None
    parallel: int | None = None  # LM Studio fixes it at 4
    flash_attention: bool | None = None  # always on here; accepted for compatibility
    offload_kv_cache_to_gpu: bool | None = None  # no GPU offload here; accepted
    num_experts: int | None = None
    echo_load_config: bool = False


def load_answer(instance_id: str, seconds: float, config: dict[str, Any] | None
                ) -> dict[str, Any]:
    """What a load answers; `config`: the applied load config, sent only when the
    request set `echo_load_config`."""
    out: dict[str, Any] = {"type": "llm", "instance_id": instance_id,
                           "load_time_seconds": round(seconds, 3), "status": "loaded"}
    if config is not None:
        out["load_config"] = config
    return out


class LoadEncoder:
    """The load as a stream, for a client that asks for one (`Accept:
    text/event-stream`; LM Studio's load has none, so no client of it ever gets one):
    the `model_load.*` events of LM Studio's chat stream (start; progress, 0 to 1, while
    this request's load runs; end with its time), `model_load.end` also carrying in
    `result` what the load answers without a stream. A load that fails, or whose
    wait was stopped, ends with the chat stream's `error` event (after its start, as
    every load's stream begins)."""

    def __init__(self, instance_id: str) -> None:
        self._id = instance_id
        self._frames = LoadFrames()

    def progress(self, fraction: float) -> list[Frame]:
        return self._frames.feed(ModelLoad(self._id, fraction))

    def close(self, seconds: float, config: dict[str, Any] | None) -> list[Frame]:
        return self._frames.feed(ModelLoad(self._id, 1.0, seconds),
                                 result=load_answer(self._id, seconds, config))

    def fail(self, error: ParlanceError) -> list[Frame]:
        return [*self._frames.start(self._id), frame("error", error=error_object(error))]


class UnloadRequest(WireModel):
    instance_id: Annotated[str, Field(min_length=1)]


class DownloadRequest(WireModel):
    model: Annotated[str, Field(min_length=1)]
    quantization: str | None = None


def capabilities(caps: Capabilities) -> dict[str, Any]:
    """What the model's own chat template shows it was trained for."""
    out: dict[str, Any] = {"vision": False, "trained_for_tool_use": caps.trained_for_tools}
    if caps.reasoning_switch == "effort":
        out["reasoning"] = {"allowed_options": ["off", "low", "medium", "high"],
                            "default": "medium"}
    elif caps.reasoning_switch == "on_off":
        out["reasoning"] = {"allowed_options": ["off", "on"], "default": "on"}
    if caps.chat_format:
        out["chat_format"] = caps.chat_format  # Parlance's: the parser its output goes through
    return out


def model_object(key: str, facts: ModelFacts, size_bytes: int,
                 loaded: dict[str, Any] | None) -> dict[str, Any]:
    """`size_bytes`: its (first) file's; `loaded`: the instance's applied config, None
    when the model is not loaded."""
    file = facts.file
    publisher = key.split("/", 1)[0] if "/" in key else (file and file.organization) or "local"
    quantization = None
    if file is not None and file.quantization:
        bpw = file.bits_per_weight
        quantization = {"name": file.quantization,
                        "bits_per_weight": round(bpw, 2) if bpw is not None else None}
    return {
        "type": "llm",
        "publisher": publisher,
        "key": key,
        "display_name": (file.name if file and file.name else key),
        "architecture": file.architecture if file else None,
        "quantization": quantization,
        "size_bytes": size_bytes,
        "params_string": file.size_label if file else None,
        "loaded_instances": [] if loaded is None else [{"id": key, "config": loaded}],
        "max_context_length": (file.context_length if file and file.context_length
                               else (loaded or {}).get("context_length", 0)),
        "format": "gguf",
        "capabilities": capabilities(facts.capabilities),
        "description": None,
    }
