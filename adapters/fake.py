"""An in-memory adapter for tests, benchmarks and the simulator: instant, scripted, recording.

Source: STYLE rule 13 (test helpers shipped for users); ``ledger.egress.Adapter``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from uuid import UUID

from ledger.egress import EgressRequest
from ledger.outcomes import (
    Accepted,
    Ambiguous,
    CancelConfirmed,
    CancelOutcome,
    Outcome,
    PollResult,
    StillRunning,
    Succeeded,
)

Script = Callable[[EgressRequest], Outcome]
LookupScript = Callable[[EgressRequest], "Outcome | None"]
PollScript = Callable[[EgressRequest, str, int], PollResult]
"""Decides a poll's answer from the request, the remote id and how many polls it answers (1-based)."""
CancelScript = Callable[[EgressRequest, str], CancelOutcome]


class FakeAdapter:
    """An adapter that answers from a script and remembers every request. Thread-safe.

    Args:
        script: decides each ``send``'s outcome; defaults to always ``Succeeded()``. An exception
            it raises propagates, as a bug in a real adapter would.
        lookup_script: decides each ``lookup``'s answer; defaults to :meth:`remembered`.

    Source: ``ledger.egress.Adapter``; DESIGN §5 (``lookup`` for ``recoverable_remote_id``).
    """

    def __init__(self, *, script: Script | None = None, lookup_script: LookupScript | None = None) -> None:
        self._script = script or (lambda request: Succeeded())
        self._lookup_script = lookup_script or self.remembered
        self._lock = threading.Lock()
        self._sent: list[tuple[EgressRequest, Outcome]] = []
        self._lookups: list[EgressRequest] = []

    def send(self, request: EgressRequest) -> Outcome:
        """Record ``request`` and return the script's outcome for it.

        Args:
            request: the attempt.

        Returns:
            Whatever the script returns.
        """
        outcome = self._script(request)
        with self._lock:
            self._sent.append((request, outcome))
        return outcome

    def lookup(self, request: EgressRequest) -> Outcome | None:
        """Record the lookup and return the lookup script's answer.

        Args:
            request: the attempt whose operation is looked up.

        Returns:
            Whatever the lookup script returns.
        """
        with self._lock:
            self._lookups.append(request)
        return self._lookup_script(request)

    def remembered(self, request: EgressRequest) -> Outcome | None:
        """The default lookup: answer from what this fake sent for the operation.

        A ``Succeeded`` or ``Accepted`` is returned as it was; an ``Ambiguous`` counts as
        received and applied (``Succeeded()``), as a lost response usually is; only ``Failed``
        sends, or none at all, mean "never received".

        Args:
            request: the attempt whose operation is looked up.

        Returns:
            The latest applied outcome for ``request.operation_id``, or None.
        """
        with self._lock:
            outcomes = [o for r, o in self._sent if r.operation_id == request.operation_id]
        for outcome in reversed(outcomes):
            if isinstance(outcome, (Succeeded, Accepted)):
                return outcome
            if isinstance(outcome, Ambiguous):
                return Succeeded()
        return None

    def received(self, operation_id: UUID) -> list[EgressRequest]:
        """Return the requests sent for ``operation_id``, oldest first."""
        with self._lock:
            return [r for r, _ in self._sent if r.operation_id == operation_id]

    @property
    def requests(self) -> list[EgressRequest]:
        """Every request sent, oldest first (a copy)."""
        with self._lock:
            return [r for r, _ in self._sent]

    @property
    def lookups(self) -> list[EgressRequest]:
        """Every lookup request, oldest first (a copy)."""
        with self._lock:
            return list(self._lookups)

    @property
    def count(self) -> int:
        """How many requests were sent (lookups not included)."""
        with self._lock:
            return len(self._sent)


class FakeRemoteOperations(FakeAdapter):
    """A :class:`FakeAdapter` whose sends are accepted as remote operations, which it follows
    (``ledger.egress.RemoteOperations``): scripted polls and cancels, every call remembered.

    Args:
        script: decides each ``send``; defaults to ``Accepted(remote_id="op-<operation id>")``.
        poll_script: decides each poll; defaults to ``StillRunning("running")`` for two polls,
            then ``Succeeded()``.
        cancel_script: decides each cancel; defaults to ``CancelConfirmed()``.

    Source: STYLE rule 13 (test helpers shipped for users); docs/adr/0004-accepted-work.md.
    """

    def __init__(self, *, script: Script | None = None, poll_script: PollScript | None = None,
                 cancel_script: CancelScript | None = None) -> None:
        super().__init__(script=script or (lambda request: Accepted(remote_id=f"op-{request.operation_id}")))
        self._poll_script = poll_script or (
            lambda request, remote_id, n: StillRunning(remote_status="running") if n <= 2 else Succeeded())
        self._cancel_script = cancel_script or (lambda request, remote_id: CancelConfirmed())
        self._polls: list[tuple[EgressRequest, str]] = []
        self._cancels: list[tuple[EgressRequest, str]] = []

    def poll(self, request: EgressRequest, remote_id: str) -> PollResult:
        """Record the poll and return the poll script's answer for it."""
        with self._lock:
            self._polls.append((request, remote_id))
            n = sum(1 for r, _ in self._polls if r.operation_id == request.operation_id)
        return self._poll_script(request, remote_id, n)

    def cancel(self, request: EgressRequest, remote_id: str) -> CancelOutcome:
        """Record the cancel and return the cancel script's answer for it."""
        with self._lock:
            self._cancels.append((request, remote_id))
        return self._cancel_script(request, remote_id)

    def polls(self, operation_id: UUID) -> list[str]:
        """The remote ids polled for ``operation_id``, oldest first."""
        with self._lock:
            return [remote for r, remote in self._polls if r.operation_id == operation_id]

    def cancels(self, operation_id: UUID) -> list[str]:
        """The remote ids a cancel was sent for, for ``operation_id``, oldest first."""
        with self._lock:
            return [remote for r, remote in self._cancels if r.operation_id == operation_id]
