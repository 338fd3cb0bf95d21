"""Server-side tools: MCP servers the server connects to and runs calls on, for
LM Studio `integrations` (and, later, Responses `mcp` tools)."""
