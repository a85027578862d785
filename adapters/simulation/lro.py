"""The simulated long-running-operation provider and the operator who cancels (issue 12).

The ``sim.lro`` integration creates a remote operation on :class:`SimLroProvider`: the create
call is deduped on the operation id (an idempotent provider) and answers ``202`` with the
operation's name; the operation then stays running for a drawn number of polls and ends
``succeeded`` (the effect applied: counted in the shared ground truth), ``failed`` or ``lost``
(later polls get ``404``). A cancel wins, loses, or arrives as the operation completes, as drawn.
Every answer is the facts of an HTTP exchange classified by the real LRO classifier
(``adapters.lro.classify``), so the simulation checks it and the polling service together.

The operator (:class:`CancelPlan`) requests cancellation of some ``sim.lro`` operations at drawn
times; each request is a numbered fault of the plan, so shrinking can take it away.

Source: issue 12 ("the simulator's provider models gain LRO, callback and cancel behaviours").
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from adapters.lro.classify import classify_cancel, classify_create, classify_poll
from adapters.simulation.faults import PROVIDER_FAULTS, Fault, FaultPlan
from adapters.simulation.provider import SimProvider
from adapters.webhook.classify import HttpExchange, TransportFailure
from ledger.application import LedgerApplication
from ledger.clock import Clock
from ledger.egress import EgressRequest
from ledger.errors import LedgerError
from ledger.outcomes import CancelOutcome, Outcome, PollResult
from ledger.status import ACTIVE_STATES

ADAPTER = "sim_lro"
"""The adapter name of the simulated LRO integration."""
INTEGRATION = "sim.lro"
POLL_FAILING_CHANCE = 0.08
"""Per poll: the chance the poll gets no answer (a reset)."""
RETRY_AFTER_CHANCE = 0.2
"""Per running poll: the chance the answer carries ``Retry-After``."""
CANCEL_CHANCE = 0.3
"""Per ``sim.lro`` intent: the chance an operator requests its cancellation later."""
CANCEL_WITHIN_SECONDS = 30.0
RESULTS = (("succeeded", 0.7), ("failed", 0.2), ("lost", 0.1))
CANCELS = (("wins", 0.5), ("loses", 0.3), ("completes", 0.2))


@dataclass
class _Remote:
    name: str
    polls_left: int
    result: str
    cancel: str
    state: str = "running"
    polls: int = 0


class SimLroProvider:
    """A provider of long-running operations (``ledger.egress.Adapter`` and
    ``ledger.egress.RemoteOperations``), sharing its ground truth with ``truth``.

    Args:
        truth: the run's provider: ``applied``, ``delivered``, ``rejected``, ``changes`` and
            ``lines`` are kept there, so the oracle reads one truth.
        faults: the run's fault plan (and random source).
        clock: the simulated clock.
    """

    def __init__(self, *, truth: SimProvider, faults: FaultPlan, clock: Clock) -> None:
        self.truth = truth
        self.faults = faults
        self.clock = clock
        self.remote: dict[UUID, _Remote] = {}

    def send(self, request: EgressRequest) -> Outcome:
        """The create call: create the remote operation once per operation id, then answer."""
        op_id = request.operation_id
        fault = self.faults.pick(PROVIDER_FAULTS)
        if fault is not None:
            self.truth.faults_by_operation.setdefault(op_id, []).append(fault)
        outcome = self._create(op_id, fault)
        self.truth.lines.append(f"{op_id.hex[:8]} lro create {request.attempt_number}, "
                                f"{fault.value if fault else 'ok'} -> {type(outcome).__name__}")
        return outcome

    def _create(self, op_id: UUID, fault: Fault | None) -> Outcome:
        if fault is Fault.REFUSED:
            return self._classify(HttpExchange(failure=TransportFailure.CONNECT, sent=False))
        self.truth.delivered[op_id] += 1
        if fault is Fault.THROTTLED and op_id not in self.remote:
            return self._classify(HttpExchange(status_code=429, headers={"retry-after": "2"}))
        if fault is Fault.REJECTED and op_id not in self.remote:
            self.truth.rejected.add(op_id)
            return self._classify(HttpExchange(status_code=422, excerpt="rejected"))
        remote = self.remote.get(op_id)
        if remote is None:
            rng = self.faults.rng
            remote = self.remote[op_id] = _Remote(name=f"operations/{op_id.hex[:12]}",
                                                   polls_left=rng.randint(0, 6), result=_draw(rng, RESULTS),
                                                   cancel=_draw(rng, CANCELS))
        if fault is Fault.RESPONSE_LOST:
            return self._classify(HttpExchange(failure=TransportFailure.TIMEOUT, sent=True))
        if fault is Fault.APPLIED_5XX:
            return self._classify(HttpExchange(status_code=500, excerpt="internal error"))
        return self._classify(_answer(202, {"name": remote.name, "done": False}))

    def poll(self, request: EgressRequest, remote_id: str) -> PollResult:
        """Answer a poll, moving the remote operation on by its script."""
        op_id = request.operation_id
        remote = self.remote.get(op_id)
        if self.faults.chance(Fault.POLL_FAILING, POLL_FAILING_CHANCE):
            result: PollResult = classify_poll(HttpExchange(failure=TransportFailure.RESET, sent=True),
                                               now=self.clock.now())
        elif remote is None or remote.name != remote_id or remote.state == "lost":
            result = classify_poll(HttpExchange(status_code=404), now=self.clock.now())
        else:
            remote.polls += 1
            if remote.state == "running":
                if remote.polls_left <= 0:
                    self._end(op_id, remote, remote.result)
                remote.polls_left -= 1
            if remote.state == "lost":
                result = classify_poll(HttpExchange(status_code=404), now=self.clock.now())
            else:
                hint = {"retry-after": "3"} if remote.state == "running" and \
                    self.faults.rng.random() < RETRY_AFTER_CHANCE else {}
                exchange = _answer(200, _document(remote), headers=hint)
                result = classify_poll(exchange, now=self.clock.now())
        self.truth.lines.append(f"{op_id.hex[:8]} lro poll, {remote.state if remote else 'unknown'} "
                                f"-> {type(result).__name__}")
        return result

    def cancel(self, request: EgressRequest, remote_id: str) -> CancelOutcome:
        """Answer a cancel by the remote operation's script."""
        op_id = request.operation_id
        remote = self.remote.get(op_id)
        if remote is None or remote.name != remote_id or remote.state == "lost":
            outcome = classify_cancel(HttpExchange(status_code=404), None)
        elif remote.state != "running" or remote.cancel == "loses":
            outcome = classify_cancel(HttpExchange(status_code=409, excerpt="cannot cancel"), None)
        else:
            self._end(op_id, remote, "cancelled" if remote.cancel == "wins" else "succeeded")
            then = classify_poll(_answer(200, _document(remote)), now=self.clock.now())
            outcome = classify_cancel(HttpExchange(status_code=200, body=b"{}"), then)
        self.truth.lines.append(f"{op_id.hex[:8]} lro cancel ({remote.cancel if remote else '-'}) "
                                f"-> {type(outcome).__name__}")
        return outcome

    def lookup(self, request: EgressRequest) -> Outcome | None:
        """Never asked (``sim.lro`` is idempotent); answers as a provider that knows the key."""
        return None if request.operation_id not in self.remote else classify_create(
            _answer(202, {"name": self.remote[request.operation_id].name}), now=self.clock.now())

    def _end(self, op_id: UUID, remote: _Remote, state: str) -> None:
        remote.state = state
        if state == "succeeded":
            self.truth.applied[op_id] += 1  # the effect happened
            self.truth.changes += 1

    def _classify(self, exchange: HttpExchange) -> Outcome:
        return classify_create(exchange, now=self.clock.now())


def _draw(rng: random.Random, table: tuple[tuple[str, float], ...]) -> str:
    roll, edge = rng.random(), 0.0
    for value, weight in table:
        edge += weight
        if roll < edge:
            return value
    return table[-1][0]


def _document(remote: _Remote) -> dict[str, object]:
    document: dict[str, object] = {"name": remote.name, "done": remote.state != "running",
                                   "metadata": {"state": remote.state}}
    if remote.state == "succeeded":
        document["response"] = {"ok": True}
    elif remote.state == "failed":
        document["error"] = {"code": 13, "message": "failed"}
    elif remote.state == "cancelled":
        document["error"] = {"code": 1, "message": "cancelled"}
    return document


def _answer(status: int, document: dict[str, object], headers: dict[str, str] | None = None) -> HttpExchange:
    body = json.dumps(document).encode()
    return HttpExchange(status_code=status, body=body, excerpt=body.decode()[:200], headers=headers or {})


@dataclass
class CancelPlan:
    """Cancellation requests an operator makes during a run, each at its drawn time.

    Attributes:
        due: operation id -> when its cancellation is requested (UTC, simulated).
    """

    due: dict[UUID, datetime] = field(default_factory=dict)

    def consider(self, faults: FaultPlan, op_id: UUID, now: datetime) -> float | None:
        """Maybe plan a cancel of ``op_id`` (a numbered fault); returns its delay, seconds."""
        if not faults.chance(Fault.CANCEL, CANCEL_CHANCE):
            return None
        delay = faults.rng.uniform(0.0, CANCEL_WITHIN_SECONDS)
        self.due[op_id] = now + timedelta(seconds=delay)
        return delay

    def run_due(self, app: LedgerApplication, now: datetime) -> list[str]:
        """Request the cancellations due by ``now``; returns a trace line per request."""
        lines = []
        for op_id, at in sorted(self.due.items(), key=lambda item: item[1]):
            if at > now:
                continue
            del self.due[op_id]
            op = app.get_operation(op_id)
            if op.execution not in ACTIVE_STATES:
                lines.append(f"cancel of {op_id.hex[:8]} not requested: already {op.execution.value}")
                continue
            try:
                op.request_cancel(now=now, principal="operator", reason="simulated")
                app.save(op)
            except LedgerError as exc:
                lines.append(f"cancel of {op_id.hex[:8]} refused: {exc}")
                continue
            lines.append(f"cancel of {op_id.hex[:8]} requested while {op.execution.value}")
        return lines

    def next_at(self) -> datetime | None:
        """When the next planned cancel is due, or None."""
        return min(self.due.values(), default=None)
