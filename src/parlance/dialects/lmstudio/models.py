"""LM Studio's model objects (`GET /api/v1/models`) and load/unload bodies, from a
model's facts (`core.model_facts`) and what is loaded. Pure: the server reads the files."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from parlance.core.model_facts import Capabilities, ModelFacts
from parlance.dialects.wire import WireModel


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
