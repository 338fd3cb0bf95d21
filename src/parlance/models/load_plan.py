"""The settings a model is loaded with, checked before anything is allocated.

Whoever asks for a load (LM Studio's load endpoint, `context_length` on a chat that
loads a cold model, `parlance serve --ctx-size/--parallel`) goes through `plan_load`:
each value is resolved against the server's defaults, held to a range (cells that fit
llama.cpp's uint32 `n_ctx`; a context beyond the one the model was trained for is
allowed, as llama.cpp allows it, because agent clients send prompts longer than a small
model's training context and memory is what really bounds it),
and the whole load's memory is estimated, so `check_fits` can refuse it against the
memory budget and the memory the machine has free, with a 400 that names the parameter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from parlance.core.errors import InvalidRequest
from parlance.models.memory_estimate import (
    KV_CELL_PAD,
    MemoryEstimate,
    ModelShape,
    estimate,
    kv_cells,
    model_shape,
)
from parlance.models.registry import ModelSpec

__all__ = ["LoadDefaults", "LoadOptions", "LoadPlan", "check_fits", "plan_load", "usable_memory"]

MIN_CONTEXT = 64
DEFAULT_CONTEXT = 4096  # when neither the client, the server nor the preset chose one
# Tokens per sequence; memory refuses far less on most machines. Times MAX_PARALLEL
# it stays within llama.cpp's uint32 n_ctx.
MAX_CONTEXT = 1 << 22
MAX_PARALLEL = 64
DEFAULT_EVAL_BATCH = 512
MAX_EVAL_BATCH = 8192
MIN_MEMORY_MARGIN = 256 << 20  # what is left to the rest of the machine, at least
_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """Load settings a client may choose (LM Studio's load endpoint, `context_length`
    on a chat that loads the model). None: the model's or the server's default."""

    context_length: int | None = None
    eval_batch_size: int | None = None
    parallel: int | None = None


@dataclass(frozen=True, slots=True)
class LoadDefaults:
    """The server's own load settings (`parlance serve` flags)."""

    context_length: int | None = None  # None: the preset's, else DEFAULT_CONTEXT
    parallel: int = 4
    eval_batch_size: int = DEFAULT_EVAL_BATCH
    kv_unified: bool = False


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """Every setting of one load, resolved and in range, and what it will cost."""

    context_length: int  # tokens each sequence may use
    parallel: int
    eval_batch_size: int
    kv_unified: bool
    memory: MemoryEstimate
    shape: ModelShape
    chosen: LoadOptions  # what the client asked for (names the parameter to blame)


def _in_range(value: int, low: int, high: int, param: str, why: str) -> None:
    if not low <= value <= high:
        raise InvalidRequest(f"{param} must be between {low} and {high} ({why}); got {value}.",
                             param=param, code="invalid_value")


def plan_load(spec: ModelSpec, options: LoadOptions, defaults: LoadDefaults) -> LoadPlan:
    """Resolve and range-check a load; InvalidRequest naming the parameter otherwise."""
    shape = model_shape(_path(spec))
    trained = shape.trained_context
    context = _first(options.context_length, defaults.context_length, spec.ctx_size)
    if context is None:  # nobody chose: the default, within what the model was trained for
        context = min(DEFAULT_CONTEXT, trained or DEFAULT_CONTEXT)
    _in_range(context, MIN_CONTEXT, MAX_CONTEXT, "context_length", "tokens per sequence")
    parallel = _first(options.parallel, defaults.parallel) or 0
    _in_range(parallel, 1, MAX_PARALLEL, "parallel", "sequences decoded together")
    batch = _first(options.eval_batch_size, defaults.eval_batch_size) or 0
    # Each step decodes one token of every slot in one batch, so it must hold them all.
    _in_range(batch, parallel, MAX_EVAL_BATCH, "eval_batch_size",
              "at least one token per parallel slot")
    unified = defaults.kv_unified
    memory = estimate(shape, context_length=context, parallel=parallel,
                      eval_batch_size=batch, unified=unified)
    if spec.draft is not None:  # a context of the same cells, slots and batch
        draft = estimate(model_shape(_path(spec.draft)), context_length=context,
                         parallel=parallel, eval_batch_size=batch, unified=unified)
        memory = replace(memory, draft=draft)
    return LoadPlan(context, parallel, batch, unified, memory, shape, options)


def _first(*values: int | None) -> int | None:
    """The first value someone chose (0 is a choice, and out of range)."""
    return next((v for v in values if v is not None), None)


def _path(spec: ModelSpec) -> Path | None:
    try:
        return spec.locate()
    except (OSError, ValueError):  # nothing to read; the loader will say why
        return None


def usable_memory(available: int) -> int:
    """What a load may take of the memory the kernel says is available: a tenth (at least
    MIN_MEMORY_MARGIN) stays with the rest of the machine."""
    return available - max(MIN_MEMORY_MARGIN, available // 10)


def _largest_context(plan: LoadPlan, limit: int) -> int | None:
    """The largest context_length whose load would stay within `limit` bytes."""
    cell = plan.shape.kv_cell_bytes
    if not cell:
        return None
    slots = 1 if plan.kv_unified else plan.parallel
    memory, draft = plan.memory, plan.memory.draft
    room = limit - memory.weights - memory.compute
    if draft is not None:  # its cells grow with the context too
        room -= draft.weights + draft.compute
        cell += draft.kv // kv_cells(plan.context_length, plan.parallel, plan.kv_unified)
    context = room // (cell * slots) // KV_CELL_PAD * KV_CELL_PAD
    return context if context >= MIN_CONTEXT else None


def _blamed(plan: LoadPlan) -> str:
    """The parameter to name when a load is too big: the client's, else the model."""
    chosen = plan.chosen
    if chosen.context_length is not None:
        return "context_length"
    if chosen.parallel is not None:
        return "parallel"
    if chosen.eval_batch_size is not None:
        return "eval_batch_size"
    return "model"


def check_fits(plan: LoadPlan, model_id: str, *, budget: int | None,
               available: int | None, freeable: int = 0) -> None:
    """Refuse a load larger than the memory budget, or than the memory available plus
    `freeable` (what unloading idle models would give back)."""
    need = plan.memory.total
    limits = []
    if budget is not None:
        limits.append((budget, "this server's memory budget"))
    if available is not None:
        limits.append((usable_memory(available) + freeable, "the memory this machine has free"))
    for limit, what in limits:
        if need <= limit:
            continue
        parts = (f"{plan.memory.weights / _MIB:.0f} MiB of weights, "
                 f"{plan.memory.kv / _MIB:.0f} MiB of KV cache for context_length "
                 f"{plan.context_length} x parallel {plan.parallel}, "
                 f"{plan.memory.compute / _MIB:.0f} MiB of compute buffers")
        if plan.memory.draft is not None:
            parts += f", {plan.memory.draft.total / _MIB:.0f} MiB for the draft model"
        largest = _largest_context(plan, limit)
        hint = (f" The largest context_length that fits is {largest}." if largest
                else "")
        raise InvalidRequest(
            f"Loading '{model_id}' would take about {need / _MIB:.0f} MiB ({parts}), more "
            f"than {what} ({max(limit, 0) / _MIB:.0f} MiB).{hint}",
            param=_blamed(plan), code="insufficient_memory")
