"""Fault injection at the ledger's commit boundaries: a process kills itself (SIGKILL) there.

For process tests only (``tests/process/test_commit_boundaries.py``): with
``OPLEDGER_FAILPOINT=<boundary>`` (or ``<boundary>@<n>`` for its n-th time, default the first),
the process sends itself SIGKILL when it reaches that boundary: no ``finally``, no flush, no
atexit, exactly as a power cut or the OOM killer would leave the store. Unset, as in production,
a boundary costs one comparison. The boundaries:

=====================  =========================================================================
``claim:before``       a claim (and the attempt it starts) decided, not yet committed
``claim:after``        ``Claimed`` and ``AttemptStarted`` committed (one commit), before egress
``outcome:before``     egress done, its outcome not yet committed
``outcome:after``      the outcome committed (and its settlement, when in the same commit)
``settlement:before``  mid-settlement: the entity's action applied in memory, neither it nor
                       ``Settled`` committed (they commit together, with the outcome when it
                       settles in the outcome's own commit)
``receipt_open:*``     an idempotency receipt's ``ReceiptOpened`` (``:before`` / ``:after`` its commit)
``receipt_complete:*`` a command's effects and its ``ReceiptCompleted`` (one commit), before / after
``callback:before``    ``opledger serve``: an authenticated callback decided, not yet committed
``callback:after``     the callback's fact committed, before the HTTP response
``projection``         mid-projection-batch: status rows written, the batch not committed
``migration``          mid-migration: ``@1`` after the library's tables, before the read-model
                       migrations; ``@2`` after them, before the identity is recorded
``import``             mid-import: ``@1`` .. ``@5``, see ``migrations.legacy_import``
``archive_segment:*``  ``opledger archive``: a segment's files written and flushed under
                       ``seg-NNNNNN.partial``, not renamed (``:before``); renamed into place,
                       neither verified nor recorded (``:after``)
``archive_record:*``   ``:after``: a segment verified and recorded with its index rows, nothing
                       removed yet
``archive_remove:*``   ``:after``: one removal batch committed (``@n``: the n-th), the next not
                       begun
=====================  =========================================================================

In-process tests may instead make a boundary *raise* once (:func:`raise_at`), e.g. an
``OperationalError`` after ``receipt_complete:after`` is a commit whose fate the caller cannot
know (it landed); before it, one that did not land.

Source: issue 16 item 6; issue 15 item 4 (commits of unknown fate); issue 29 item 2 (archive runs).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

FAILPOINT_ENV = "OPLEDGER_FAILPOINT"
OUTCOME_EVENTS = frozenset({"Succeeded", "Failed", "Ambiguous", "Accepted", "RetryScheduled"})
"""Events of an outcome commit (a claim commit may decide a reclaimed attempt ambiguous too)."""
CALLBACK_EVENTS = frozenset({"CallbackReceived", "LateObservationRecorded"})
"""Events of a callback commit (``opledger serve``, ``adapters.http.callbacks``)."""


def _parse(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    name, _, count = value.partition("@")
    return name, int(count) if count.isdigit() and int(count) > 0 else 1


ARMED = _parse(os.environ.get(FAILPOINT_ENV))
"""``(boundary, n)`` when this process was started with a failpoint, else None (read once)."""
_hits = 0
_guard = threading.Lock()
_raising: dict[str, BaseException] = {}
ACTIVE = ARMED is not None
"""Whether any boundary is armed (a SIGKILL failpoint or an in-process :func:`raise_at`)."""


@contextmanager
def raise_at(boundary: str, error: BaseException) -> Iterator[None]:
    """In-process tests: the next time this process reaches ``boundary``, raise ``error``
    (once); disarmed when the block ends."""
    global ACTIVE
    with _guard:
        _raising[boundary] = error
        ACTIVE = True
    try:
        yield
    finally:
        with _guard:
            _raising.pop(boundary, None)
            ACTIVE = ARMED is not None or bool(_raising)


def reached(boundary: str) -> None:
    """Mark that this process reached ``boundary``; SIGKILL it if that is the armed failpoint
    and this is its n-th time."""
    global _hits
    if _raising:
        with _guard:
            error = _raising.pop(boundary, None)
        if error is not None:
            raise error
    if ARMED is None or ARMED[0] != boundary:
        return
    with _guard:
        _hits += 1
        if _hits == ARMED[1]:
            os.kill(os.getpid(), signal.SIGKILL)


def commit_boundaries(event_names: Iterable[str]) -> list[str]:
    """Which ledger commit a batch of events is: ``receipt_complete``, ``receipt_open``,
    ``claim``, ``outcome``, ``settlement``, ``callback``, or none. An outcome settled in its own
    commit (``executors.settlement.CoSettlement``) is both ``outcome`` and ``settlement``: a
    kill at either ``:before`` loses both, and at ``outcome:after`` neither."""
    names = set(event_names)
    if "ReceiptCompleted" in names:
        return ["receipt_complete"]
    if "ReceiptOpened" in names:
        return ["receipt_open"]
    if "Claimed" in names:
        return ["claim"]
    found = []
    if names & OUTCOME_EVENTS:
        found.append("outcome")
    if "Settled" in names:
        found.append("settlement")
    if not found and names & CALLBACK_EVENTS:
        found.append("callback")
    return found
