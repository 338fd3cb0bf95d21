"""The generation routes: the one generic handler every dialect's route runs, its
WebSocket mode, and the `X-Parlance-*` request headers. The per-call machinery they use
is in `server/calls/`."""
