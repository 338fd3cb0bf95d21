"""What the operator chose for the HTTP server: keys, deadlines, limits, where state lives.
The CLI and `parlance.config` build it; every room of `server/` reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from parlance.integrations.settings import IntegrationSettings
from parlance.models.downloads import DownloadLimits
from parlance.models.hub import DEFAULT_CATALOG
from parlance.store.responses import DEFAULT_RETENTION

DEFAULT_MAX_BODY_MB = 32


@dataclass(frozen=True, slots=True)
class ServerSettings:
    api_keys: tuple[str, ...] = ()
    keepalive_seconds: float = 10.0
    request_timeout: float = 120.0
    data_dir: Path | None = None  # stored responses; None keeps them in memory
    responses_retention: int = DEFAULT_RETENTION
    integrations: IntegrationSettings = field(default_factory=IntegrationSettings)
    models_dir: Path | None = None  # where downloads go (and the catalog looks)
    download_allow_hosts: tuple[str, ...] = ()  # non-public hosts downloads may reach
    catalog_url: str = DEFAULT_CATALOG  # where pull's owner/repo[:QUANT] names resolve
    download_limits: DownloadLimits = DownloadLimits()  # jobs at once, deadline, free disk
    # What a browser may do (server/http/origins.py): origins allowed beside loopback ones and
    # Host names beside loopback names ("*": any), and the address the server listens on:
    # a loopback one turns the Host check on; None (tests, an embedding) leaves it off
    # unless allowed_hosts is given.
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    bind_host: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_MB * 2**20  # larger request bodies get a 413
    shutdown_grace: float = 10.0  # seconds running generations may finish on shutdown
