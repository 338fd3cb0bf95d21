"""What the operator allows: per-request MCP servers (off by default), private
hosts they may reach, the servers configured in `mcp.json`, and the loop's limits."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ConfiguredServer:
    """An `mcp.json` entry: a command to run over stdio, or a URL (with headers)."""

    label: str
    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class IntegrationSettings:
    allow_request_servers: bool = False  # LM Studio's "Allow per-request MCPs"
    allowed_hosts: tuple[str, ...] = ()  # private/loopback hosts request servers may reach
    configured: Mapping[str, ConfiguredServer] = field(default_factory=dict)
    max_rounds: int = 8  # model calls that may end in tool calls; then it must answer
    connect_timeout: float = 15.0
    call_timeout: float = 60.0

    def plugin(self, plugin_id: str) -> ConfiguredServer | None:
        """`mcp/<label>` (LM Studio's id for mcp.json servers) or the bare label."""
        return self.configured.get(plugin_id.removeprefix("mcp/"))


def load_mcp_json(path: Path) -> dict[str, ConfiguredServer]:
    """Read an `mcp.json` (`{"mcpServers": {label: {command, args, env} | {url, headers}}}`,
    the format LM Studio, Cursor and Claude Desktop share)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read MCP config {path}: {exc}") from exc
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ValueError(f"{path}: expected an object with \"mcpServers\"")
    out = {}
    for label, entry in servers.items():
        if not isinstance(entry, dict) or not (entry.get("url") or entry.get("command")):
            raise ValueError(f"{path}: server '{label}' needs a \"url\" or a \"command\"")
        out[label] = ConfiguredServer(
            label=label, url=entry.get("url"), command=entry.get("command"),
            args=tuple(str(a) for a in entry.get("args", ())),
            env=tuple((str(k), str(v)) for k, v in (entry.get("env") or {}).items()),
            headers=tuple((str(k), str(v)) for k, v in (entry.get("headers") or {}).items()))
    return out
