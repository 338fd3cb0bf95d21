"""A loopback MCP server offering seed 000's `model_search` tool, for trying the
LM Studio API's server-side tools: `python examples/hub_mcp_server.py [port]`
serves streamable HTTP at http://127.0.0.1:<port>/mcp (default port 8765)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import mcp_server  # noqa: E402  (the same server the tests use)

if __name__ == "__main__":
    running = mcp_server.start(int(sys.argv[1]) if len(sys.argv) > 1 else 8765)
    print(f"MCP server on {running.url} (tools: model_search, add, explode)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        running.stop()
