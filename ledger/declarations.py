"""Integration declarations: what kind of external operation this is and what the remote allows.

A declaration is validated by pydantic; a bad one raises one :class:`DeclarationError` that lists
every problem with its path. Each declaration has a stable digest (canonical JSON, sha256)
recorded on ``Intended``, so the rules an operation ran under are always known.
Source: DESIGN §3 ('integration'), §5 (delivery modes).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from enum import StrEnum
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from ledger.adapter_names import adapter_problem
from ledger.errors import DeclarationError, UnknownIntegrationError
from ledger.redaction import url_has_credentials
from ledger.retention import MAX_RETENTION_SECONDS
from ledger.time_limits import (
    MAX_BACKOFF_SECONDS,
    MAX_BASE_BACKOFF_SECONDS,
    MAX_BUDGET_WINDOW_SECONDS,
    MAX_DEADLINE_SECONDS,
    MAX_REQUEST_TIMEOUT_SECONDS,
    MAX_SETTLEMENT_BACKOFF_SECONDS,
    MAX_SETTLEMENT_DELAY_SECONDS,
    MIN_BUDGET_WINDOW_SECONDS,
    settlement_worst_delay,
)

NAME_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$"
DEFAULT_MAX_PAYLOAD_BYTES = 64 * 1024
"""An intent payload's size limit unless declared otherwise: bytes of its canonical JSON."""
MAX_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
"""The largest ``max_payload_bytes`` a declaration may set, bytes (payloads are stored inline)."""
DEFAULT_BUDGET_WINDOW_SECONDS = 60.0
"""An integration's call budget window when ``budgets`` names ``calls_per_window`` without
``window_seconds``, seconds (a minute)."""
DEFAULT_APPROVAL_VALID_SECONDS = 86_400.0
"""How long an approval allows egress unless declared otherwise, seconds (a day)."""
DEFAULT_POLL_INITIAL_DELAY_SECONDS = 1.0
"""How long after acceptance the first poll of a remote operation waits unless declared, seconds."""
DEFAULT_POLL_MAX_INTERVAL_SECONDS = 60.0
"""The longest wait between two polls before the accepted deadline unless declared, seconds."""
DEFAULT_POLL_OVERDUE_INTERVAL_SECONDS = 600.0
"""The wait between polls once the accepted deadline passed (``remote_unknown``), seconds."""
DEFAULT_POLL_LIMIT_SECONDS = 7 * 86_400.0
"""The hard limit on following an accepted operation, from its acceptance, seconds (a week)."""
_DIGEST_DEFAULTS: dict[str, Any] = {"max_payload_bytes": DEFAULT_MAX_PAYLOAD_BYTES, "approval_purpose": "",
                                    "approval_valid_seconds": DEFAULT_APPROVAL_VALID_SECONDS,
                                    "budgets.per_tenant": None, "retention_seconds": None,
                                    "polling": {"initial_delay_seconds": DEFAULT_POLL_INITIAL_DELAY_SECONDS,
                                                "max_interval_seconds": DEFAULT_POLL_MAX_INTERVAL_SECONDS,
                                                "overdue_interval_seconds": DEFAULT_POLL_OVERDUE_INTERVAL_SECONDS,
                                                "limit_seconds": DEFAULT_POLL_LIMIT_SECONDS}}
"""Fields added after digests were first recorded (dotted: a nested field): left out of the
digest while at their default, so a declaration written before them keeps its recorded digest
(no false drift)."""
SECRET_REF_PREFIX = "secretref:"
"""Secret payload fields hold a reference (``secretref:NAME``) resolved at egress, never a value."""


class DeliveryMode(StrEnum):
    """What the remote system allows after a lost response (DESIGN §5)."""

    IDEMPOTENT = "idempotent"
    """The provider dedupes on our idempotency key: retry with the same key."""
    RECOVERABLE_REMOTE_ID = "recoverable_remote_id"
    """The provider can be asked whether it received operation X: look it up, then decide."""
    NON_IDEMPOTENT = "non_idempotent"
    """Neither: record ``Ambiguous`` and stop for an operator."""
    CALLBACK = "callback"
    """The provider reports the result by calling us; wait for the authenticated callback."""
    READ_ONLY = "read_only"
    """No side effect: retry freely."""


class Classification(StrEnum):
    """How a payload field may be shown and stored."""

    PUBLIC = "public"
    """Shown everywhere, including timelines and logs."""
    INTERNAL = "internal"
    """Stored and sent, redacted in timelines and logs."""
    SECRET = "secret"
    """Never stored as a value: the payload holds a ``secretref:NAME`` resolved at egress."""


class _Strict(BaseModel):
    # allow_inf_nan=False: an infinite or NaN duration is refused as "not a finite number" rather
    # than overflowing the first time a worker adds it to a datetime (ledger.time_limits).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _not_below(value: float, info: ValidationInfo, lower: str) -> float:
    """``value`` if it is at least the field ``lower`` (validated before it); else ValueError. A
    field validator, not a model validator: the problem is reported with its path, beside the others."""
    floor = info.data.get(lower)
    if floor is not None and value < floor:
        raise ValueError(f"{info.field_name} must be >= {lower}")
    return value


class RetryPolicy(_Strict):
    """Attempt budget and backoff. Delays are computed by ``ledger.decisions`` (exponential with
    jitter); these are its inputs, in seconds."""

    max_attempts: int = Field(default=5, ge=1, le=1000)
    base_backoff_seconds: float = Field(default=1.0, gt=0, le=MAX_BASE_BACKOFF_SECONDS)
    max_backoff_seconds: float = Field(default=300.0, gt=0, le=MAX_BACKOFF_SECONDS)
    jitter: float = Field(default=0.2, ge=0, le=1, description="fraction of the delay, 0..1")

    @field_validator("max_backoff_seconds")
    @classmethod
    def _backoff_ordered(cls, value: float, info: ValidationInfo) -> float:
        return _not_below(value, info, "base_backoff_seconds")


class Deadlines(_Strict):
    """A deadline in seconds for every non-terminal execution state (invariant 6).

    ``ambiguous`` has none by design: it waits for an operator and is always on the attention
    queue (docs/adr/0001-operation-lifecycle.md).
    """

    pending: float = Field(default=3600.0, gt=0, le=MAX_DEADLINE_SECONDS)
    claimed: float = Field(default=300.0, gt=0, le=MAX_DEADLINE_SECONDS)
    dispatching: float = Field(default=600.0, gt=0, le=MAX_DEADLINE_SECONDS)
    accepted: float = Field(default=86_400.0, gt=0, le=MAX_DEADLINE_SECONDS)


class Polling(_Strict):
    """How an accepted remote operation is followed (docs/adr/0004-accepted-work.md).

    Polls back off exponentially from ``initial_delay_seconds`` (doubling) up to
    ``max_interval_seconds``, never sooner than a provider's ``Retry-After``. Once the
    ``accepted`` deadline passes with the provider still running, the operation is shown as
    ``remote_unknown`` (never failed) and polled every ``overdue_interval_seconds``, until
    ``limit_seconds`` after acceptance: then ``DeadlineExceeded`` records it ambiguous.
    """

    initial_delay_seconds: float = Field(default=DEFAULT_POLL_INITIAL_DELAY_SECONDS, gt=0, le=MAX_BACKOFF_SECONDS)
    max_interval_seconds: float = Field(default=DEFAULT_POLL_MAX_INTERVAL_SECONDS, gt=0, le=MAX_BACKOFF_SECONDS)
    overdue_interval_seconds: float = Field(default=DEFAULT_POLL_OVERDUE_INTERVAL_SECONDS, gt=0,
                                            le=MAX_BACKOFF_SECONDS)
    limit_seconds: float = Field(default=DEFAULT_POLL_LIMIT_SECONDS, gt=0, le=MAX_DEADLINE_SECONDS)

    @field_validator("max_interval_seconds")
    @classmethod
    def _interval_ordered(cls, value: float, info: ValidationInfo) -> float:
        return _not_below(value, info, "initial_delay_seconds")


class SettlementAction(_Strict):
    """The entity action that applies the outcome to the source entity (DESIGN §1.5).

    ``method`` is called as ``entity.<method>(outcome)`` with a ``SettlementOutcome``; it must be
    public (no leading ``_``: a private helper or a dunder such as ``__init__`` is not an action).
    That ``entity_type`` imports and has ``method`` is checked when the application is built
    (``ledger.settlement.settlement_target_problems``): the class is often defined after the
    declaration, in the same module.
    """

    entity_type: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$", description="topic 'module:Class'")
    method: str = Field(pattern=r"^[A-Za-z_]\w*$")
    max_attempts: int = Field(default=5, ge=1, le=100)
    # validate_default: the bound depends on max_attempts too, so it is checked with the default.
    backoff_seconds: float = Field(default=1.0, gt=0, le=MAX_SETTLEMENT_BACKOFF_SECONDS, validate_default=True)

    @field_validator("method")
    @classmethod
    def _public(cls, value: str) -> str:
        # Source: issue 34 item 3: __init__ failed every settlement try with a TypeError.
        if value.startswith("_"):
            kind = "a dunder method" if value.startswith("__") and value.endswith("__") else "a private method"
            raise ValueError(f"{value!r} is {kind}: the settlement action must be a public method of the entity "
                             "(one the entity offers for this, which records the outcome)")
        return value

    @field_validator("backoff_seconds")
    @classmethod
    def _longest_delay_bounded(cls, value: float, info: ValidationInfo) -> float:
        # The executor doubles the delay per failed try, uncapped: bound the last one.
        attempts = info.data.get("max_attempts")
        if attempts is not None and settlement_worst_delay(value, attempts) > MAX_SETTLEMENT_DELAY_SECONDS:
            raise ValueError(
                f"backoff_seconds * 2**(max_attempts - 2) must be <= {MAX_SETTLEMENT_DELAY_SECONDS} s (a week); "
                f"{value:g} s over {attempts} tries waits up to {settlement_worst_delay(value, attempts):.3g} s: "
                "lower max_attempts or backoff_seconds")
        return value


def _window_long_enough(value: float) -> float:
    if value < MIN_BUDGET_WINDOW_SECONDS:
        raise ValueError(f"window_seconds must be >= {MIN_BUDGET_WINDOW_SECONDS:g} s "
                         f"(ledger.time_limits.MIN_BUDGET_WINDOW_SECONDS), got {value:g}: a shorter window "
                         "closes before a call counted in it can reach the provider")
    return value


class CallBudget(_Strict):
    """One call budget: at most ``calls_per_window`` requests to the provider (sends and
    lookups) in each ``window_seconds`` window, windows aligned to the Unix epoch (UTC).

    ``window_seconds`` is from ``MIN_BUDGET_WINDOW_SECONDS`` (1 s) to
    ``MAX_BUDGET_WINDOW_SECONDS`` (31 days); it defaults to ``DEFAULT_BUDGET_WINDOW_SECONDS``
    (60 s) in ``per_tenant``, and the application's global budget must name it
    (``ledger.application``)."""

    calls_per_window: int = Field(ge=1)
    window_seconds: float = Field(default=DEFAULT_BUDGET_WINDOW_SECONDS, gt=0, le=MAX_BUDGET_WINDOW_SECONDS)

    _window_min = field_validator("window_seconds")(_window_long_enough)


class Budgets(_Strict):
    """Call budgets checked before egress, never after (DESIGN §7; issue 14 item 1).

    ``calls_per_window``/``window_seconds`` are the integration's budget (``scope:
    integration``) or, with ``scope: tenant``, each tenant's. ``window_seconds`` defaults to
    60 s (``DEFAULT_BUDGET_WINDOW_SECONDS``) and is at least ``MIN_BUDGET_WINDOW_SECONDS``.
    ``per_tenant`` adds each tenant's own budget inside the integration's: a call must fit both
    (and the application's global budget, ``LedgerApplication.global_call_budget``); one that
    could never limit (more calls than the integration's in a window no longer) is refused.

    Left out of a declaration (the default, ``calls_per_window`` None), there is no call
    budget; a ``budgets`` block that is given must declare ``calls_per_window``
    (``Integration._budgets_limit_something``), unless it is the dumped form of no budget
    (``calls_per_window: null``, everything else at its default).
    """

    calls_per_window: int | None = Field(default=None, ge=1)
    window_seconds: float = Field(default=DEFAULT_BUDGET_WINDOW_SECONDS, gt=0, le=MAX_BUDGET_WINDOW_SECONDS)
    scope: str = Field(default="integration", pattern=r"^(integration|tenant)$")
    per_tenant: CallBudget | None = None

    _window_min = field_validator("window_seconds")(_window_long_enough)

    @field_validator("per_tenant")
    @classmethod
    def _inside_the_integrations(cls, value: CallBudget | None, info: ValidationInfo) -> CallBudget | None:
        if value is None:
            return value
        limit = info.data.get("calls_per_window")
        if limit is None:
            raise ValueError("a per-tenant budget sits inside the integration's: declare calls_per_window too")
        if info.data.get("scope") != "integration":
            raise ValueError("scope: tenant already makes calls_per_window each tenant's; per_tenant needs "
                             "scope: integration")
        window = info.data.get("window_seconds")
        if window is not None and value.window_seconds <= window and value.calls_per_window > limit:
            raise ValueError(f"per_tenant allows {value.calls_per_window} calls per {value.window_seconds:g} s, "
                             f"more than the integration's {limit} per {window:g} s: it would never limit; "
                             "lower it (or leave per_tenant out)")
        return value


class Integration(_Strict):
    """One declared kind of external operation (DESIGN §3 'integration').

    Build with :meth:`parse` to get a single :class:`DeclarationError` listing every problem.
    """

    name: str = Field(pattern=NAME_PATTERN, max_length=200)
    version: int = Field(ge=1, strict=True)
    adapter: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    delivery_mode: DeliveryMode
    endpoint: str | None = Field(default=None, max_length=2048, description="default target URL")
    request_timeout_seconds: float = Field(default=10.0, gt=0, le=MAX_REQUEST_TIMEOUT_SECONDS)
    retry: RetryPolicy = RetryPolicy()
    deadlines: Deadlines = Deadlines()
    settlement: SettlementAction | None = None
    requires_approval: bool = Field(default=False, strict=True)
    approval_purpose: str = Field(default="", max_length=200, description='e.g. "refund above 1,000 EUR"')
    approval_valid_seconds: float = Field(default=DEFAULT_APPROVAL_VALID_SECONDS, gt=0, le=MAX_DEADLINE_SECONDS)
    budgets: Budgets = Budgets()
    polling: Polling = Polling()
    payload: Mapping[str, Classification] = Field(default_factory=dict)
    max_payload_bytes: int = Field(default=DEFAULT_MAX_PAYLOAD_BYTES, ge=1, le=MAX_MAX_PAYLOAD_BYTES)
    retention_seconds: float | None = Field(default=None, gt=0, le=MAX_RETENTION_SECONDS,
                                            description="how long a closed operation stays in the hot store; "
                                                        "overrides OPLEDGER_RETENTION (issue 29)")

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False)

    # Field validators, not a model validator: pydantic skips model validators when any field
    # fails, which would hide these problems, and reports them without a field path.
    @field_validator("adapter")
    @classmethod
    def _known_adapter(cls, value: str) -> str:
        # Against the adapters this process knows (ledger.adapter_names; issue 34 item 3).
        problem = adapter_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("endpoint must be an http:// or https:// URL")
        if value is not None and url_has_credentials(value):
            raise ValueError("endpoint must not carry credentials (user:password@): put them in a "
                             "payload field classified secret, or a header the adapter adds")
        return value

    @field_validator("polling")
    @classmethod
    def _limit_after_deadline(cls, value: Polling, info: ValidationInfo) -> Polling:
        # The hard limit bounds the slow polling that follows the accepted deadline.
        deadlines = info.data.get("deadlines")
        if deadlines is not None and value.limit_seconds < deadlines.accepted:
            raise ValueError("polling.limit_seconds must be >= deadlines.accepted (it bounds the polling "
                             "that goes on after the accepted deadline)")
        return value

    @field_validator("budgets")
    @classmethod
    def _budgets_limit_something(cls, value: Budgets) -> Budgets:
        # Runs only for a budgets block that is given (the default is not validated), so a
        # declaration without one keeps its digest; a given block that limits nothing is a typo.
        # The one exception is the dumped form of no budget (``model_dump``: calls_per_window
        # null, the rest at its defaults), so a declaration read back from its dump parses.
        if value.calls_per_window is None and not (
                "calls_per_window" in value.model_fields_set and value == Budgets()):
            raise ValueError("a budgets block must declare calls_per_window (calls per window, >= 1); "
                             "leave budgets out for no call budget")
        return value

    @field_validator("payload")
    @classmethod
    def _payload_field_names(cls, value: Mapping[str, Classification]) -> Mapping[str, Classification]:
        for field in value:
            if not field or len(field) > 200:
                raise ValueError(f"payload field name {field!r} must be 1-200 characters")
        return value

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Integration:
        """Validate a declaration from plain data.

        Args:
            data: a mapping as written in code, YAML or JSON.

        Returns:
            The frozen declaration.

        Raises:
            DeclarationError: listing every problem, each with its dotted path.
        """
        name = data.get("name", "?") if isinstance(data, Mapping) else "?"
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise DeclarationError(str(name), validation_problems(exc, "(declaration)")) from None

    @property
    def key(self) -> tuple[str, int]:
        """``(name, version)``."""
        return (self.name, self.version)

    def digest(self) -> str:
        """Return ``sha256:<hex>`` of the canonical JSON form (sorted keys, no spaces)."""
        return self._digest

    @cached_property
    def deadline_seconds(self) -> dict[str, float]:
        """The deadlines as ``{state: seconds}`` (computed once; copy before changing it)."""
        return self.deadlines.model_dump()

    @cached_property
    def _digest(self) -> str:
        # Computed once: the model is frozen, and every intent records it.
        data = self.model_dump(mode="json")
        for name, default in _DIGEST_DEFAULTS.items():
            *path, key = name.split(".")
            parent = data
            for part in path:
                parent = parent.get(part) or {}
            if key in parent and parent[key] == default:
                del parent[key]
        return "sha256:" + hashlib.sha256(canonical_json(data)).hexdigest()

    def classification_of(self, field: str) -> Classification | None:
        """Return how ``field`` is classified, or None when the declaration does not list it."""
        return self.payload.get(field)


_LIMIT_ERRORS = frozenset({"less_than_equal", "finite_number"})
_LIMIT_HINT = " (durations are seconds, finite and within ledger.time_limits; see docs/guide.md, 'Limits')"


def validation_problems(exc: ValidationError, whole: str) -> list[tuple[str, str]]:
    """Each problem pydantic found, as ``(dotted path, message)`` for people: our own
    validators' messages without pydantic's ``"Value error, "`` prefix, a duration over its
    limit with :data:`_LIMIT_HINT`, no documentation URL. Pure.

    Args:
        exc: the validation error.
        whole: the path shown for a problem of the whole value (no field path).
    """
    problems = []
    for err in exc.errors():
        message = str(err["msg"])
        if err["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        problems.append((".".join(str(p) for p in err["loc"]) or whole,
                         message + (_LIMIT_HINT if _is_duration_limit(err) else "")))
    return problems


def _is_duration_limit(err: Any) -> bool:
    path = [str(p) for p in err["loc"]]
    duration = bool(path) and (path[0] == "deadlines" or path[-1].endswith("_seconds"))
    return duration and err["type"] in _LIMIT_ERRORS


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""``json.dumps`` with these options builds an encoder per call; one shared encoder is the same
encoding without that cost (it keeps no state between calls)."""


def check_plain_json(value: Any) -> None:
    """Check that ``value`` is plain JSON data: str, int, finite float, bool, None, and lists and
    string-keyed dicts of those.

    Raises:
        ValueError: a float is NaN or infinite, a key is not a string, or a value is of another type.
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("payload numbers must be finite")
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise ValueError("payload keys must be strings")
            check_plain_json(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            check_plain_json(item)
    elif not isinstance(value, (str, int, float, bool, type(None))):
        raise ValueError(f"payload values must be plain JSON data, got {type(value).__name__}")


def canonical_json(value: Any) -> bytes:
    """Encode plain JSON data canonically: sorted keys, no spaces, UTF-8, finite numbers only.

    Raises:
        ValueError: a float is NaN or infinite, or a value is not plain JSON data.
    """
    check_plain_json(value)
    return _CANONICAL.encode(value).encode()


class Registry:
    """The integrations declared in this process, by name and version.

    ``get(name)`` returns the highest version; ``get(name, version)`` an exact one.
    """

    def __init__(self, integrations: list[Integration] | None = None) -> None:
        self._by_key: dict[tuple[str, int], Integration] = {}
        for integration in integrations or []:
            self.declare(integration)

    def declare(self, integration: Integration | Mapping[str, Any]) -> Integration:
        """Add a declaration (an :class:`Integration` or plain data, validated).

        Raises:
            DeclarationError: the data is malformed, or the same name and version is declared
                again with a different digest.
        """
        if not isinstance(integration, Integration):
            integration = Integration.parse(integration)
        existing = self._by_key.get(integration.key)
        if existing is not None and existing.digest() != integration.digest():
            raise DeclarationError(
                integration.name,
                [("version", f"version {integration.version} is already declared differently; "
                  "bump the version when a declaration changes")],
            )
        self._by_key[integration.key] = integration
        return integration

    def get(self, name: str, version: int | None = None) -> Integration:
        """Return the declaration.

        Raises:
            UnknownIntegrationError: nothing with that name (and version) is declared.
        """
        if version is not None:
            try:
                return self._by_key[(name, version)]
            except KeyError:
                raise UnknownIntegrationError(f"integration {name!r} version {version} is not declared") from None
        versions = [v for (n, v) in self._by_key if n == name]
        if not versions:
            raise UnknownIntegrationError(f"integration {name!r} is not declared")
        return self._by_key[(name, max(versions))]

    def __iter__(self) -> Iterator[Integration]:
        return iter(sorted(self._by_key.values(), key=lambda i: i.key))
