"""Writes the store refuses: whose problem a refusal is, and what is kept of it. Pure.

A write the database refuses for good (not an outage: ``ledger.outages.is_transient``, not a
version conflict: ``ledger.outages.is_version_conflict``) may be the store's problem (a dropped
table, a revoked permission, a read-only replica: nothing can be written) or one operation's (a
trigger, a ``CHECK``, a row-level security policy or an extension refusing that operation's row
while every other write succeeds). The committer finds the operations whose write is refused
alone by committing the parts of a refused batch (``executors.commit``); :func:`refusal_scope`
then says whose problem it is, from what else the store accepted meanwhile. One operation's
refusal is that operation's problem: it is recorded on it (``Operation.note_refused_write``, a
``WriteRefused`` fact: attention ``write_refused``), and the worker goes on. Only the store's
stops the worker, as before.

Source: issue 35; docs/adr/0002-executor-services.md ("Refused writes").
"""

from __future__ import annotations

from enum import StrEnum

from ledger.facts import FactKind, storable_fact
from ledger.redaction import KNOWN_SECRETS

__all__ = [
    "MAX_REFUSAL_CHARS",
    "PROBE_TRIES",
    "RefusalScope",
    "WriteKind",
    "refusal_scope",
    "refusal_text",
]

PROBE_TRIES = 3
"""Probe writes made before the store is called broken: a store that refuses writes refuses
every one; a trigger refusing some rows at random (1 %, the fault-injection drain) refuses three
in a row about once in a million probes."""

MAX_REFUSAL_CHARS = 1000
"""Characters of the database's error text kept on ``WriteRefused`` (its first line only)."""


class WriteKind(StrEnum):
    """What a refused write was for: the ``kind`` of ``WriteRefused``, and the label of the
    ``opledger_writes_refused_total`` counter (bounded: one of these).

    Source: issue 35 items 2 and 4.
    """

    CLAIM = "claim"
    """``Claimed`` with its ``AttemptStarted`` (refused before egress: nothing was sent)."""
    OUTCOME = "outcome"
    """An attempt's or a lookup's outcome (``Succeeded``, ``Failed``, ``Accepted``,
    ``RetryScheduled``...): recorded as ``Ambiguous`` (``outcome_unstorable``) instead."""
    POLL = "poll"
    """A poll's or a remote cancel's result, or a poll lease's claim."""
    CALLBACK = "callback"
    """An authenticated callback (``opledger serve``)."""
    RENEWAL = "renewal"
    """A lease renewal (``LeaseRenewed``) of an attempt or a poll lease."""
    SETTLEMENT = "settlement"
    """``Settled`` with the entity's change, or a settlement failure: blocked instead."""
    CANCELLATION = "cancellation"
    """``Cancelled``, or an operator's ``CancelRequested``."""
    DEADLINE = "deadline"
    """``DeadlineExceeded`` or ``RemoteOverdue``."""
    OPERATOR = "operator"
    """An operator's action other than a cancellation (``Resolved``, an approval)."""
    COMMAND = "command"
    """A receipts-backed command's commit (``opledger serve``): nothing of it is stored, and no
    operation records it (its intents were never written)."""
    OTHER = "other"
    """Any other write."""


class RefusalScope(StrEnum):
    """Whose problem a refused write is (:func:`refusal_scope`). Source: issue 35 item 1."""

    OPERATION = "operation"
    """The operation's own: the store accepts other writes. Recorded on it; the worker goes on."""
    STORE = "store"
    """The store's: it accepts no write. The worker keeps its outcomes in hand and stops."""
    PROBE = "probe"
    """Not known yet: nothing else was written meanwhile; ask the store with probe writes."""


def refusal_scope(*, accepted: int, probe_refused: bool | None) -> RefusalScope:
    """Whose problem a write is that the store refused when it was made for one operation alone.

    The one rule (STYLE 16). The store is called broken only when writes other than that
    operation's fail too: none of the batch's other writes was accepted, and the probe writes
    (which any working store accepts: ``projections.probe``) were refused every time.

    Args:
        accepted: how many other operations' writes of the same batch the store accepted.
        probe_refused: None when no probe was made; True when the store refused every probe
            write (``PROBE_TRIES``); False when it accepted one.

    Returns:
        ``OPERATION``, ``STORE``, or ``PROBE`` (make the probe writes, then ask again).

    Source: issue 35 item 1; docs/adr/0002-executor-services.md ("Refused writes").
    """
    if probe_refused:
        return RefusalScope.STORE
    if accepted > 0 or probe_refused is False:
        return RefusalScope.OPERATION
    return RefusalScope.PROBE


def refusal_text(error: BaseException) -> str:
    """What is kept of the database's refusal: its SQLSTATE (PostgreSQL) and the first line of
    its message, redacted of every secret this process resolved (``KNOWN_SECRETS``), bounded to
    :data:`MAX_REFUSAL_CHARS` and storable (``ledger.facts``). The message's other lines (a
    PostgreSQL ``DETAIL`` may quote the refused row) are not kept.

    Args:
        error: the error the store raised (the library's wrapper; its cause is the driver's).

    Returns:
        Text for ``WriteRefused.error``, e.g. ``"P0001: refused by trigger opledger_refuse"``.

    Source: issue 35 item 2 ("the database's bounded, redacted error text"); DESIGN §9 (redaction).
    """
    driver: BaseException = error
    current: BaseException | None = error
    while current is not None:
        driver = current
        current = current.__cause__
    code = getattr(getattr(driver, "diag", None), "sqlstate", None) or getattr(driver, "sqlstate", None)
    message = getattr(getattr(driver, "diag", None), "message_primary", None) or str(driver) or type(driver).__name__
    first = message.strip().splitlines()[0] if message.strip() else type(driver).__name__
    text = f"{code}: {first}" if code else first
    text = KNOWN_SECRETS.redact(text)
    if len(text) > MAX_REFUSAL_CHARS:
        text = text[: MAX_REFUSAL_CHARS - 1] + "…"
    return storable_fact(text, FactKind.DETAIL)
