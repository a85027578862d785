"""Resolving secret references at egress (DESIGN §9: secrets are references, never stored).

A payload field classified ``secret`` holds ``secretref:NAME``; the executor resolves it just
before building the request and the value never reaches an event, a log line or an excerpt.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

from ledger.declarations import SECRET_REF_PREFIX
from ledger.errors import LedgerError

ENV_PREFIX = "OPLEDGER_SECRET_"


class MissingSecretError(LedgerError):
    """A ``secretref:NAME`` names no known secret. Fix: provide it (e.g. ``OPLEDGER_SECRET_NAME``)."""


class SecretResolver(Protocol):
    """Maps a secret name to its value."""

    def resolve(self, name: str) -> str:
        """Return the secret's value. Raises MissingSecretError when unknown."""
        ...


class EnvironmentSecrets:
    """Secrets from environment variables ``OPLEDGER_SECRET_<NAME>`` (name upper-cased, ``-``,
    ``.`` and ``/`` as ``_``), with an optional fixed mapping that takes precedence (tests, demo)."""

    def __init__(self, fixed: Mapping[str, str] | None = None) -> None:
        self._fixed = dict(fixed or {})

    def resolve(self, name: str) -> str:
        if name in self._fixed:
            return self._fixed[name]
        key = ENV_PREFIX + name.upper().replace("-", "_").replace(".", "_").replace("/", "_")
        value = os.environ.get(key)
        if value is None:
            raise MissingSecretError(f"secret {name!r} is not configured (set {key})")
        return value


def resolve_payload(payload: Mapping[str, Any], resolver: SecretResolver) -> tuple[dict[str, Any], list[str]]:
    """Return the payload with every ``secretref:NAME`` value resolved, and the resolved values
    (so adapters can redact them from excerpts).

    Raises:
        MissingSecretError: a reference names an unknown secret.
    """
    resolved: dict[str, Any] = {}
    secrets: list[str] = []
    for key, value in payload.items():
        if isinstance(value, str) and value.startswith(SECRET_REF_PREFIX):
            value = resolver.resolve(value[len(SECRET_REF_PREFIX):])
            secrets.append(value)
        resolved[key] = value
    return resolved, secrets
