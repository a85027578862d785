"""Checking an intent before it is recorded: target, source, principal, trace context and payload
classification (DESIGN §3 'intent', §9 'secrets are references').

``Operation.intend`` and the aggregate's operator commands call these; each raises the ledger's
usual errors listing every problem at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ledger.declarations import SECRET_REF_PREFIX, Classification, Integration, check_plain_json
from ledger.errors import InvalidArgumentError, PayloadError
from ledger.identity import Source

TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
"""W3C Trace Context ``traceparent`` (version-traceid-parentid-flags)."""
SECRET_NAME = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$")
"""A secret reference's name: a path-like key for a secret store, never climbing out of it."""
TARGET_ADAPTERS = frozenset({"webhook"})
"""Adapters that call a URL: their intents need an http(s) target."""


def require_principal(principal: str) -> None:
    """Refuse an empty or non-text principal.

    Raises:
        InvalidArgumentError: ``principal`` is not a non-blank string.
    """
    if not isinstance(principal, str) or not principal.strip():
        raise InvalidArgumentError("principal is required: say who decides")


def check_intent(integration: Integration, source: Source, target: str | None, principal: str,
                 traceparent: str | None) -> None:
    """Check an intent's target, source, principal and trace context.

    Raises:
        PayloadError: listing every problem found.
    """
    problems: list[str] = []
    if target is not None and not re.match(r"^https?://[^\s/]+", target):
        problems.append(f"target: {target!r} is not an http:// or https:// URL")
    if target is None and integration.adapter in TARGET_ADAPTERS:
        problems.append("target: none given and the declaration has no endpoint")
    if not source.tenant:
        problems.append("tenant: must not be empty")
    if source.effect_index < 0:
        problems.append(f"effect_index: must be >= 0, got {source.effect_index}")
    if not isinstance(principal, str) or not principal.strip():
        problems.append("principal: must not be empty")
    if traceparent is not None and not TRACEPARENT.match(traceparent):
        problems.append(f"traceparent: {traceparent!r} is not a W3C traceparent")
    if problems:
        raise PayloadError(integration.name, problems)


def check_payload(integration: Integration, payload: Mapping[str, Any]) -> None:
    """Check that every payload field is classified, secrets are references, values plain JSON.

    Raises:
        PayloadError: listing every problem found, each with its field path.
    """
    problems: list[str] = []
    if not isinstance(payload, Mapping):
        raise PayloadError(integration.name, ["payload must be a mapping of field to value"])
    for key, value in payload.items():
        kind = integration.classification_of(key) if isinstance(key, str) else None
        if kind is None:
            problems.append(f"payload.{key}: field is not classified by the declaration")
        elif kind is Classification.SECRET and not (
            isinstance(value, str) and value.startswith(SECRET_REF_PREFIX)
            and SECRET_NAME.match(value[len(SECRET_REF_PREFIX):])
        ):
            problems.append(f"payload.{key}: secret fields take a '{SECRET_REF_PREFIX}NAME' reference "
                            "(NAME: letters, digits, '.', '_', '-', '/', no '..'), not a value")
        # Checked field by field so every bad value is listed with its path, not only the first.
        try:
            check_plain_json(value)
        except ValueError as exc:
            problems.append(f"payload.{key}: {exc}")
    if problems:
        raise PayloadError(integration.name, problems)
