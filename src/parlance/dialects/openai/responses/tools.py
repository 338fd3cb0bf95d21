"""Every Responses tool type at the wire, and what the model is offered of them.

- `function`: a function, as in Chat. `namespace`: a group of functions (and custom
  tools), offered as `namespace.name` (the way OpenAI's own models address them);
  their calls come back with `name` and `namespace` apart.
- `custom`: a freeform tool (raw text input, constrained by its Lark or regex
  grammar when it has one), whose calls are `custom_tool_call` items.
- `local_shell` and `shell`: client-executed shells, offered as functions whose
  calls come back as `local_shell_call` / `shell_call` items.
- `tool_search` executed by the client, and tools with `defer_loading`: the deferred
  tools are not offered until a `tool_search_output` input item loads them; the
  model searches by calling `tool_search` (a `tool_search_call` item). Without a
  client-executed search (this server cannot search for it), deferred tools are
  offered at once.
- Hosted tools this server cannot run (`web_search`, `file_search`,
  `code_interpreter`, `image_generation`, `computer_use_preview`, …) are accepted
  and echoed, never offered. `mcp` tools are the server's own (`mcp.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from parlance.core.errors import InvalidRequest
from parlance.core.tools import InputGrammar, ToolSpec
from parlance.dialects.openai.responses.mcp import McpTool
from parlance.dialects.openai.tools import FunctionDef, FunctionName
from parlance.dialects.shared.wire import WireModel, param_path

# -- the wire -------------------------------------------------------------------------


class FunctionTool(FunctionDef):
    """Responses tools are flat: Chat's function definition with its type beside it."""

    type: Literal["function"]
    defer_loading: bool | None = None

    def echoed(self) -> dict[str, Any]:
        out = {"type": "function", "name": self.name, "description": self.description,
               "parameters": self.parameters, "strict": bool(self.strict)}
        return out | ({"defer_loading": True} if self.defer_loading else {})


class TextFormat(WireModel):
    type: Literal["text"]


class GrammarFormat(WireModel):
    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    definition: Annotated[str, Field(min_length=1)]


class CustomTool(WireModel):
    type: Literal["custom"]
    name: FunctionName
    description: str | None = None
    format: Annotated[TextFormat | GrammarFormat, Field(discriminator="type")] | None = None
    defer_loading: bool | None = None

    def echoed(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


Member = Annotated[FunctionTool | CustomTool, Field(discriminator="type")]


class NamespaceTool(WireModel):
    type: Literal["namespace"]
    name: FunctionName
    description: str | None = None
    tools: Annotated[list[Member], Field(min_length=1)]

    def echoed(self) -> dict[str, Any]:
        return {"type": "namespace", "name": self.name, "description": self.description or "",
                "tools": [t.echoed() for t in self.tools]}


class ToolSearchTool(WireModel):
    type: Literal["tool_search"]
    execution: Literal["server", "client"] | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None

    def echoed(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class LocalShellTool(WireModel):
    type: Literal["local_shell"]

    def echoed(self) -> dict[str, Any]:
        return {"type": "local_shell"}


class ShellTool(WireModel):
    type: Literal["shell"]
    environment: dict[str, Any] | None = None

    def echoed(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class HostedTool(WireModel):
    """A tool OpenAI runs itself: accepted and echoed as sent, never offered."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    type: Literal["web_search", "web_search_2025_08_26", "web_search_preview",
                  "web_search_preview_2025_03_11", "file_search", "computer",
                  "computer_use_preview", "code_interpreter", "image_generation",
                  "programmatic_tool_calling", "apply_patch"]

    def echoed(self) -> dict[str, Any]:
        return self.model_dump()


Tool = Annotated[FunctionTool | CustomTool | NamespaceTool | ToolSearchTool | LocalShellTool
                 | ShellTool | HostedTool | McpTool, Field(discriminator="type")]
# What a `tool_search_output` item loads.
Loaded = Annotated[FunctionTool | CustomTool | NamespaceTool, Field(discriminator="type")]
_LOADED: TypeAdapter[list[Loaded]] = TypeAdapter(list[Loaded])


class NamedFunction(WireModel):
    type: Literal["function"]
    name: str


class NamedCustom(WireModel):
    type: Literal["custom"]
    name: str


class NamedShell(WireModel):
    type: Literal["shell"]


class NamedHosted(WireModel):
    """Forcing a hosted tool: refused, the server cannot run it."""

    type: Literal["file_search", "web_search", "web_search_preview",
                  "web_search_preview_2025_03_11", "computer", "computer_use_preview",
                  "code_interpreter", "image_generation", "apply_patch"]


# -- what the model is offered ------------------------------------------------------

Kind = Literal["function", "custom", "local_shell", "shell", "tool_search"]


@dataclass(frozen=True, slots=True)
class ToolRef:
    """What the model's call to a tool is, in the client's terms."""

    kind: Kind
    name: str
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class Toolset:
    specs: tuple[ToolSpec, ...]  # offered to the model
    refs: Mapping[str, ToolRef]  # by the name the model calls

    def ref(self, name: str) -> ToolRef:
        return self.refs.get(name) or ToolRef("function", name)


LOCAL_SHELL = "local_shell"
SHELL = "shell"
TOOL_SEARCH = "tool_search"
_BUILT_IN: dict[str, tuple[str, dict[str, Any]]] = {
    LOCAL_SHELL: ("Run a command on the user's machine; its output is the answer.", {
        "type": "object", "properties": {
            "command": {"type": "array", "items": {"type": "string"},
                        "description": 'The program and its arguments, e.g. ["ls", "-la"].'},
            "working_directory": {"type": "string"},
            "timeout_ms": {"type": "integer"}},
        "required": ["command"]}),
    SHELL: ("Run shell commands in the user's environment, one after another; their "
            "output is the answer.", {
                "type": "object", "properties": {
                    "commands": {"type": "array", "items": {"type": "string"}},
                    "timeout_ms": {"type": "integer"},
                    "max_output_length": {"type": "integer"}},
                "required": ["commands"]}),
}
SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object", "properties": {"query": {
        "type": "string", "description": "What the tools you need should do."}},
    "required": ["query"]}
SEARCH_DESCRIPTION = ("Find tools that are not loaded yet: the tools that match are "
                      "available from your next turn.")


class _Collector:
    def __init__(self) -> None:
        self.specs: list[ToolSpec] = []
        self.refs: dict[str, ToolRef] = {}
        self.deferred: list[tuple[ToolSpec, ToolRef]] = []

    def add(self, spec: ToolSpec, ref: ToolRef, at: str, *, deferred: bool = False,
            loaded: bool = False) -> None:
        """`loaded`: by a tool search; a tool already offered stays as it is, and a
        deferred one of the request's is offered."""
        waiting = next((d for d in self.deferred if d[0].name == spec.name), None)
        if spec.name in self.refs or waiting is not None:
            if not loaded:
                raise InvalidRequest(f"Tool names must be unique; '{spec.name}' appears "
                                     "twice.", param=f"{at}.name")
            if waiting is not None:
                self.deferred.remove(waiting)
                self.specs.append(waiting[0])
                self.refs[spec.name] = waiting[1]
            return
        if deferred:
            self.deferred.append((spec, ref))
        else:
            self.specs.append(spec)
            self.refs[spec.name] = ref

    def member(self, tool: FunctionTool | CustomTool, at: str, namespace: str | None = None,
               *, loaded: bool = False) -> None:
        name = f"{namespace}.{tool.name}" if namespace else tool.name
        description = tool.description or ""
        if isinstance(tool, FunctionTool):
            spec = ToolSpec(name, description,
                            tool.parameters if tool.parameters is not None
                            else {"type": "object", "properties": {}},
                            bool(tool.strict), param=f"{at}.parameters")
            kind: Kind = "function"
        else:
            fmt = tool.format
            grammar = (InputGrammar(fmt.syntax, fmt.definition)
                       if isinstance(fmt, GrammarFormat) else None)
            spec = ToolSpec(name, description, param=f"{at}.format.definition",
                            freeform=True, grammar=grammar)
            kind = "custom"
        self.add(spec, ToolRef(kind, tool.name, namespace), at,
                 deferred=bool(tool.defer_loading) and not loaded, loaded=loaded)

    def tool(self, tool: Loaded, at: str, *, loaded: bool = False) -> None:
        if isinstance(tool, NamespaceTool):
            for j, member in enumerate(tool.tools):
                self.member(member, f"{at}.tools[{j}]", tool.name, loaded=loaded)
        else:
            self.member(tool, at, loaded=loaded)


def toolset(tools: Sequence[Any], context: Iterable[dict[str, Any]] = ()) -> Toolset:
    """The tools the model is offered, and how its calls map back: the request's
    tools, deferred ones only once a `tool_search_output` in `context` loaded them."""
    found = _Collector()
    search: ToolSearchTool | None = None
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        if isinstance(tool, FunctionTool | CustomTool | NamespaceTool):
            found.tool(tool, at)
        elif isinstance(tool, LocalShellTool | ShellTool):
            description, parameters = _BUILT_IN[tool.type]
            found.add(ToolSpec(tool.type, description, parameters, param=at),
                      ToolRef(tool.type, tool.type), at)
        elif isinstance(tool, ToolSearchTool) and tool.execution == "client":
            search = tool
            found.add(ToolSpec(TOOL_SEARCH, "", tool.parameters or SEARCH_PARAMETERS,
                               param=f"{at}.parameters"), ToolRef("tool_search", TOOL_SEARCH),
                      at)
    for i, item in enumerate(context):
        if item.get("type") == "tool_search_output":
            for j, tool in enumerate(_loaded(item, i)):
                found.tool(tool, f"input[{i}].tools[{j}]", loaded=True)
    specs = found.specs
    if search is None:  # nothing can load them: offered at once
        specs += [spec for spec, _ in found.deferred]
        found.refs.update((spec.name, ref) for spec, ref in found.deferred)
    else:
        waiting = [s.name for s, _ in found.deferred if s.name not in found.refs]
        description = search.description or SEARCH_DESCRIPTION
        if waiting:
            description += " Tools that can be loaded: " + ", ".join(waiting) + "."
        specs = [ToolSpec(s.name, description, s.parameters, param=s.param)
                 if s.name == TOOL_SEARCH else s for s in specs]
    return Toolset(tuple(specs), found.refs)


def _loaded(item: dict[str, Any], i: int) -> list[Loaded]:
    try:
        return _LOADED.validate_python(item.get("tools") or [], strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = param_path(("tools", *first["loc"]), item)
        raise InvalidRequest(f"Invalid value for 'input[{i}].{where}': {first['msg']}.",
                             param=f"input[{i}].{where}", code="invalid_value") from exc


def model_name(name: str, namespace: str | None) -> str:
    """The name the model knows a (namespaced) tool by."""
    return f"{namespace}.{name}" if namespace else name
