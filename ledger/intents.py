"""Checking an intent before it is recorded: target, source, principal, trace context and payload
classification (DESIGN §3 'intent', §9 'secrets are references').

``Operation.intend`` and the aggregate's operator commands call these; each raises the ledger's
usual errors listing every problem at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.declarations import SECRET_REF_PREFIX, Classification, Integration, canonical_json
from ledger.errors import InvalidArgumentError, PayloadError
from ledger.identity import Source
from ledger.redaction import mask_url, url_has_credentials

TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
"""W3C Trace Context ``traceparent`` (version-traceid-parentid-flags)."""
SECRET_NAME = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$")
"""A secret reference's name: a path-like key for a secret store, never climbing out of it."""
TARGET_ADAPTERS = frozenset({"webhook"})
"""Adapters that call a URL: their intents need an http(s) target."""
MAX_PAYLOAD_DEPTH = 32
"""Nesting levels of lists and objects an intent payload may have (the payload object is 1)."""
MAX_LISTED_PROBLEMS = 50
"""Payload problems listed in one ``PayloadError``; the rest are counted."""
MAX_TENANT_CHARS = 200
"""A tenant's length limit, characters."""
MAX_TARGET_CHARS = 2048
"""A target URL's length limit, characters (as the declaration's ``endpoint``)."""
MAX_PRINCIPAL_CHARS = 256
"""A principal's length limit, characters."""
MAX_REASON_CHARS = 1000
"""An operator's reason (cancel, deny) length limit, characters."""
MAX_PURPOSE_CHARS = 200
"""An approval purpose's length limit, characters (as the declaration's ``approval_purpose``)."""
MAX_EVIDENCE_CHARS = 4000
"""An operator's evidence (resolve) length limit, characters."""
MAX_DELEGATION_LINKS = 16
"""Links an intent's delegation chain (``on_behalf_of``) may have."""
MAX_ROLE_CHARS = 200
"""A delegation link's role length limit, characters."""
MAX_ACTION_CHARS = 200
"""A source action's (the authorizing command or event name) length limit, characters."""
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Delegation:
    """One link of an intent's delegation chain: ``principal`` is the one acted for, in
    ``role`` (``"customer"``, ``"tenant-admin"``...). The intent's ``principal`` acts on behalf
    of the first link's principal, which acts for the next, and so on.

    Source: issue 32 item 4 ("a principal acting on behalf of another").
    """

    principal: str
    role: str = ""

    def as_fact(self) -> dict[str, str]:
        """The link as stored on ``Intended.on_behalf_of``."""
        return {"principal": self.principal, "role": self.role}


def check_delegation(on_behalf_of: Sequence[Delegation], source_action: str) -> list[dict[str, str]]:
    """Check an intent's delegation chain and source action; return the chain as stored.

    Raises:
        InvalidArgumentError: a link that is not a :class:`Delegation`, a blank or too long
            principal, a too long role, more than ``MAX_DELEGATION_LINKS`` links, or a source
            action over ``MAX_ACTION_CHARS`` characters.

    Source: issue 32 item 4.
    """
    check_operator_text("source_action", source_action, MAX_ACTION_CHARS)
    if len(on_behalf_of) > MAX_DELEGATION_LINKS:
        raise InvalidArgumentError(f"on_behalf_of has {len(on_behalf_of)} links; the limit is {MAX_DELEGATION_LINKS}")
    chain = []
    for index, link in enumerate(on_behalf_of):
        if not isinstance(link, Delegation):
            raise InvalidArgumentError(f"on_behalf_of[{index}] must be a ledger.Delegation, got {type(link).__name__}")
        check_operator_text(f"on_behalf_of[{index}].principal", link.principal, MAX_PRINCIPAL_CHARS, required=True)
        check_operator_text(f"on_behalf_of[{index}].role", link.role, MAX_ROLE_CHARS)
        chain.append(link.as_fact())
    return chain


def require_principal(principal: str) -> None:
    """Refuse an empty or non-text principal.

    Raises:
        InvalidArgumentError: ``principal`` is not a non-blank string.
    """
    if not isinstance(principal, str) or not principal.strip():
        raise InvalidArgumentError("principal is required: say who decides")
    check_operator_text("principal", principal, MAX_PRINCIPAL_CHARS)


def check_operator_text(name: str, text: str, limit: int, *, required: bool = False) -> None:
    """Refuse operator text (a reason, evidence, a principal) that is not text, is blank when
    required, longer than ``limit`` characters, or holds NUL or a lone surrogate (the ledger
    cannot store those).

    Args:
        name: the field's name, for the message.
        text: what the operator wrote.
        limit: the most characters allowed (``MAX_REASON_CHARS``, ``MAX_EVIDENCE_CHARS``...).
        required: whether blank text is refused.

    Raises:
        InvalidArgumentError: naming the field and the limit.

    Source: issue 14 item 3 ("every operator text field is bounded").
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{name} must be text, got {type(text).__name__}")
    if required and not text.strip():
        raise InvalidArgumentError(f"{name} is required")
    if len(text) > limit:
        raise InvalidArgumentError(f"{name} is {len(text):,} characters; the limit is {limit:,}")
    bad = _UNSTORABLE.search(text)
    if bad is not None:
        raise InvalidArgumentError(f"{name} holds {_describe_char(bad.group())} at character {bad.start()}, "
                                   "which cannot be stored")


def _describe_char(char: str) -> str:
    return "a NUL character" if char == "\x00" else f"a lone surrogate (U+{ord(char):04X})"


def check_intent(integration: Integration, source: Source, target: str | None, principal: str,
                 traceparent: str | None) -> None:
    """Check an intent's target, source, principal and trace context.

    Raises:
        PayloadError: listing every problem found.
    """
    problems: list[str] = []
    found = target_problem(target) if target is not None else None
    if found is not None:
        problems.append(f"target: {found}")
    if target is None and integration.adapter in TARGET_ADAPTERS:
        problems.append("target: none given and the declaration has no endpoint")
    if not isinstance(source.tenant, str) or not source.tenant.strip():
        problems.append("tenant: must not be empty")
    elif len(source.tenant) > MAX_TENANT_CHARS or _UNSTORABLE.search(source.tenant):
        problems.append(f"tenant: must be at most {MAX_TENANT_CHARS} characters, without NUL or lone surrogates")
    if source.effect_index < 0:
        problems.append(f"effect_index: must be >= 0, got {source.effect_index}")
    if not isinstance(principal, str) or not principal.strip():
        problems.append("principal: must not be empty")
    else:
        try:
            check_operator_text("principal", principal, MAX_PRINCIPAL_CHARS)
        except InvalidArgumentError as exc:
            problems.append(f"principal: {exc}")
    if traceparent is not None and not TRACEPARENT.match(traceparent):
        problems.append(f"traceparent: {traceparent!r} is not a W3C traceparent")
    if problems:
        raise PayloadError(integration.name, problems)


def target_problem(target: str) -> str | None:
    """Why ``target`` cannot be an operation's target, or None when it can: an http(s) URL of at
    most ``MAX_TARGET_CHARS`` characters, without credentials, NUL or lone surrogates. A host
    application may check its own input with it before it intends (``intend`` refuses the same).
    """
    if not isinstance(target, str):
        return f"must be text, got {type(target).__name__}"
    if len(target) > MAX_TARGET_CHARS:
        return f"{len(target):,} characters; the limit is {MAX_TARGET_CHARS:,}"
    if not re.match(r"^https?://[^\s/]+", target):
        return f"{mask_url(target)!r} is not an http:// or https:// URL"
    if url_has_credentials(target):
        return ("carries credentials (user:password@); they would be sent as Basic auth and shown to "
                "operators: put them in a payload field classified secret")
    if _UNSTORABLE.search(target):
        return "holds a NUL or a lone surrogate"
    return None


def check_payload(integration: Integration, payload: Mapping[str, Any]) -> None:
    """Check that every payload field is classified, secrets are references (and references only
    in secret fields), values plain storable JSON within the declared limits.

    Refused, each with its path (``payload.items[2].name``): an unclassified field; a secret
    field without a ``secretref:NAME``; ``secretref:`` text in a field not classified secret
    (it would never be resolved there, and resolving it would send any secret to whoever
    controls the field); NUL or a lone surrogate in a key or text; a NaN or infinite number; a
    non-string key or a value that is not JSON data; nesting deeper than ``MAX_PAYLOAD_DEPTH``;
    a canonical JSON size over the declaration's ``max_payload_bytes`` (default 64 KiB).

    Raises:
        PayloadError: listing every problem found, each with its field path.

    Source: DESIGN §9; issue 14 items 3 and 4.
    """
    problems: list[str] = []
    if not isinstance(payload, Mapping):
        raise PayloadError(integration.name, ["payload must be a mapping of field to value"])
    for key, value in payload.items():
        path = f"payload.{key}"
        kind = integration.classification_of(key) if isinstance(key, str) else None
        if not isinstance(key, str):
            problems.append(f"{path}: field names must be text, got {type(key).__name__}")
            continue
        if kind is None:
            problems.append(f"{path}: field is not classified by the declaration")
        elif kind is Classification.SECRET:
            if not (isinstance(value, str) and value.startswith(SECRET_REF_PREFIX)
                    and SECRET_NAME.match(value[len(SECRET_REF_PREFIX):])):
                problems.append(f"{path}: secret fields take a '{SECRET_REF_PREFIX}NAME' reference "
                                "(NAME: letters, digits, '.', '_', '-', '/', no '..'), not a value")
            continue
        # Checked field by field so every bad value is listed with its path, not only the first.
        _check_value(value, path, 2, problems)
    if not problems:
        size = len(canonical_json(dict(payload)))
        if size > integration.max_payload_bytes:
            limit = integration.max_payload_bytes
            problems.append(f"payload: {size:,} bytes of JSON; the declaration allows {limit:,} "
                            "(max_payload_bytes): store large data elsewhere and pass a reference")
    if problems:
        if len(problems) > MAX_LISTED_PROBLEMS:
            problems = problems[:MAX_LISTED_PROBLEMS] + [f"... and {len(problems) - MAX_LISTED_PROBLEMS:,} more"]
        raise PayloadError(integration.name, problems)


def _check_value(value: Any, path: str, depth: int, problems: list[str]) -> None:
    """Append the problems of one non-secret value (and what it holds) to ``problems``."""
    if isinstance(value, str):
        _check_text(value, path, problems)
    elif isinstance(value, bool) or value is None or isinstance(value, int):
        return
    elif isinstance(value, float):
        if not math.isfinite(value):
            problems.append(f"{path}: numbers must be finite, got {value!r}")
    elif isinstance(value, (dict, list, tuple)):
        if depth > MAX_PAYLOAD_DEPTH:
            problems.append(f"{path}: nested deeper than {MAX_PAYLOAD_DEPTH} levels")
        elif isinstance(value, dict):
            _check_object(value, path, depth, problems)
        else:
            for index, item in enumerate(value):
                _check_value(item, f"{path}[{index}]", depth + 1, problems)
    else:
        problems.append(f"{path}: values must be plain JSON data, got {type(value).__name__}")


def _check_text(value: str, path: str, problems: list[str]) -> None:
    if value.startswith(SECRET_REF_PREFIX):
        problems.append(f"{path}: '{SECRET_REF_PREFIX}' references are resolved only in fields classified "
                        "secret; classify the field secret or remove the reference")
    bad = _UNSTORABLE.search(value)
    if bad is not None:
        problems.append(f"{path}: holds {_describe_char(bad.group())} at character {bad.start()}")


def _check_object(value: dict[Any, Any], path: str, depth: int, problems: list[str]) -> None:
    for key, item in value.items():
        if not isinstance(key, str):
            problems.append(f"{path}: keys must be text, got {type(key).__name__}")
            continue
        bad = _UNSTORABLE.search(key)
        if bad is not None:
            problems.append(f"{path}: key {ascii(key)} holds {_describe_char(bad.group())}")
        _check_value(item, f"{path}.{key}", depth + 1, problems)
