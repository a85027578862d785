"""What the console shows beside an operation's fields: the actions the requesting token may take
on it now, those its roles may not (and why), and the link to its trace in a tracing UI.

The actions come from the rule the aggregate's commands enforce (``ledger.operator_actions``),
narrowed by the token's roles (``adapters.http.auth.ACTION_ROLES``), the approval policy the store
runs with, and whether this server may write; so the console never offers what the API would
refuse, and restates no rule in JavaScript.

Source: issue 31 item 5.
"""

from __future__ import annotations

import unicodedata
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from adapters.http.auth import ACTION_ROLES, TokenGrant
from adapters.runtime import Store
from ledger.approvals import load_policy
from ledger.errors import CorruptRecordError, UnknownIntegrationError
from ledger.operator_actions import ACTIONS, ActionName, approval_refusal, state_allows

TRACE_ID_PLACEHOLDER = "{trace_id}"
"""Where ``OPLEDGER_TRACE_URL_TEMPLATE`` puts an operation's W3C trace id (32 hex digits)."""
READ_ONLY = "this server opened the store read-only: act through the process that owns it"


def check_trace_template(template: str) -> str:
    """``template`` when it is a usable tracing UI link, else a ValueError saying why. Pure.

    Args:
        template: ``OPLEDGER_TRACE_URL_TEMPLATE``, e.g.
            ``http://localhost:16686/trace/{trace_id}`` (Jaeger) or
            ``https://grafana.example/explore?left={"queries":[{"query":"{trace_id}"}]}``; empty: no link.

    Raises:
        ValueError: not an http(s) URL with a host, holding white space or a control character
            (a URL carries them percent-encoded, RFC 3986 §2.1), or without ``{trace_id}``.
    """
    if not template:
        return template
    if not template.startswith(("http://", "https://")) or not urlsplit(template).netloc:
        raise ValueError("must be an http:// or https:// URL with a host")
    if any(char.isspace() or unicodedata.category(char) == "Cc" for char in template):
        raise ValueError("must not hold white space or control characters (percent-encode them, e.g. %20)")
    if TRACE_ID_PLACEHOLDER not in template:
        raise ValueError(f"must contain {TRACE_ID_PLACEHOLDER} where the trace id goes")
    return template


def trace_link(template: str, trace_id: str | None) -> str | None:
    """The tracing UI's URL of ``trace_id`` by ``template`` (checked by
    :func:`check_trace_template`), or None when either is missing. Pure."""
    if not template or not trace_id:
        return None
    return template.replace(TRACE_ID_PLACEHOLDER, trace_id)


def role_actions(grant: TokenGrant) -> list[ActionName]:
    """The operator actions ``grant``'s roles may take (where a state allows), in ``ACTIONS`` order."""
    return [action for action in ACTIONS if ACTION_ROLES[action] in grant.roles]


def offers_for(store: Store, op_id: UUID, grant: TokenGrant, *, writable: bool) -> dict[str, list[dict[str, Any]]]:
    """The actions ``grant`` may take on the operation now, and those withheld from it.

    Args:
        store: the open store.
        op_id: an operation that exists.
        grant: the requesting token's principal and roles.
        writable: whether this server may record actions.

    Returns:
        ``{"actions": [{"action", "resolutions"}], "withheld": [{"action", "reason"}]}``; both
        empty for an operation whose records this code cannot read.
    """
    try:
        op = store.app.get_operation(op_id)
    except CorruptRecordError:
        return {"actions": [], "withheld": []}
    actions: list[dict[str, Any]] = []
    withheld: list[dict[str, Any]] = []
    for offer in state_allows(op):
        role = ACTION_ROLES[offer.action]
        reason = None
        if role not in grant.roles:
            reason = f"needs the {role} role; {grant.principal} has {', '.join(grant.roles)}"
        elif not writable:
            reason = READ_ONLY
        elif offer.action == "approve":
            reason = approval_refusal(op, grant.principal, grant.roles, _purpose(store, op),
                                      load_policy(store.settings.approval_policy))
        if reason is None:
            actions.append({"action": offer.action, "resolutions": list(offer.resolutions)})
        else:
            withheld.append({"action": offer.action, "reason": reason})
    return {"actions": actions, "withheld": withheld}


def _purpose(store: Store, op: Any) -> str:
    try:
        return str(store.app.registry.get(op.integration_name, op.integration_version).approval_purpose)
    except UnknownIntegrationError:
        return ""
