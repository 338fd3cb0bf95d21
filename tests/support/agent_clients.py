"""How the agent clients the client tests install are pointed at a server: their
versions, Claude Code's environment and Codex's provider config. Shared by the client
tests and `bench/record_agent_session.py`, which records what they send."""

from __future__ import annotations

import os
from pathlib import Path

CLAUDE_CODE_VERSION = "2.1.197"
CODEX_VERSION = "0.169.0"
TURN_TIMEOUT = 1800  # seconds, for a busy machine


def claude_env(base_url: str, home: Path) -> dict[str, str]:
    """`CLAUDE_STREAM_IDLE_TIMEOUT_MS` is Claude Code's own setting for slow local models:
    its watchdog ends a stream that sends no content for 5 minutes (it ignores `ping`)."""
    return {**os.environ,
            "HOME": str(home),  # a fresh ~/.claude: no user settings, no login
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": "unused",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_STREAM_IDLE_TIMEOUT_MS": str(TURN_TIMEOUT * 1000)}


def codex_config(base_url: str, *, websockets: bool, model: str = "smollm2-135m-instruct",
                 extra: tuple[str, ...] = ()) -> str:
    """`extra`: top-level settings lines, e.g. `model_auto_compact_token_limit = 1000`."""
    return "\n".join([
        f'model = "{model}"',
        'model_provider = "parlance"',
        *extra,
        "",
        "[model_providers.parlance]",
        'name = "Parlance"',
        f'base_url = "{base_url}/v1"',
        'wire_api = "responses"',
        f"supports_websockets = {'true' if websockets else 'false'}",
        "",
    ])
