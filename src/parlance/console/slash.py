"""The chat's own commands: lines that start with `/`."""

from __future__ import annotations

from typing import Literal, Protocol

from rich.console import Console

HELP = """\
/system TEXT   the system prompt from now on (/system alone clears it)
/reset         forget the conversation (the system prompt stays)
/model NAME    talk to another model (/model alone names the current one)
/mcp LABEL...  the operator's MCP servers (mcp.json) the model may use from now on;
               /mcp alone lists them and their tools, /mcp none stops using them
/help          this list
/exit          leave (so does Ctrl-D); Ctrl-C stops an answer

A line ending in \\ continues on the next line; a block between two \"\"\" lines is
one message."""


class Chat(Protocol):
    console: Console
    model: str | None
    system: str | None
    mcp: list[str]
    mcp_tools: dict[str, list[str]]

    def reset(self) -> None: ...

    def pick_model(self, name: str) -> str | None: ...


def run_command(chat: Chat, line: str) -> Literal["exit"] | None:
    name, _, rest = line.strip().partition(" ")
    rest = rest.strip()
    out = chat.console
    if name in ("/exit", "/quit", "/bye"):
        return "exit"
    if name == "/help":
        out.print(HELP, markup=False, highlight=False)
    elif name == "/reset":
        chat.reset()
        out.print("Conversation cleared.", style="dim")
    elif name == "/system":
        chat.system = rest or None
        out.print(f"System prompt {'set' if rest else 'cleared'}.", style="dim", markup=False)
    elif name == "/model":
        if rest and (refused := chat.pick_model(rest)) is not None:
            out.print(f"Model unchanged: {refused}", style="yellow", markup=False)
            return None
        out.print(f"Model: {chat.model or 'the server default'}", style="dim", markup=False)
    elif name == "/mcp":
        if rest:
            labels = [label for label in rest.replace(",", " ").split() if label]
            chat.mcp = [] if labels == ["none"] else list(dict.fromkeys(labels))
        out.print(mcp_listing(chat), style="dim", markup=False, highlight=False)
    else:
        out.print(f"Unknown command {name}; /help lists them.", style="yellow", markup=False)
    return None


def mcp_listing(chat: Chat) -> str:
    if not chat.mcp:
        return "MCP servers: none (/mcp LABEL names one of the server's mcp.json)"
    lines = ["MCP servers (run on the server, without asking):"]
    for label in chat.mcp:
        tools = chat.mcp_tools.get(label)
        listed = ", ".join(tools) if tools else "tools listed with the next answer"
        lines.append(f"  {label}: {listed}")
    return "\n".join(lines)
