"""The HTTP server's limits: what one client may hold of ``opledger serve`` (issue 27 item 1).

Each limit has a default here and a setting (environment ``OPLEDGER_HTTP_<FIELD>``); the body
limits per route class are constants beside the routes' own schemas. ``docs/operations.md``
("Limits of `opledger serve`") lists them all.

Source: issue 27 item 1; RFC 9110 §15.5.9 (408), §15.5.14 (413); uvicorn's and h11's settings.
"""

from __future__ import annotations

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from ledger.errors import ConfigurationError

DEFAULT_MAX_CONNECTIONS = 512
"""Concurrent connections (and requests in flight) beyond which uvicorn answers 503
(its ``limit_concurrency``)."""
DEFAULT_HEADER_TIMEOUT_SECONDS = 10.0
"""How long a client may take to send a request's line and headers, from the connection's
opening or the previous response, seconds; then the connection is closed (slowloris)."""
DEFAULT_BODY_TIMEOUT_SECONDS = 30.0
"""How long a client may take to send a whole request body, seconds; then 408 and the
connection is closed."""
DEFAULT_KEEP_ALIVE_SECONDS = 5
"""How long an idle keep-alive connection stays open between requests, seconds (uvicorn's
``timeout_keep_alive``)."""
DEFAULT_MAX_HEADER_BYTES = 16 * 1024
"""The request line and headers together, bytes (h11's ``max_incomplete_event_size``); a
larger head is answered 400 and the connection closed. This also bounds the header count."""


class HttpLimits(BaseSettings):
    """Limits of the HTTP server (environment ``OPLEDGER_HTTP_<FIELD>``).

    Attributes:
        max_connections: see :data:`DEFAULT_MAX_CONNECTIONS`; 1 to 100,000.
        header_timeout_seconds: see :data:`DEFAULT_HEADER_TIMEOUT_SECONDS`; 0.1 to 3,600.
        body_timeout_seconds: see :data:`DEFAULT_BODY_TIMEOUT_SECONDS`; 0.1 to 3,600.
        keep_alive_seconds: see :data:`DEFAULT_KEEP_ALIVE_SECONDS`; 1 to 3,600.
        max_header_bytes: see :data:`DEFAULT_MAX_HEADER_BYTES`; 1 KiB to 1 MiB.
    """

    model_config = SettingsConfigDict(env_prefix="OPLEDGER_HTTP_", extra="ignore")

    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=1, le=100_000)
    header_timeout_seconds: float = Field(default=DEFAULT_HEADER_TIMEOUT_SECONDS, ge=0.1, le=3600)
    body_timeout_seconds: float = Field(default=DEFAULT_BODY_TIMEOUT_SECONDS, ge=0.1, le=3600)
    keep_alive_seconds: int = Field(default=DEFAULT_KEEP_ALIVE_SECONDS, ge=1, le=3600)
    max_header_bytes: int = Field(default=DEFAULT_MAX_HEADER_BYTES, ge=1024, le=1024 * 1024)


def load_http_limits() -> HttpLimits:
    """``HttpLimits`` from the environment.

    Raises:
        ConfigurationError: a setting is malformed or out of range (the message names it).
    """
    try:
        return HttpLimits()
    except ValidationError as exc:
        problems = [f"OPLEDGER_HTTP_{str(e['loc'][0]).upper()}={e.get('input')!r}: {e['msg']}" for e in exc.errors()]
        raise ConfigurationError("invalid settings: " + "; ".join(problems)) from None
