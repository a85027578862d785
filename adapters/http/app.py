"""``opledger serve``: one FastAPI app, composed of routers (DESIGN §9).

Routers: health (``/health``, ``/health/live``, ``/health/ready``), ``/metrics`` (Prometheus
text), the read-only observe API (``/v1``), operator actions (``/v1/operations/{id}/...``), the
console (``/console``) and provider callbacks (``/callbacks/{integration}``,
``adapters.http.callbacks``). Receipts-backed commands are meant to join as further routers
(``app.include_router``), sharing the store on ``app.state``. Errors are problem+json
(``adapters.http.problems``).

Source: issue 13 items 1-3; issue 12 item 3; DESIGN §9.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from adapters.http import actions, callbacks, commands, console, observe, problems
from adapters.http.auth import TokenGrant
from adapters.http.callback_auth import DEFAULT_TOLERANCE_SECONDS, MAX_TOLERANCE_SECONDS
from adapters.http.guard import RequestGuard
from adapters.http.limits import DEFAULT_BODY_TIMEOUT_SECONDS, DEFAULT_MAX_HEADER_BYTES
from adapters.http.metrics import DEFAULT_TOP_TENANTS, LedgerCollector, render
from adapters.http.operator_view import check_trace_template
from adapters.http.schemas import Health, Liveness, Readiness
from adapters.runtime import Store
from executors.secrets import EnvironmentSecrets, SecretProvider
from ledger.clock import Clock, SystemClock
from ledger.errors import ConfigurationError, LedgerError
from ledger.store_identity import check_store_identity
from projections.metrics_store import MetricsStore

VERSION = "1"
"""The observe API's version (its paths start ``/v1``)."""
DEFAULT_HOST = "127.0.0.1"
"""The interface ``opledger serve`` binds by default (``OPLEDGER_HTTP_HOST``, ``--host``)."""
DEFAULT_PORT = 8000
"""The TCP port ``opledger serve`` binds by default (``OPLEDGER_HTTP_PORT``, ``--port``)."""
MIN_TOKEN_CHARS = 16
"""An API token shorter than this is refused at start, characters (issue 27 item 3). A bearer
token is the whole credential: an empty or short one is guessed, and it is compared with what a
request presents, so nothing slows the guessing. ``secrets.token_urlsafe(32)`` gives 43."""
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""A bearer token's characters (``b64token``, RFC 6750 §2.1)."""
MAKE_TOKEN = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
"""The command a refusal of a short token suggests."""
LOOPBACK_NAMES = frozenset({"localhost"})
"""Host names ``serve`` may bind without ``--public``, besides loopback addresses."""
OPEN_METRICS_WARNING = ("binding a non-loopback interface with --public (OPLEDGER_HTTP_PUBLIC): /metrics and "
                        "/health answer anyone who reaches it, unauthenticated, and /metrics labels every tenant")
"""The warning ``serve`` logs at start when :func:`check_bind` allowed a public bind."""


class ServeSettings(BaseSettings):
    """Settings of ``opledger serve`` (environment ``OPLEDGER_<FIELD>``).

    Attributes:
        api_tokens: bearer tokens by value, as JSON: ``{"<token>": {"principal": "alice",
            "roles": ["viewer" | "operator" | "approver", ...]}}``. Without any, every ``/v1``
            route answers 401 (health and ``/metrics`` stay open).
        metrics_top_tenants: tenants shown by name on ``/metrics`` (most intents first); the
            rest are summed as ``other``. 1 to 1,000.
        http_host: the interface ``serve`` binds unless ``--host`` says otherwise.
        http_port: the TCP port ``serve`` binds unless ``--port`` says otherwise (0: any free one).
        callback_tolerance_seconds: how far a callback's ``webhook-timestamp`` may be from now,
            seconds (Standard Webhooks: five minutes); 1 to 3,600.
        http_public: allow binding an interface other than loopback (``--public`` says the same);
            ``/metrics`` and ``/health`` are then open to whoever reaches it (:func:`check_bind`).
        trace_url_template: the tracing UI's URL of one trace, with ``{trace_id}`` where its id
            goes (``http://localhost:16686/trace/{trace_id}`` for Jaeger); an operation's detail
            and the console link its trace there. Empty: no link (issue 31 item 5).

    Every token must be at least ``MIN_TOKEN_CHARS`` characters long.
    """

    model_config = SettingsConfigDict(env_prefix="OPLEDGER_", extra="ignore")

    api_tokens: dict[str, TokenGrant] = Field(default_factory=dict)
    metrics_top_tenants: int = Field(default=DEFAULT_TOP_TENANTS, ge=1, le=1000)
    http_host: str = Field(default=DEFAULT_HOST, min_length=1)
    http_port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    callback_tolerance_seconds: float = Field(default=DEFAULT_TOLERANCE_SECONDS, ge=1, le=MAX_TOLERANCE_SECONDS)
    http_public: bool = False
    trace_url_template: str = Field(default="", max_length=2000)

    @field_validator("trace_url_template")
    @classmethod
    def _trace_link(cls, template: str) -> str:
        return check_trace_template(template)

    @field_validator("api_tokens")
    @classmethod
    def _long_enough(cls, tokens: dict[str, TokenGrant]) -> dict[str, TokenGrant]:
        problems = token_problems(tokens)
        if problems:
            raise ValueError("; ".join(problems) + f"; make one with `{MAKE_TOKEN}`")
        return tokens


def token_problems(tokens: Mapping[str, TokenGrant]) -> list[str]:
    """What is wrong with each configured token, without quoting it. Pure.

    A token must be at least ``MIN_TOKEN_CHARS`` long (issue 27 item 3) and a bearer token's
    characters only (``b64token``, RFC 6750 §2.1: letters, digits, ``-._~+/`` and trailing
    ``=``): a token with a space or a quote in it can never be presented, so it would lock its
    principal out without a word. A grant names each role once.

    Args:
        tokens: bearer tokens and their grants (``OPLEDGER_API_TOKENS``).

    Returns:
        One problem per fault, naming the principal, e.g. ``a token of 3 characters (principal
        'alice') is shorter than 16``; empty when every token is usable.
    """
    problems = []
    for token, grant in tokens.items():
        who = f"(principal {grant.principal!r})"
        if len(token) < MIN_TOKEN_CHARS:
            size = "an empty token" if not token else f"a token of {len(token)} character{'s' * (len(token) > 1)}"
            problems.append(f"{size} {who} is shorter than {MIN_TOKEN_CHARS}")
        elif not _B64TOKEN.fullmatch(token):
            problems.append(f"a token {who} holds a character a bearer token cannot (RFC 6750 §2.1: letters, digits, "
                            "-._~+/ and a trailing =): a space, a quote or a control character")
        if len(set(grant.roles)) < len(grant.roles):
            twice = sorted({role for role in grant.roles if grant.roles.count(role) > 1})
            problems.append(f"the token {who} names the role{'s' * (len(twice) > 1)} {', '.join(twice)} more than once")
    return problems


def is_loopback(host: str) -> bool:
    """True when ``host`` is reachable from this machine only: an address in 127.0.0.0/8, ``::1``
    (also as ``::ffff:127.x.x.x``), or ``localhost``. Pure: names are not resolved, so any other
    name counts as public.

    Args:
        host: the interface ``serve`` would bind, as given to ``--host``.

    Returns:
        Whether binding it keeps the server off the network.

    Source: issue 27 item 3.
    """
    if host.lower().rstrip(".") in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False  # a host name other than localhost, or not an address at all
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def check_bind(host: str, *, public: bool) -> bool:
    """Refuse a bind that opens ``/metrics`` to the network unless the operator said so. Pure.

    ``/metrics`` and ``/health`` answer without a token (as any Prometheus target), and
    ``/metrics`` labels every tenant by name; bound beyond loopback they answer anyone who
    reaches the port. ``serve`` (and a worker serving HTTP) calls this before binding.

    Args:
        host: the interface to bind (``--host`` or ``OPLEDGER_HTTP_HOST``).
        public: the operator allowed a public bind (``--public`` or ``OPLEDGER_HTTP_PUBLIC=true``).

    Returns:
        True when ``host`` is not loopback and ``public`` allowed it: the caller logs
        ``OPEN_METRICS_WARNING``. False for a loopback bind.

    Raises:
        ConfigurationError: ``host`` is not loopback and ``public`` is false; one line saying
            what would be open and how to opt in.

    Source: issue 27 item 3 ("a non-loopback bind without an explicit --public").
    """
    if is_loopback(host):
        return False
    if not public:
        raise ConfigurationError(
            f"refusing to bind {host!r}: it is not a loopback address, and /metrics and /health answer "
            "there without a token (/metrics labels every tenant); bind 127.0.0.1 behind a proxy, or pass "
            "--public (OPLEDGER_HTTP_PUBLIC=true) to serve them to whoever reaches the port")
    return True


def load_serve_settings() -> ServeSettings:
    """``ServeSettings`` from the environment.

    Raises:
        ConfigurationError: a setting is malformed, or a token is shorter than
            ``MIN_TOKEN_CHARS``; the message names it without quoting any token (token values
            are secrets).

    Source: issue 13 item 2; issue 27 item 3.
    """
    try:
        return ServeSettings()
    except SettingsError:
        raise ConfigurationError("OPLEDGER_API_TOKENS is not valid JSON: expected "
                                 '{"<token>": {"principal": "...", "roles": ["viewer"]}}') from None
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field, *rest = error["loc"]
            if field == "api_tokens" and not rest:  # a rule over all tokens (their length)
                problems.append(f"OPLEDGER_API_TOKENS: {error['msg'].removeprefix('Value error, ')}")
            elif field == "api_tokens":  # rest[0] is the token itself: never shown
                where = "a token's " + ".".join(str(part) for part in rest[1:]) if len(rest) > 1 else "a token"
                problems.append(f"OPLEDGER_API_TOKENS, {where}: {error['msg']}")
            else:
                problems.append(f"OPLEDGER_{str(field).upper()}={error.get('input')!r}: {error['msg']}")
        raise ConfigurationError("invalid settings: " + "; ".join(problems)) from None


@dataclass
class ServeConfig:
    """What :func:`create_app` needs besides the store.

    Attributes:
        tokens: bearer tokens and their grants.
        top_tenants: see ``ServeSettings.metrics_top_tenants``.
        writable: whether operator actions and callbacks may write (False: a read-only SQLite
            store).
        callback_tolerance_seconds: see ``ServeSettings.callback_tolerance_seconds``.
        callback_secrets: where callback secrets come from (``callback.<integration>``); the
            environment (``OPLEDGER_SECRET_CALLBACK_<INTEGRATION>``) by default.
        body_timeout_seconds: how long a client may take to send a request body, seconds
            (``adapters.http.limits``).
        max_header_bytes: the request line and headers together, bytes (431 beyond).
        trace_url_template: see ``ServeSettings.trace_url_template``.
    """

    tokens: Mapping[str, TokenGrant] = field(default_factory=dict)
    top_tenants: int = DEFAULT_TOP_TENANTS
    writable: bool = True
    callback_tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS
    callback_secrets: SecretProvider | None = None
    body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    trace_url_template: str = ""


health_router = APIRouter(tags=["health"])
metrics_router = APIRouter(tags=["metrics"])


@health_router.head("/health", include_in_schema=False)  # load balancers and uptime checks probe with HEAD
@health_router.get("/health", response_model=Health, summary="The server answers and its store is readable")
def health(request: Request) -> Health:
    store: Store = request.app.state.store
    store.queries.counts()  # one read of the status view: a store that cannot answer is a 500
    return Health(status="ok", backend=store.settings.database.backend, writable=request.app.state.writable)


@health_router.head("/health/live", include_in_schema=False)  # load balancers and uptime checks probe with HEAD
@health_router.get("/health/live", response_model=Liveness, summary="Liveness: the process answers (no store access)")
def live() -> Liveness:
    return Liveness(status="ok")


@health_router.head("/health/ready", include_in_schema=False)  # load balancers and uptime checks probe with HEAD
@health_router.get("/health/ready", response_model=Readiness, responses={503: problems.PROBLEM_RESPONSES[503]},
                   summary="Readiness: the store is reachable and its schema is the one this code expects")
def ready(request: Request) -> Readiness:
    store: Store = request.app.state.store
    database = store.settings.database
    try:
        # The identity table: reachable, migrated, this application's, schema and codec current.
        identity = check_store_identity(database, store.app.name, store_id=store.settings.store_id)
        store.queries.counts()  # and the status read model answers
    except LedgerError as exc:
        raise problems.Problem(503, "Not ready", str(exc), headers={"Retry-After": str(problems.RETRY_AFTER_SECONDS)}) \
            from None
    return Readiness(status="ready", backend=database.backend, schema_version=identity.get("schema_version", ""),
                     writable=request.app.state.writable)


@metrics_router.get("/metrics", response_class=Response, summary="Prometheus text exposition",
                    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(request: Request) -> Response:
    return Response(render(request.app.state.collector), media_type=CONTENT_TYPE_LATEST)


def create_app(*, store: Store, config: ServeConfig | None = None, clock: Clock | None = None) -> FastAPI:
    """The opledger HTTP app over an open store.

    Args:
        store: the open store (``adapters.runtime.open_store``); the caller closes it.
        config: tokens, tenant folding, whether actions may write.
        clock: for ages on ``/metrics`` (UTC); the system clock by default.

    Returns:
        A FastAPI app; more routers may be included (callbacks, receipts).
    """
    return attach(build_app(), store=store, config=config, clock=clock)


def attach(app: FastAPI, *, store: Store, config: ServeConfig | None = None, clock: Clock | None = None) -> FastAPI:
    """Attach a store (and tokens, clock) to an app from :func:`build_app`; see :func:`create_app`."""
    config = config or ServeConfig()
    clock = clock or SystemClock()
    app.state.store = store
    app.state.tokens = dict(config.tokens)
    app.state.writable = config.writable
    app.state.clock = clock
    app.state.callback_tolerance_seconds = config.callback_tolerance_seconds
    app.state.callback_secrets = config.callback_secrets or EnvironmentSecrets()
    app.state.body_timeout_seconds = config.body_timeout_seconds
    app.state.max_header_bytes = config.max_header_bytes
    app.state.trace_url_template = check_trace_template(config.trace_url_template)
    app.state.collector = LedgerCollector(store=MetricsStore(store.view), now=clock.now,
                                          top_tenants=config.top_tenants)
    return app


def build_app() -> FastAPI:
    """The app's routes and error handling, before any store is attached (``create_app``
    attaches one; ``adapters.http.openapi`` prints the document from this alone)."""
    app = FastAPI(title="opledger", version=VERSION, summary="Observe and operate the ledger of external operations",
                  description="Read-only observe API, operator actions (bearer tokens with roles), Prometheus "
                              "metrics, health, the operator console, and providers' signed callbacks "
                              "(Standard Webhooks). Errors are RFC 9457 problem+json.")
    problems.install(app)
    app.add_middleware(RequestGuard)  # every request bounded before a route parses it (issue 27)
    for router in (health_router, metrics_router, observe.router, actions.router, actions.receipts_router,
                   console.router, callbacks.router):
        app.include_router(router)
    app.include_router(commands.router)  # keyed commands with idempotency receipts (issue 15)
    return app
