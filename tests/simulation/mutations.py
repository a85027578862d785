"""Six bugs planted on purpose, each behind a context manager, to prove the simulator finds
them (issue 11 "Mutation check"). They patch product code for the duration of a test only; no
shipped code path knows about them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from unittest import mock

from eventsourcing.domain import Aggregate

from executors import attempts, settlement
from ledger import decisions, modes
from ledger.declarations import DeliveryMode
from ledger.operation import Operation
from ledger.settlement import SettlementOutcome


@contextmanager
def retry_ambiguous_non_idempotent() -> Iterator[None]:
    """Bug 1: a non_idempotent attempt that may have applied is retried like an idempotent one."""
    rules = dataclasses.replace(modes.RULES[DeliveryMode.NON_IDEMPOTENT],
                                after_lost_response=modes.AfterLostResponse.RETRY, retries_possibly_applied=True)
    with mock.patch.dict(modes.RULES, {DeliveryMode.NON_IDEMPOTENT: rules}):
        yield


@contextmanager
def forget_crashed_attempt() -> Iterator[None]:
    """Bug 2: recovery does not count the attempt a crashed worker left open."""
    real = attempts.decide_open_attempt

    def forgetful(op: Operation, *args: Any, **kwargs: Any) -> Any:
        op.attempts = max(0, op.attempts - 1)
        return real(op, *args, **kwargs)

    with mock.patch.object(attempts, "decide_open_attempt", forgetful):
        yield


@contextmanager
def settle_twice_on_duplicate() -> Iterator[None]:
    """Bug 3: the outcome is applied to the entity again, as a duplicate delivery of it would."""
    real = settlement.settle_change

    def doubled(app: Any, now: datetime, entities: Any = None, **kwargs: Any) -> Any:
        change = real(app, now, entities, **kwargs)

        def twice(op: Operation) -> Sequence[Aggregate]:
            saved = change(op)
            for entity in saved:
                action = app.registry.get(op.integration_name, op.integration_version).settlement
                getattr(entity, action.method)(SettlementOutcome.of(op))
            return saved

        return twice

    with mock.patch.object(settlement, "settle_change", doubled):
        yield


@contextmanager
def accept_unsigned_callbacks() -> Iterator[None]:
    """Bug 4: the callback route takes the message's headers at their word, signature unchecked."""
    from adapters.http import callbacks
    from adapters.http.callback_auth import SignedMessage

    def trusting(verifier: Any, headers: Any, body: bytes, *, now: datetime, tolerance_seconds: float) -> Any:
        lowered = {k.lower(): v for k, v in headers.items()}
        return SignedMessage(lowered["webhook-id"], datetime.fromtimestamp(int(lowered["webhook-timestamp"]), UTC))

    with mock.patch.object(callbacks, "authenticate", trusting):
        yield


@contextmanager
def ignore_refused_writes() -> Iterator[None]:
    """Bug 5: workers take an operation again after the store refused a write for it (issue 35):
    what is due is judged as if no ``WriteRefused`` were recorded."""
    real = decisions.due_at

    def ignoring(op: Any) -> Any:
        refused = getattr(op, "write_refused", None)
        if refused is None:
            return real(op)
        op.write_refused = None  # the simulator runs one thread: put back before anyone else reads it
        try:
            return real(op)
        finally:
            op.write_refused = refused

    with mock.patch.object(decisions, "due_at", ignoring):
        yield


@contextmanager
def settle_ignoring_the_policy() -> Iterator[None]:
    """Bug 6: settlement never asks the settlement policy (issue 32): what the host's
    authorization denies is settled into the entity all the same."""
    with mock.patch.object(settlement, "_ask", lambda policy, request: None):
        yield


MUTATIONS = {
    "retry_ambiguous_non_idempotent": retry_ambiguous_non_idempotent,
    "forget_crashed_attempt": forget_crashed_attempt,
    "settle_twice_on_duplicate": settle_twice_on_duplicate,
    "accept_unsigned_callbacks": accept_unsigned_callbacks,
    "ignore_refused_writes": ignore_refused_writes,
    "settle_ignoring_the_policy": settle_ignoring_the_policy,
}
