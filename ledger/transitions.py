"""The transition table, machine-readable: from state, command, event, guards, to state.

One row per way a command moves an operation: the state it is called from, the event it
records, the rules (guards) it checks there, in order, and the state the event leads to. This is
the one source the lifecycle's rules come from: ``ledger.lifecycle`` (which states each command
accepts, what the aggregate's ``_allow`` checks) is computed from it, the aggregate and the
ADR's table are tested against it (tests/unit/test_transition_table.py), and the protocol
model's transitions are generated from it (``docs/model/generate.py``).

A guard is a rule name. Most are the ``rule`` of an ``ledger.transition_errors`` class (the
error the command raises when the rule fails); ``epoch``, ``lease_live`` and ``fence`` are the
fencing rules (``StaleEpochError``, ``LeaseExpiredError``, ``StaleSettlementError``);
``authenticated`` and ``callback_new`` are checked by the inbound adapter and by
``receive_callback`` (ADR 0005); ``attempt_left`` also guards ``start_attempt`` and
``schedule_retry`` (``AttemptBudgetExceededError``). ``to`` is None where the state does not
change. ``when`` names the branch of a command with several outcomes (a callback's outcome, a
resolution, whether a deadline ends it ambiguous).

Source: docs/adr/0001-operation-lifecycle.md (the transition table); issue 33 item 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.status import ACTIVE_STATES
from ledger.status import ExecutionState as E
from ledger.status import SettlementState as S

__all__ = ["GUARDS", "TRANSITIONS", "Transition", "commands", "rows_for", "sources"]

State = E | S


@dataclass(frozen=True, slots=True)
class Transition:
    """One row: ``command`` called from ``source`` records ``event`` when every guard in
    ``guards`` holds, and the operation is then in ``to`` (None: unchanged).

    Attributes:
        source: an execution state, or a settlement state for the settlement commands.
        command: the ``Operation`` method (``intend`` for the constructor).
        event: the event's class name (nested in ``Operation``).
        guards: rule names, in the order the command checks them (see the module docstring).
        to: the state after the event, of the same kind as ``source``; None when unchanged.
        when: the branch this row is, for commands with several outcomes; "" otherwise.
    """

    source: State | None
    command: str
    event: str
    guards: tuple[str, ...]
    to: State | None
    when: str = ""


LATE_OBSERVATION = "LateObservationRecorded"
"""The event a callback records after the outcome, when it contradicts it (issue 12 item 3)."""

_HELD = (E.CLAIMED, E.DISPATCHING, E.ACCEPTED)


def _rows() -> tuple[Transition, ...]:
    t = Transition
    rows = [
        t(None, "intend", "Intended", (), E.PENDING),
        t(E.PENDING, "grant_approval", "ApprovalGranted", ("approval_undecided",), None),
        t(E.PENDING, "deny_approval", "ApprovalDenied", ("approval_undecided",), E.FAILED),
        t(E.PENDING, "void_approval", "ApprovalVoided", ("approval_void",), None),
        t(E.PENDING, "wait_for_budget", "BudgetWaited", ("wait_later", "due"), None),
        t(E.PENDING, "claim", "Claimed", ("approved", "approval_valid", "due"), E.CLAIMED),
        t(E.CLAIMED, "start_attempt", "AttemptStarted",
          ("epoch", "lease_live", "not_cancelled", "approved", "approval_valid", "attempt_left"), E.DISPATCHING),
        t(E.DISPATCHING, "accept", "Accepted", ("epoch", "latest_attempt"), E.ACCEPTED),
        t(E.ACCEPTED, "observe_remote_status", "RemoteStatusObserved", ("epoch",), None),
        t(E.ACCEPTED, "mark_remote_unknown", "RemoteOverdue", ("hard_limit", "deadline_passed"), None),
        t(E.DISPATCHING, "schedule_retry", "RetryScheduled", ("epoch", "latest_attempt", "ambiguity", "attempt_left"),
          E.PENDING),
    ]
    for state in (E.CLAIMED, E.DISPATCHING):
        rows.append(t(state, "wait_for_budget", "BudgetWaited", ("wait_later", "lease_free", "budget_wait_over"),
                      None))
    for state in _HELD:
        rows.append(t(state, "claim", "Claimed", ("lease_free", "budget_wait_over"), None))
        rows.append(t(state, "renew_lease", "LeaseRenewed", ("epoch", "lease_live"), None))
        rows.append(t(state, "fail", "Failed", ("epoch", "latest_attempt"), E.FAILED))
    for state in (E.DISPATCHING, E.ACCEPTED):
        for outcome, to in (("succeeded", E.SUCCEEDED), ("failed", E.FAILED), ("progress", None)):
            rows.append(t(state, "receive_callback", "CallbackReceived",
                          ("authenticated", "callback_new", "latest_attempt"), to, when=outcome))
        rows.append(t(state, "succeed", "Succeeded", ("epoch", "latest_attempt"), E.SUCCEEDED))
        rows.append(t(state, "mark_ambiguous", "Ambiguous", ("epoch", "latest_attempt"), E.AMBIGUOUS))
        rows.append(t(state, "cancel_failed", "CancelFailed", ("epoch", "cancel_requested"), None))
    for state in (E.CLAIMED, E.DISPATCHING):
        rows.append(t(state, "exhaust_budget", "BudgetExhausted", ("epoch", "budget_used"), E.FAILED,
                      when="none_applied"))
        rows.append(t(state, "exhaust_budget", "BudgetExhausted", ("epoch", "budget_used"), E.AMBIGUOUS,
                      when="possibly_applied"))
    for state in sorted(ACTIVE_STATES, key=list(E).index):
        rows.append(t(state, "flag_declaration_mismatch", "DeclarationMismatched", ("digest_differs",), None))
        rows.append(t(state, "request_cancel", "CancelRequested", (), None))
        if state in (E.PENDING, E.CLAIMED):
            rows.append(t(state, "exceed_deadline", "DeadlineExceeded", ("deadline_passed",), E.FAILED,
                          when="none_applied"))
        rows.append(t(state, "exceed_deadline", "DeadlineExceeded", ("deadline_passed",), E.AMBIGUOUS,
                      when="possibly_applied"))
    rows.append(t(E.PENDING, "cancel", "Cancelled", ("cancel_requested",), E.CANCELLED))
    for state in (E.CLAIMED, E.ACCEPTED):
        rows.append(t(state, "cancel", "Cancelled", ("cancel_requested", "lease_free_or_epoch"), E.CANCELLED))
    for state in (E.SUCCEEDED, E.FAILED, E.CANCELLED, E.AMBIGUOUS):
        rows.append(t(state, "receive_callback", "LateObservationRecorded",
                      ("authenticated", "callback_new", "latest_attempt", "contradicts"), None, when="late"))
    rows += [
        t(S.PENDING, "fail_settlement", "SettlementFailed", ("fence", "settlement_tries"), S.PENDING),
        t(S.PENDING, "block_settlement", "SettlementBlocked", ("fence",), S.BLOCKED),
        t(S.PENDING, "settle", "Settled", ("fence",), S.SETTLED),
        t(E.AMBIGUOUS, "resolve", "Resolved", ("not_abandoned", "resolution_fits"), E.SUCCEEDED, when="succeeded"),
        t(E.AMBIGUOUS, "resolve", "Resolved", ("not_abandoned", "resolution_fits"), E.FAILED, when="failed"),
        t(E.AMBIGUOUS, "resolve", "Resolved", ("not_abandoned", "resolution_fits", "attempt_left"), E.PENDING,
          when="retry"),
        t(E.AMBIGUOUS, "resolve", "Resolved", ("not_abandoned", "resolution_fits"), None, when="abandon"),
        t(E.ACCEPTED, "resolve", "Resolved", ("remote_overdue", "resolution_fits"), E.SUCCEEDED, when="succeeded"),
        t(E.ACCEPTED, "resolve", "Resolved", ("remote_overdue", "resolution_fits"), E.FAILED, when="failed"),
        t(S.BLOCKED, "resolve", "Resolved", ("not_abandoned", "resolution_fits"), S.PENDING,
          when="retry_settlement"),
        t(S.BLOCKED, "resolve", "Resolved", ("not_abandoned", "resolution_fits"), None, when="abandon"),
    ]
    rows += [t(state, "note_refused_write", "WriteRefused", ("epoch_if_given",), None) for state in E]
    return tuple(rows)


_ORDER = ("intend", "grant_approval", "deny_approval", "void_approval", "wait_for_budget", "claim",
          "flag_declaration_mismatch", "renew_lease", "start_attempt", "accept", "observe_remote_status",
          "mark_remote_unknown", "receive_callback", "succeed", "fail", "mark_ambiguous", "schedule_retry",
          "request_cancel", "cancel", "cancel_failed", "exceed_deadline", "exhaust_budget", "fail_settlement",
          "block_settlement", "settle", "resolve", "note_refused_write")
# The order the ADR's table lists the commands in (roughly an operation's life); rows of one
# command keep the order they were built in.

TRANSITIONS: tuple[Transition, ...] = tuple(sorted(_rows(), key=lambda row: _ORDER.index(row.command)))
"""Every row of the table (see :class:`Transition`)."""

GUARDS: frozenset[str] = frozenset(g for row in TRANSITIONS for g in row.guards)
"""Every rule name the table uses."""


def rows_for(command: str) -> tuple[Transition, ...]:
    """The rows of ``command``, in table order (empty for an unknown command)."""
    return tuple(row for row in TRANSITIONS if row.command == command)


def sources(command: str, kind: type[E] | type[S] = E) -> frozenset[State]:
    """The states of ``kind`` from which ``command`` records its own event (its rows'
    ``source``; a callback's ``LateObservationRecorded`` from an outcome state is checked before
    the table and is left out).

    Resolutions from accepted work need ``RemoteOverdue`` and come through the aggregate's
    resolution rules (``ledger.lifecycle.RESOLVABLE_*``), not through this set.
    """
    return frozenset(row.source for row in rows_for(command)
                     if isinstance(row.source, kind) and row.event != LATE_OBSERVATION)


def commands() -> tuple[str, ...]:
    """Every command of the table, in first-row order (``intend`` first)."""
    return tuple(dict.fromkeys(row.command for row in TRANSITIONS))
