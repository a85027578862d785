"""What an authenticated callback is to the operation it names: new, a duplicate, a replay, or
an answer to an attempt the operation does not hold (issue 12 item 3; STYLE rule 16).

The inbound HTTP adapter (``adapters.http.callbacks``) authenticates the message (Standard
Webhooks signature and timestamp tolerance) and then asks :func:`classify_callback`, on the
operation as loaded from the ledger, before recording anything. Because the answer comes from
the operation's own history (``callback_ids``, ``callback_signed_at``), replay detection holds
across restarts and across several ``serve`` processes; two processes recording the same new
callback at once conflict on the operation's version, and the loser asks again.

Source: issue 12 item 3; docs/adr/0005-callback-authentication.md.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Protocol
from uuid import UUID


class CallbackVerdict(StrEnum):
    """How the ledger treats one authenticated callback."""

    NEW = "new"
    """Not seen before and answering the operation's latest attempt: record it
    (``Operation.receive_callback``)."""
    DUPLICATE = "duplicate"
    """Its ``webhook-id`` is recorded and it was signed again (the provider's retry after a lost
    response): answer 200, record nothing."""
    REPLAYED = "replayed"
    """Its ``webhook-id`` is recorded with the same ``webhook-timestamp``: the very message sent
    again, as an attacker replaying a captured request would. Refused (401), nothing recorded."""
    UNKNOWN_ATTEMPT = "unknown_attempt"
    """It answers an attempt that is not the operation's latest (or none was started): refused
    (404), nothing recorded."""


class CallbackState(Protocol):
    """The fields of an operation :func:`classify_callback` reads."""

    callback_ids: set[str]
    callback_signed_at: dict[str, datetime]
    last_attempt_id: UUID | None


def classify_callback(op: CallbackState, *, callback_id: str, attempt_id: UUID, signed_at: datetime) -> CallbackVerdict:
    """Classify an authenticated callback against the operation it names.

    Args:
        op: the operation, as loaded from the ledger.
        callback_id: the message's ``webhook-id``.
        attempt_id: the attempt the (signed) body says it answers.
        signed_at: the message's ``webhook-timestamp`` (UTC, whole seconds).

    Returns:
        The :class:`CallbackVerdict`. A recorded id is judged before the attempt, so a duplicate
        of an accepted callback stays a duplicate after a later attempt.

    Source: Standard Webhooks ("webhook-id ... the same when the message is retried";
    the signature covers ``id.timestamp.body``); issue 12 item 3.
    """
    if callback_id in op.callback_ids:
        if op.callback_signed_at.get(callback_id) == signed_at:
            return CallbackVerdict.REPLAYED
        return CallbackVerdict.DUPLICATE
    if op.last_attempt_id is None or attempt_id != op.last_attempt_id:
        return CallbackVerdict.UNKNOWN_ATTEMPT
    return CallbackVerdict.NEW


ProgressReport = tuple[UUID | None, str | None, str]
"""A recorded ``progress`` callback as compared: (attempt id, remote status, detail), as stored."""


def repeats_progress(last: ProgressReport | None, report: ProgressReport) -> bool:
    """Whether a ``progress`` callback says nothing the last recorded one for the same attempt
    did not: it is acknowledged (200) and no event is recorded, as polling records a remote
    status only when it changes (DESIGN §4, ``RemoteStatusObserved``).

    Args:
        last: the operation's last recorded progress report, or None.
        report: this callback's (attempt id, remote status, detail), in their stored forms.

    Returns:
        True when ``report`` equals ``last`` (same attempt, same status, same detail).

    Source: issue 27 item 4.
    """
    return last is not None and last == report
