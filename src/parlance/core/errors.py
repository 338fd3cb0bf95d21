"""Typed domain errors.

Engines and dialect parsers raise these; each dialect renders them in its own
envelope and status code, so no layer ever matches error *text*.

    ParlanceError
    ├── InvalidRequest          bad field, type or value (param names the field)
    ├── PayloadTooLarge         the body exceeds the server's size limit
    ├── AuthenticationFailed    missing or wrong API key
    ├── Forbidden               a browser request from a foreign origin or for a foreign host
    ├── ModelNotFound           no model by that id or alias
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
    ├── ToolServerUnreachable   an MCP server for server-side tools failed us
    ├── NotImplementedHere      a documented feature this server does not offer
    └── EngineFailure           the engine broke while generating
        └── UpstreamFailure     an upstream server failed the request (502)
"""

from __future__ import annotations


class ParlanceError(Exception):
    """Base of every error a client can be told about."""

    kind = "internal"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class InvalidRequest(ParlanceError):
    kind = "invalid_request"


class PayloadTooLarge(ParlanceError):
    kind = "payload_too_large"

    def __init__(self, message: str):
        super().__init__(message, code="payload_too_large")


class AuthenticationFailed(ParlanceError):
    kind = "authentication"


class Forbidden(ParlanceError):
    kind = "forbidden"


class ModelNotFound(ParlanceError):
    kind = "model_not_found"

    def __init__(self, model: str):
        super().__init__(
            f"The model '{model}' does not exist or is not served here.",
            param="model",
            code="model_not_found",
        )
        self.model = model


class RouteNotFound(ParlanceError):
    kind = "route_not_found"


class ResourceNotFound(ParlanceError):
    """No stored object (a response, a chat) by that id."""

    kind = "not_found"


class MethodNotAllowed(ParlanceError):
    kind = "method_not_allowed"


class ContextOverflow(ParlanceError):
    kind = "context_overflow"


class Overloaded(ParlanceError):
    kind = "overloaded"

    def __init__(self, message: str, *, retry_after: float = 1.0):
        super().__init__(message, code="queue_full")
        self.retry_after = retry_after


class RequestTimeout(ParlanceError):
    kind = "timeout"

    def __init__(self, message: str = "The request ran past the server's request timeout."):
        super().__init__(message, code="request_timeout")


class Cancelled(ParlanceError):
    """Not a failure: the client asked to stop it. The stream ends as cancelled."""

    kind = "cancelled"

    def __init__(self, message: str = "The response was cancelled."):
        super().__init__(message, code="cancelled")


class Unavailable(ParlanceError):
    """Nothing wrong with the request: the server cannot serve it now (503)."""

    kind = "unavailable"


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
    """`configured`: the operator's own server (a plugin) rather than one the request
    named. `server_fault`: the operator's server is broken, not the request."""

    kind = "tool_server"

    def __init__(self, message: str, *, configured: bool, param: str | None = None,
                 client_fault: bool = False):
        super().__init__(message, param=param,
                         code="plugin_connection_error" if configured else "mcp_connection_error")
        self.configured = configured
        self.server_fault = configured and not client_fault


class NotImplementedHere(ParlanceError):
    kind = "not_implemented"


class EngineFailure(ParlanceError):
    kind = "engine_failure"

    def __init__(self, message: str, *, code: str = "engine_error"):
        super().__init__(message, code=code)


class UpstreamFailure(EngineFailure):
    """An upstream server this one relays failed the request: a server error, a stream
    it broke, cut short or garbled (502 Bad Gateway). The message says which replica
    and what status, never what the server sent (it may hold secrets or internals)."""

    kind = "upstream_failure"

    def __init__(self, message: str, *, code: str = "upstream_error"):
        super().__init__(message, code=code)
