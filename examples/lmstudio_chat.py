"""Seed 000 as a plain httpx client: stream `POST /api/v1/chat` with an ephemeral
MCP server and print each event as it arrives, then continue the chat statefully.

    python examples/hub_mcp_server.py &            # the MCP server, on 127.0.0.1:8765
    parlance serve --allow-request-mcp --mcp-allow-host 127.0.0.1 &
    python examples/lmstudio_chat.py [base_url] [mcp_url]
"""

from __future__ import annotations

import json
import sys

import httpx

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
MCP = sys.argv[2] if len(sys.argv) > 2 else "http://127.0.0.1:8765/mcp"


def stream_chat(client: httpx.Client, body: dict) -> dict:
    """Print the events of one streamed chat; return chat.end's result."""
    result: dict = {}
    with client.stream("POST", f"{BASE}/api/v1/chat", json={**body, "stream": True}) as response:
        response.raise_for_status()
        event = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: "):])
                if event in ("message.delta", "reasoning.delta"):
                    print(data["content"], end="", flush=True)
                else:
                    print(f"\n[{event}] " + json.dumps(
                        {k: v for k, v in data.items() if k not in ("type", "result")}))
                if event == "chat.end":
                    result = data["result"]
    return result


def main() -> None:
    with httpx.Client(timeout=120) as client:
        first = stream_chat(client, {
            "model": "smollm2-135m-instruct",
            "input": "What is the top trending model on hugging face? Use model_search.",
            "integrations": [{"type": "ephemeral_mcp", "server_label": "huggingface",
                              "server_url": MCP, "allowed_tools": ["model_search"]}],
            "temperature": 0,
            # Parlance extensions: SmolLM2 rarely calls a tool unless it has to
            "tool_choice": "required", "parallel_tool_calls": False,
        })
        print("\nstats:", first["stats"])
        second = client.post(f"{BASE}/api/v1/chat", json={
            "model": "smollm2-135m-instruct", "input": "Say that again, briefly.",
            "previous_response_id": first["response_id"], "temperature": 0}).json()
        print("follow-up:", second["output"])


if __name__ == "__main__":
    main()
