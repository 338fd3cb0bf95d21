"""One call's life, whatever route serves it: its model lease, its supervision (deadline,
drain, a client that leaves), the stream transport (framing, keepalive), its stored
conversation, its tool servers, background runs and token counting. Below both
`generation/` (the dialects' handler) and `endpoints/` (the other routes)."""
