"""Neutral tool, structured-output and reasoning requests, as every dialect parses them.

`param` on a spec is where the client put it (e.g. `tools[0].function.parameters`),
so an engine that rejects a schema can name the field in the client's own terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class InputGrammar:
    """The language a freeform tool's input belongs to: a Lark grammar (llguidance's
    dialect of it) or a regular expression the whole input must match."""

    syntax: Literal["lark", "regex"]
    definition: str


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call; `parameters` is its JSON Schema.

    A `freeform` tool takes raw text instead of JSON arguments (OpenAI's custom
    tools): the model writes the input itself, constrained by `grammar` when there
    is one, and the call's arguments are that text. `param` names the tool in the
    client's request (for a freeform tool, where its grammar is)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object",
                                                                "properties": {}})
    strict: bool = False
    param: str = "tools"
    freeform: bool = False
    grammar: InputGrammar | None = None


@dataclass(frozen=True, slots=True)
class ToolProvider:
    """Who runs a server-side tool: an MCP server the request named (`ephemeral_mcp`,
    `label` its server_label) or one the operator configured (`plugin`, `label` its id)."""

    kind: Literal["ephemeral_mcp", "plugin"]
    label: str


@dataclass(frozen=True, slots=True)
class Approval:
    """Which of a server's tools wait for the client's go-ahead before they run
    (OpenAI's `require_approval`). A tool in `always` (by name, or any read-only tool
    when `always_read_only`) waits; one in `never` runs at once; `default` decides
    the rest. The default rule never waits (LM Studio has no approvals)."""

    default: bool = False
    always: frozenset[str] = frozenset()
    never: frozenset[str] = frozenset()
    always_read_only: bool = False
    never_read_only: bool = False

    def required(self, name: str, read_only: bool = False) -> bool:
        if name in self.always or (read_only and self.always_read_only):
            return True
        if name in self.never or (read_only and self.never_read_only):
            return False
        return self.default


@dataclass(frozen=True, slots=True)
class ApprovedCall:
    """A server-side call the model made in an earlier turn and the client has since
    approved: it runs before the model continues. `approval_id` names the approval."""

    call_id: str
    name: str
    arguments: str
    approval_id: str


@dataclass(frozen=True, slots=True)
class ToolServerRef:
    """A server whose tools the server itself runs for this request: a plugin id the
    operator configured, or an MCP server URL the request named. `allowed_tools`
    None allows every tool it lists (`allow_read_only`: and every tool the server
    marks read-only). `param` names it in the client's request."""

    provider: ToolProvider
    url: str | None = None  # ephemeral MCP servers only
    allowed_tools: tuple[str, ...] | None = None
    headers: tuple[tuple[str, str], ...] = ()
    param: str = "integrations"
    approval: Approval = Approval()
    allow_read_only: bool = False


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """`none`: never call; `auto`: the model decides; `required`: at least one call;
    `named`: exactly the function `name`."""

    mode: Literal["none", "auto", "required", "named"] = "auto"
    name: str | None = None

    @property
    def forced(self) -> bool:
        return self.mode in ("required", "named")


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """Structured output: `json_object` (any object) or `json_schema` (`schema`)."""

    kind: Literal["json_object", "json_schema"]
    schema: dict[str, Any] | None = None
    name: str | None = None
    strict: bool = False
    param: str = "response_format"


class ReasoningEffort(StrEnum):
    """How hard a reasoning model should think. NONE turns thinking off; ON is
    LM Studio's "on" (the model's default amount)."""

    NONE = "none"
    MINIMAL = "minimal"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    ON = "on"


@dataclass(frozen=True, slots=True)
class ReasoningRequest:
    effort: ReasoningEffort
    param: str = "reasoning_effort"
    # A preference, not a demand (Anthropic's `thinking`, which Claude Code always sends):
    # a model that cannot honour it answers as it can instead of refusing the request.
    best_effort: bool = False
    # At most this many tokens of reasoning (Anthropic's `budget_tokens`): the engine then
    # ends the reasoning itself and the answer follows.
    budget_tokens: int | None = None
