"""Typed domain errors.

Engines and dialect parsers raise these; each dialect renders them in its own
envelope, so no layer ever matches error *text*. Each class carries the HTTP status
most APIs answer it with (`status`); a dialect overrides only where its API answers
otherwise (`dialects/*/errors.py`).

    ParlanceError
    ├── InvalidRequest          bad field, type or value (param names the field)
    ├── PayloadTooLarge         the body exceeds the server's size limit
    ├── AuthenticationFailed    missing or wrong API key
    ├── Forbidden               a browser request from a foreign origin or for a foreign host
    ├── ModelNotFound           no model by that id or alias
    ├── ModelUnusable           the model's file cannot be loaded (422)
    ├── RouteNotFound           no such endpoint
    ├── ResourceNotFound        no stored object by that id
    ├── MethodNotAllowed        the endpoint exists, not with this method
    ├── ContextOverflow         prompt + max tokens do not fit the context
    ├── Overloaded              admission queue full (carries retry_after)
    ├── RequestTimeout          ran past the request timeout
    ├── Cancelled               the client cancelled it (a background response)
    ├── Unavailable             the server cannot serve this now (503)
    │   ├── ServerShuttingDown  draining before exit: new work refused, late work ended
    │   ├── ModelUnloaded       the model went away while the request was running
    │   └── TooManyConnections  the connection limit is reached
    ├── ToolServerUnreachable   an MCP server the request named cannot be used
    │   └── ToolServerFailed    the operator's configured MCP server (a plugin) failed
    ├── NotImplementedHere      a documented feature this server does not offer
    ├── InsufficientStorage     the server's disk has no room for it (507)
    └── EngineFailure           the engine broke while generating
        └── UpstreamFailure     an upstream server failed the request (502)
"""

from __future__ import annotations


class ParlanceError(Exception):
    """Base of every error a client can be told about. `kind` names it in the access
    log; `retry_after` (seconds) is sent as Retry-After by every dialect."""

    kind = "internal"
    status = 500
    retry_after: float | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class InvalidRequest(ParlanceError):
    kind = "invalid_request"
    status = 400


class PayloadTooLarge(ParlanceError):
    kind = "payload_too_large"
    status = 413

    def __init__(self, message: str):
        super().__init__(message, code="payload_too_large")


class AuthenticationFailed(ParlanceError):
    kind = "authentication"
    status = 401


class Forbidden(ParlanceError):
    kind = "forbidden"
    status = 403


class ModelNotFound(ParlanceError):
    kind = "model_not_found"
    status = 404

    def __init__(self, model: str):
        super().__init__(
            f"The model '{model}' does not exist or is not served here.",
            param="model",
            code="model_not_found",
        )
        self.model = model


class ModelUnusable(ParlanceError):
    """The model exists, and its file is no model llama.cpp can load (truncated, corrupt,
    an architecture it does not know): the request names a model this server cannot
    run. The message never names a path on the server (the log does)."""

    kind = "model_unusable"
    status = 422


class RouteNotFound(ParlanceError):
    kind = "route_not_found"
    status = 404


class ResourceNotFound(ParlanceError):
    """No stored object (a response, a chat) by that id."""

    kind = "not_found"
    status = 404


class MethodNotAllowed(ParlanceError):
    kind = "method_not_allowed"
    status = 405


class ContextOverflow(ParlanceError):
    kind = "context_overflow"
    status = 400


class Overloaded(ParlanceError):
    kind = "overloaded"
    status = 429

    def __init__(self, message: str, *, retry_after: float = 1.0):
        super().__init__(message, code="queue_full")
        self.retry_after = retry_after


class RequestTimeout(ParlanceError):
    kind = "timeout"
    status = 504

    def __init__(self, message: str = "The request ran past the server's request timeout."):
        super().__init__(message, code="request_timeout")


class Cancelled(ParlanceError):
    """Not a failure: the client asked to stop it. The stream ends as cancelled."""

    kind = "cancelled"
    status = 500

    def __init__(self, message: str = "The response was cancelled."):
        super().__init__(message, code="cancelled")


class Unavailable(ParlanceError):
    """Nothing wrong with the request: the server cannot serve it now (503)."""

    kind = "unavailable"
    status = 503


class ServerShuttingDown(Unavailable):
    def __init__(self, message: str = "The server is shutting down; retry once it is "
                 "back (or against another instance)."):
        super().__init__(message, code="server_shutting_down")


class ModelUnloaded(Unavailable):
    def __init__(self, message: str = "The model was unloaded while this request was "
                 "running."):
        super().__init__(message, code="model_unloaded")


class TooManyConnections(Unavailable):
    def __init__(self, limit: int):
        super().__init__(f"The server has reached its limit of {limit} open connections "
                         "(parlance serve --max-connections); retry shortly.",
                         code="too_many_connections")


class ToolServerUnreachable(ParlanceError):
    """An MCP server the request named cannot be used (not allowed, refused by the
    address guard, unreachable, failing): the request's fault. `configured`: the
    request named the operator's own server (a plugin) rather than giving a URL."""

    kind = "tool_server"
    status = 400

    def __init__(self, message: str, *, configured: bool, param: str | None = None):
        super().__init__(message, param=param,
                         code="plugin_connection_error" if configured else "mcp_connection_error")


class ToolServerFailed(ToolServerUnreachable):
    """The operator's configured MCP server (a plugin) failed: the server's fault, not
    the request's."""

    kind = "tool_server_failed"
    status = 500

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message, configured=True, param=param)


class NotImplementedHere(ParlanceError):
    kind = "not_implemented"
    status = 501


class InsufficientStorage(ParlanceError):
    """Nothing wrong with the request: the disk keeps no room for what it asks (507)."""

    kind = "insufficient_storage"
    status = 507


class EngineFailure(ParlanceError):
    kind = "engine_failure"
    status = 500

    def __init__(self, message: str, *, code: str = "engine_error"):
        super().__init__(message, code=code)


class UpstreamFailure(EngineFailure):
    """An upstream server this one relays failed the request: a server error, a stream
    it broke, cut short or garbled (502 Bad Gateway). The message says which replica
    and what status, never what the server sent (it may hold secrets or internals)."""

    kind = "upstream_failure"
    status = 502

    def __init__(self, message: str, *, code: str = "upstream_error"):
        super().__init__(message, code=code)
