"""Resolving secret references at egress (DESIGN §9: secrets are references, never stored).

A payload field classified ``secret`` holds ``secretref:NAME``; the executor resolves it just
before building the request, and only there: ``secretref:`` text in any other field is refused
at intend time (``ledger.intents.check_payload``) and, should an old record hold one, is sent as
the text it is, never resolved. The resolved value never reaches an event, a log line or an
excerpt: it is handed to the adapter for redaction and remembered in
``ledger.redaction.KNOWN_SECRETS`` for the log processor.

Providers (the ``SecretProvider`` seam): :class:`EnvironmentSecrets` (the default,
``OPLEDGER_SECRET_<NAME>``), :class:`FileSecrets` (one file per secret, e.g. ``/run/secrets``);
a vault client is one class with a ``resolve(name)`` method.

A secret shorter than ``MIN_SECRET_CHARS`` is refused (:func:`short_secret`): at the start of
``worker`` and ``serve`` for ``OPLEDGER_SECRET_<NAME>`` (:func:`check_environment_secrets`), when
resolved for a file.

Source: DESIGN §9; issue 14 item 3; issue 27 item 3.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

from ledger.declarations import SECRET_REF_PREFIX, Classification, Integration
from ledger.egress import EgressRequest
from ledger.errors import ConfigurationError, LedgerError
from ledger.operation import Operation
from ledger.redaction import KNOWN_SECRETS

ENV_PREFIX = "OPLEDGER_SECRET_"
MAX_SECRET_FILE_BYTES = 64 * 1024
"""A secret file larger than this is refused (it is not a secret but a mistake), bytes."""
MIN_INTERNAL_REDACT_CHARS = 4
"""``internal`` text values shorter than this are not redacted from excerpts: redacting every
``"1"`` or ``"EUR"`` a provider echoes would garble excerpts without hiding anything."""
MIN_SECRET_CHARS = 8
"""Secrets shorter than this are refused, characters. Every resolved secret is redacted from every
sink in each of its forms (``ledger.redaction``: as is, hex, base64, URL- and JSON-encoded), so a
secret of one or two characters matches inside operation ids and other text and garbles them
(``...5d86[REDACTED]d1add4``) without hiding anything worth hiding. A real token or password is
longer than 8 characters."""


class MissingSecretError(LedgerError):
    """A ``secretref:NAME`` names no known secret. Fix: provide it (e.g. ``OPLEDGER_SECRET_NAME``,
    or the file ``NAME`` in the ``FileSecrets`` directory)."""


class SecretProvider(Protocol):
    """Maps a secret name to its value (the seam for environment, files, a vault)."""

    def resolve(self, name: str) -> str:
        """Return the secret's value. Raises MissingSecretError when unknown."""
        ...


SecretResolver = SecretProvider
"""The former name of :class:`SecretProvider`."""


class EnvironmentSecrets:
    """Secrets from environment variables ``OPLEDGER_SECRET_<NAME>`` (name upper-cased, ``-``,
    ``.`` and ``/`` as ``_``), with an optional fixed mapping that takes precedence (tests, demo)."""

    def __init__(self, fixed: Mapping[str, str] | None = None) -> None:
        self._fixed = dict(fixed or {})

    def resolve(self, name: str) -> str:
        """Return the secret ``name``.

        Raises:
            MissingSecretError: neither the mapping nor the environment has it.
        """
        if name in self._fixed:
            return self._fixed[name]
        key = ENV_PREFIX + name.upper().replace("-", "_").replace(".", "_").replace("/", "_")
        value = os.environ.get(key)
        if value is None:
            raise MissingSecretError(f"secret {name!r} is not configured (set {key})")
        return value


class FileSecrets:
    """Secrets from files under one directory: ``secretref:db/password`` reads
    ``<directory>/db/password`` (UTF-8, one trailing newline removed), as container runtimes
    mount them (``/run/secrets``).

    Args:
        directory: the directory holding the secret files.

    Raises:
        ConfigurationError: ``directory`` is not a directory.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._root = Path(directory).resolve()
        if not self._root.is_dir():
            raise ConfigurationError(f"secret directory {str(self._root)!r} is not a directory")

    def resolve(self, name: str) -> str:
        """Return the content of the file ``name``.

        Raises:
            MissingSecretError: no such file, it lies outside the directory, is unreadable, not
                UTF-8, larger than ``MAX_SECRET_FILE_BYTES`` or shorter than ``MIN_SECRET_CHARS``
                characters (issue 27 item 3).
        """
        path = (self._root / name).resolve()
        if not path.is_relative_to(self._root) or not path.is_file():
            raise MissingSecretError(f"secret {name!r} is not configured (no file {name!r} in the secret directory)")
        try:
            raw = path.read_bytes()
            if len(raw) > MAX_SECRET_FILE_BYTES:
                raise MissingSecretError(f"secret file {name!r} is over {MAX_SECRET_FILE_BYTES} bytes")
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise MissingSecretError(f"secret file {name!r} is unreadable ({type(exc).__name__})") from None
        text = text.removesuffix("\n")
        # Files cannot be listed at start (check_environment_secrets): a short one is refused
        # here, so the operation waits as for a missing secret instead of garbling every sink.
        problem = short_secret(f"secret file {name!r}", text)
        if problem is not None:
            raise MissingSecretError(f"{problem}, too short to redact safely")
        return text


def short_secret(where: str, value: str) -> str | None:
    """What is wrong with a secret too short to redact safely, or None when it is long enough. Pure.

    Args:
        where: where the secret comes from, e.g. ``OPLEDGER_SECRET_CARD`` or ``secret file 'db/pw'``;
            the only thing the answer quotes (never the value).
        value: the secret's value.

    Returns:
        ``OPLEDGER_SECRET_CARD is 1 character long, shorter than 8``, or None.

    Source: issue 27 item 3 ("secrets too short to redact safely"); ``MIN_SECRET_CHARS``.
    """
    if len(value) >= MIN_SECRET_CHARS:
        return None
    length = "empty" if not value else f"{len(value)} character{'s' if len(value) > 1 else ''} long"
    return f"{where} is {length}, shorter than {MIN_SECRET_CHARS}"


def check_environment_secrets(environ: Mapping[str, str]) -> None:
    """Refuse to start while an ``OPLEDGER_SECRET_<NAME>`` variable is too short to redact safely.

    ``opledger worker`` and ``opledger serve`` call it at start, before opening the store: these
    variables are what :class:`EnvironmentSecrets` (the default provider) resolves. Secrets from
    :class:`FileSecrets` cannot be listed at start (the directory may hold other files) and are
    refused when resolved.

    Args:
        environ: the process environment (``os.environ``).

    Raises:
        ConfigurationError: one line naming every short variable and its length, never a value.

    Source: issue 27 item 3; ``MIN_SECRET_CHARS``.
    """
    problems = [problem for key in sorted(environ) if key.startswith(ENV_PREFIX)
                if (problem := short_secret(key, environ[key])) is not None]
    if problems:
        raise ConfigurationError(
            "; ".join(problems) + ": every secret is redacted wherever it appears, so a short one garbles "
            f"ids in logs and stored details; set the real secret ({MIN_SECRET_CHARS} characters or more)")


def resolve_payload(payload: Mapping[str, Any], provider: SecretProvider,
                    integration: Integration | None = None) -> tuple[dict[str, Any], list[str]]:
    """Return the payload with each ``secret`` field's ``secretref:NAME`` resolved, and the
    values adapters must redact from anything they return: the resolved secrets and the
    ``internal`` text values of at least ``MIN_INTERNAL_REDACT_CHARS`` characters.

    Args:
        payload: the intent's payload as stored.
        provider: where secret values come from.
        integration: the operation's declaration; only fields it classifies ``secret`` are
            resolved. None (older callers) treats every ``secretref:`` text as a secret field.

    Raises:
        MissingSecretError: a reference names an unknown secret.

    Source: DESIGN §9; issue 14 item 3 ("resolved only in fields classified secret").
    """
    resolved: dict[str, Any] = {}
    hidden: list[str] = []
    for key, value in payload.items():
        kind = integration.classification_of(key) if integration is not None else Classification.SECRET
        if kind is Classification.SECRET and isinstance(value, str) and value.startswith(SECRET_REF_PREFIX):
            value = provider.resolve(value[len(SECRET_REF_PREFIX):])
            KNOWN_SECRETS.add(value)
            hidden.append(value)
        elif kind is Classification.INTERNAL:
            hidden.extend(_texts(value))
        resolved[key] = value
    return resolved, hidden


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if len(value) >= MIN_INTERNAL_REDACT_CHARS else []
    if isinstance(value, Mapping):
        return [text for item in value.values() for text in _texts(item)]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in _texts(item)]
    return []


def attempt_request(op: Operation, declaration: Integration, secrets: SecretProvider,
                    attempt_id: UUID) -> EgressRequest:
    """The request of ``op``'s attempt ``attempt_id`` under ``declaration``, its payload's
    ``secretref:`` values resolved (:func:`resolve_payload`; the resolved values travel in
    ``EgressRequest.secrets`` so everything stored is redacted of them).

    Raises:
        MissingSecretError: a referenced secret is not set in this worker.
    """
    payload, resolved = resolve_payload(op.payload, secrets, declaration)
    return EgressRequest(
        operation_id=op.id, attempt_id=attempt_id, attempt_number=op.attempts + 1,
        integration=op.integration_name, delivery_mode=op.delivery_mode, target=op.target,
        payload=payload, traceparent=op.traceparent, timeout_seconds=declaration.request_timeout_seconds,
        tenant=op.tenant, secrets=tuple(resolved),
    )
