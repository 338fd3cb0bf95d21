"""Outbound HTTP to URLs a client named (MCP servers, model downloads): which addresses
count as public, and clients that connect only to those. Imports only `core`, so both
`integrations` and `models` can use it."""
