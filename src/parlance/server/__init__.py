"""HTTP: app factory, route table, the one generic handler, stream transport, auth."""

from parlance.server.app import create_app
from parlance.server.settings import ServerSettings

__all__ = ["ServerSettings", "create_app"]
