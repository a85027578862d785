"""Claims whose commit raised: the store went away mid-commit, and the claim may have landed.

A claim and its ``AttemptStarted`` commit before any egress (DESIGN §7). When that commit's
answer is lost (a terminated connection, a restart), the worker cannot tell whether the store
holds the attempt. Left alone, a landed one would never be sent, and its lease would lapse into
``ambiguous (worker_lost)``: a transient outage turned into operator work (issue 17). So the
calls are kept, and once the store answers the operations are read again: a call whose very
attempt (its random id) the store holds was never sent, and is sent now.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from uuid import UUID

from executors.flights import InFlight
from ledger.operation import Operation


def landed(planned: InFlight | None, op: Operation) -> bool:
    """Whether ``op`` (as stored now) holds ``planned``'s attempt open: its claim landed."""
    return planned is not None and planned.kind == "send" and op.open_attempt_id == planned.request.attempt_id


class UnsureClaims:
    """The calls of claims whose commit raised, until the store answers again. Not
    thread-safe: the claim service holds its lock around every use."""

    def __init__(self) -> None:
        self._calls: dict[UUID, InFlight] = {}

    def add(self, calls: Mapping[UUID, InFlight]) -> None:
        """Keep ``calls`` (operation id to call) of a commit that raised."""
        self._calls.update(calls)

    def recheck(self, load: Callable[[Sequence[UUID]], Mapping[UUID, Operation]],
                submit: Callable[[InFlight], None]) -> None:
        """Read the operations again (``load``, one query) and ``submit`` each call whose claim
        landed; forget the rest. Raises what ``load`` raises while the store is still away
        (the calls are kept for the next pass)."""
        if not self._calls:
            return
        fresh = load(list(self._calls))
        calls, self._calls = self._calls, {}
        for op_id, call in calls.items():
            op = fresh.get(op_id)
            if op is not None and landed(call, op):
                call.op = op
                submit(call)
