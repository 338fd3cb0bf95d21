"""Calls the client runs, other than plain functions: `custom_tool_call`,
`local_shell_call`, `shell_call` and `tool_search_call` items made of the model's
calls, and those items with their `*_output` answers read back from the input as
the conversation's calls and tool messages.

The model calls a shell or the tool search as a function with JSON arguments
(`tools.py` offers them so); the item is built from the whole arguments once the
call is complete. Arguments that do not fit the item's shape are kept as a plain
`function_call`, so nothing the model wrote is lost or invented.
"""

from __future__ import annotations

import json
from typing import Any

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message, ToolCall
from parlance.dialects.openai.responses.tools import (
    LOCAL_SHELL,
    SHELL,
    TOOL_SEARCH,
    ToolRef,
    model_name,
)

ID_PREFIX = {"custom_tool_call": "ctc_", "custom_tool_call_output": "ctco_",
             "local_shell_call": "lsh_", "local_shell_call_output": "lsho_",
             "shell_call": "sh_", "shell_call_output": "sho_",
             "tool_search_call": "tsc_", "tool_search_output": "tso_"}
CALLS = frozenset({"custom_tool_call", "local_shell_call", "shell_call", "tool_search_call"})
OUTPUTS = frozenset({"custom_tool_call_output", "local_shell_call_output", "shell_call_output",
                     "tool_search_output"})


# -- the model's calls as output items --------------------------------------------


def custom_call(item_id: str, call_id: str, ref: ToolRef) -> dict[str, Any]:
    """A `custom_tool_call` item, its input still to come."""
    item = {"type": "custom_tool_call", "id": item_id, "call_id": call_id, "name": ref.name,
            "input": "", "status": "in_progress"}
    return item | ({"namespace": ref.namespace} if ref.namespace else {})


def finished_call(ref: ToolRef, item_id: str, call_id: str,
                  arguments: str) -> dict[str, Any] | None:
    """The item of a whole shell or tool-search call; None when its arguments do not
    fit the item (the caller keeps it as a function call)."""
    try:
        args: Any = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return None
    if not isinstance(args, dict):
        return None
    base = {"id": item_id, "call_id": call_id, "status": "completed"}
    if ref.kind == "tool_search":
        return {"type": "tool_search_call", **base, "arguments": args, "execution": "client"}
    if ref.kind == "local_shell":
        command = args.get("command")
        if not _strings(command):
            return None
        action: dict[str, Any] = {
            "type": "exec", "command": command, "env": {},
            "timeout_ms": _integer(args.get("timeout_ms")), "user": None,
            "working_directory": _string(args.get("working_directory"))}
        return {"type": "local_shell_call", **base, "action": action}
    if ref.kind == "shell":
        commands = args.get("commands")
        if not _strings(commands):
            return None
        action = {"commands": commands, "timeout_ms": _integer(args.get("timeout_ms")),
                  "max_output_length": _integer(args.get("max_output_length"))}
        return {"type": "shell_call", **base, "action": action, "environment": None}
    return None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# -- the items back in the input --------------------------------------------------


def tool_call(item: dict[str, Any], where: str) -> ToolCall:
    """A call item as the call the model made (arguments as it wrote them)."""
    kind = item.get("type")
    # a tool search call may come without call_id (it is optional in OpenAI's types)
    call_id = _field(item, "call_id", where,
                     fallback="id" if kind == "tool_search_call" else None)
    if kind == "custom_tool_call":
        name = model_name(_field(item, "name", where), _string(item.get("namespace")))
        return ToolCall(call_id, name, str(item.get("input", "")), freeform=True)
    if kind == "tool_search_call":
        arguments = item.get("arguments")
        return ToolCall(call_id, TOOL_SEARCH,
                        arguments if isinstance(arguments, str) else json.dumps(arguments or {}))
    action = item.get("action")
    if not isinstance(action, dict):
        raise InvalidRequest(f"Missing required parameter: '{where}.action'.",
                             param=f"{where}.action", code="missing_required_parameter")
    if kind == "local_shell_call":
        args = {"command": action.get("command"),
                **{k: action[k] for k in ("working_directory", "timeout_ms")
                   if action.get(k) is not None}}
        return ToolCall(call_id, LOCAL_SHELL, json.dumps(args, ensure_ascii=False))
    args = {"commands": action.get("commands"),
            **{k: action[k] for k in ("timeout_ms", "max_output_length")
               if action.get(k) is not None}}
    return ToolCall(call_id, SHELL, json.dumps(args, ensure_ascii=False))


def tool_output(item: dict[str, Any], where: str) -> Message:
    """An output item as the tool message the model reads."""
    kind = item.get("type")
    output = item.get("output", "")
    if kind == "tool_search_output":  # its call_id is optional, as its call's is
        call_id = item.get("call_id")
        return Message("tool", _loaded_text(item),
                       tool_call_id=call_id if isinstance(call_id, str) else None)
    # a local shell's output names its call by `id` in OpenAI's own types
    call_id = _field(item, "call_id", where,
                     fallback="id" if kind == "local_shell_call_output" else None)
    if kind == "shell_call_output":
        text = _shell_text(output, where)
    elif isinstance(output, str):
        text = output
    else:
        text = parts_text(output, f"{where}.output")
    return Message("tool", text, tool_call_id=call_id)


def _loaded_text(item: dict[str, Any]) -> str:
    names = []
    for tool in item.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            names += [model_name(str(t.get("name")), str(tool.get("name")))
                      for t in tool.get("tools") or [] if isinstance(t, dict)]
        else:
            names.append(str(tool.get("name")))
    if not names:
        return "No tools matched."
    return "Loaded, and available to call from now on: " + ", ".join(names) + "."


def _shell_text(output: Any, where: str) -> str:
    """Each command's stdout, stderr and how it ended, in order."""
    if not isinstance(output, list):
        raise InvalidRequest(f"Invalid value for '{where}.output': expected a list of "
                             "command outputs.", param=f"{where}.output", code="invalid_value")
    parts = []
    for entry in output:
        entry = entry if isinstance(entry, dict) else {}
        outcome = entry.get("outcome")
        outcome = outcome if isinstance(outcome, dict) else {}
        ended = ("timed out" if outcome.get("type") == "timeout"
                 else f"exit code {outcome.get('exit_code')}")
        text = str(entry.get("stdout") or "")
        if entry.get("stderr"):
            text += f"\n[stderr]\n{entry['stderr']}"
        parts.append(f"{text}\n[{ended}]".lstrip("\n"))
    return "\n\n".join(parts)


def parts_text(parts: Any, where: str) -> str:
    """The text of a list of content parts (a message's, or a tool output's); any
    part that is not text is refused, naming it: the model reads text only."""
    if not isinstance(parts, list):
        raise InvalidRequest(f"Invalid value for '{where}': expected a string or a list of "
                             "content parts.", param=where, code="invalid_value")
    texts = []
    for i, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            texts.append(str(part.get("text", "")))
        elif kind == "refusal":
            texts.append(str(part.get("refusal", "")))
        else:
            raise InvalidRequest(
                f"Content part type '{kind}' is not supported by this model (text only: the "
                "model has no vision, audio or file input).", param=f"{where}[{i}]",
                code="unsupported_content")
    return "".join(texts)


def _field(item: dict[str, Any], key: str, where: str, *, fallback: str | None = None) -> str:
    value = item.get(key)
    if (not isinstance(value, str) or not value) and fallback is not None:
        value = item.get(fallback)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"Missing required parameter: '{where}.{key}'.",
                             param=f"{where}.{key}", code="missing_required_parameter")
    return value
