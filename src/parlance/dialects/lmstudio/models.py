"""LM Studio's model objects (`GET /api/v1/models`) and load/unload bodies, from
what the GGUF header says and what is loaded. Pure: the server reads the files."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from parlance.dialects.shared.wire import WireModel
from parlance.models.gguf import GgufInfo


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


def capabilities(template: str | None) -> dict[str, Any]:
    """What the chat template shows the model was trained for."""
    source = template or ""
    out: dict[str, Any] = {"vision": False, "trained_for_tool_use": "tools" in source}
    if "reasoning_effort" in source:
        out["reasoning"] = {"allowed_options": ["off", "low", "medium", "high"],
                            "default": "medium"}
    elif "enable_thinking" in source:
        out["reasoning"] = {"allowed_options": ["off", "on"], "default": "on"}
    return out


def model_object(key: str, info: GgufInfo | None, size_bytes: int,
                 loaded: dict[str, Any] | None) -> dict[str, Any]:
    """`loaded`: the instance's applied config, None when the model is not loaded."""
    publisher = key.split("/", 1)[0] if "/" in key else (info and info.publisher) or "local"
    quantization = None
    if info is not None and info.quantization:
        bpw = info.bits_per_weight
        quantization = {"name": info.quantization,
                        "bits_per_weight": round(bpw, 2) if bpw is not None else None}
    return {
        "type": "llm",
        "publisher": publisher,
        "key": key,
        "display_name": (info.name if info and info.name else key),
        "architecture": info.architecture if info else None,
        "quantization": quantization,
        "size_bytes": size_bytes,
        "params_string": info.params_string if info else None,
        "loaded_instances": [] if loaded is None else [{"id": key, "config": loaded}],
        "max_context_length": (info.context_length if info and info.context_length
                               else (loaded or {}).get("context_length", 0)),
        "format": "gguf",
        "capabilities": capabilities(info.chat_template if info else None),
        "description": None,
    }
