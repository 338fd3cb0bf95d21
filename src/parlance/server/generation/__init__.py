"""The generation pipeline: the one handler, its supervision (deadline, drain, client
leaving), the stream transport, and the other transports (WebSocket mode, background runs)."""
