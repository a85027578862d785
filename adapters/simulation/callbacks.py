"""Simulated callbacks: the ``callback``-mode provider calls back, and an attacker tries too.

When the simulated provider applies a ``callback``-mode delivery, it plans a signed callback
(Standard Webhooks, the integration's callback secret) reporting ``succeeded``. The plan is
drawn from the run's seed:

- **delayed**: it arrives after a drawn delay, sometimes past the ``accepted`` deadline (late
  after the deadline: the ledger must record a late observation, never a second outcome);
- **duplicate**: the provider sends it again, signed again later (the ledger must answer
  duplicate and record nothing);
- **forged**: an attacker sends a callback for the operation signed with another secret,
  claiming ``failed`` (refused, nothing recorded);
- **replayed**: an attacker re-sends the provider's message byte for byte, inside or outside
  the timestamp tolerance (refused, nothing recorded).

Every message goes through the inbound adapter's own path (``adapters.http.callbacks``:
``authenticated`` then ``record``) on the simulated clock. The oracle checks what was recorded
against :attr:`SimCallbacks.genuine`: only the provider's own messages may change anything, each
at most once.

Source: issue 12 item 7 ("provider models gain callback behaviours"); docs/adr/0005-callback-authentication.md.
"""

from __future__ import annotations

import base64
import heapq
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from uuid import UUID

from adapters.http.callback_auth import DEFAULT_TOLERANCE_SECONDS, callback_secret_name
from adapters.http.callbacks import authenticated, record
from adapters.http.problems import Problem
from adapters.partner.callbacks import callback_body, signed_headers
from adapters.simulation.faults import Fault, FaultPlan
from adapters.simulation.model import SimApp, integration_name
from executors.secrets import EnvironmentSecrets
from ledger.clock import Clock
from ledger.declarations import DeliveryMode
from ledger.egress import EgressRequest

CALLBACK_SECRET = "whsec_" + base64.b64encode(b"simulated-provider-callback-key!").decode()
ATTACKER_SECRET = "whsec_" + base64.b64encode(b"an-attacker-without-the-real-key").decode()
DELAY_SECONDS = (0.05, 30.0)
"""A callback's usual delay after the provider applied the effect, seconds (uniform)."""
LATE_DELAY_SECONDS = (125.0, 200.0)
"""A late callback's delay: past the simulated ``accepted`` deadline (120 s)."""
CALLBACK_FAULTS: dict[Fault, float] = {
    Fault.CALLBACK_LATE: 0.1,
    Fault.CALLBACK_DUPLICATE: 0.15,
    Fault.CALLBACK_FORGED: 0.1,
    Fault.CALLBACK_REPLAYED: 0.15,
}
"""Per applied ``callback``-mode delivery: the chance of each callback behaviour."""
LOST_CHANCE = 0.05
"""Per applied delivery: the chance the provider never calls back (the deadline must end it)."""


class Sender(StrEnum):
    """Who sends a planned message."""

    PROVIDER = "provider"
    ATTACKER = "attacker"


@dataclass(frozen=True)
class _Message:
    op_id: UUID
    kind: str  # "callback", "duplicate", "forged", "replayed"
    sender: Sender
    callback_id: str
    body: bytes


class SimCallbacks:
    """Plans and delivers callbacks on the simulated clock.

    Args:
        app: the run's host application (written by ``record``).
        faults: the run's fault plan (draws each behaviour).
        rng: the run's random source (delays).
        clock: the simulated clock.

    Attributes:
        genuine: ``(operation id, callback id, outcome)`` of every message the provider signed.
        lines: trace lines (the run moves them to its trace).
    """

    def __init__(self, *, app: SimApp, faults: FaultPlan, rng: random.Random, clock: Clock) -> None:
        self.app = app
        self.faults = faults
        self.rng = rng
        self.clock = clock
        self.genuine: set[tuple[UUID, str, str]] = set()
        self.lines: list[str] = []
        self._queue: list[tuple[datetime, int, _Message]] = []
        self._sequence = 0
        self._captured: dict[str, dict[str, str]] = {}  # the provider's first messages, as overheard
        self._integration = integration_name(DeliveryMode.CALLBACK)
        self._secrets = EnvironmentSecrets({callback_secret_name(self._integration): CALLBACK_SECRET})

    def on_applied(self, request: EgressRequest) -> None:
        """The provider applied ``request``'s effect: plan its callback (``callback`` mode only)."""
        if request.delivery_mode is not DeliveryMode.CALLBACK:
            return
        if self.faults.chance(Fault.CALLBACK_LOST, LOST_CHANCE):
            return
        behaviour = self.faults.pick(CALLBACK_FAULTS)
        op_id, now = request.operation_id, self.clock.now()
        body = callback_body(operation_id=str(op_id), attempt_id=str(request.attempt_id), detail="applied")
        callback_id = f"msg_{op_id.hex[:12]}_{request.attempt_number}"
        low, high = LATE_DELAY_SECONDS if behaviour is Fault.CALLBACK_LATE else DELAY_SECONDS
        first = now + timedelta(seconds=self.rng.uniform(low, high))
        self._plan(first, _Message(op_id, "callback", Sender.PROVIDER, callback_id, body))
        if behaviour is Fault.CALLBACK_DUPLICATE:
            self._plan(first + timedelta(seconds=self.rng.uniform(1.0, 20.0)),
                       _Message(op_id, "duplicate", Sender.PROVIDER, callback_id, body))
        elif behaviour is Fault.CALLBACK_FORGED:
            forged = callback_body(operation_id=str(op_id), attempt_id=str(request.attempt_id), outcome="failed")
            self._plan(now + timedelta(seconds=self.rng.uniform(*DELAY_SECONDS)),
                       _Message(op_id, "forged", Sender.ATTACKER, callback_id + "_f", forged))
        elif behaviour is Fault.CALLBACK_REPLAYED:
            # The attacker captures the provider's first message and sends it again, sometimes
            # inside the tolerance (a replay), sometimes long after (stale).
            after = self.rng.choice((self.rng.uniform(1.0, 60.0), DEFAULT_TOLERANCE_SECONDS + self.rng.uniform(1, 60)))
            self._plan(first + timedelta(seconds=after),
                       _Message(op_id, "replayed", Sender.ATTACKER, callback_id, body))

    def run_once(self, now: datetime) -> int:
        """Deliver every message due by ``now``; returns how many."""
        sent = 0
        while self._queue and self._queue[0][0] <= now:
            at, _, message = heapq.heappop(self._queue)
            self._deliver(message, at)
            sent += 1
        return sent

    def next_event_at(self) -> datetime | None:
        """When the next planned message is due (UTC), or None."""
        return self._queue[0][0] if self._queue else None

    def _deliver(self, message: _Message, at: datetime) -> None:
        if message.kind == "replayed":  # the overheard bytes and headers, unchanged
            headers = self._captured[message.callback_id]
        else:
            secret = ATTACKER_SECRET if message.sender is Sender.ATTACKER else CALLBACK_SECRET
            headers = signed_headers(secret, callback_id=message.callback_id, at=at, body=message.body)
        if message.sender is Sender.PROVIDER:
            self.genuine.add((message.op_id, message.callback_id, "succeeded"))
            self._captured.setdefault(message.callback_id, headers)
        now = self.clock.now()
        try:
            signed, body = authenticated(self.app, integration=self._integration, headers=headers, raw=message.body,
                                         now=now, secrets=self._secrets, tolerance_seconds=DEFAULT_TOLERANCE_SECONDS)
            receipt = record(self.app, integration=self._integration, signed=signed, body=body, now=now)
            answer = f"200 {receipt.result}" + (f" {receipt.fact}" if receipt.fact else "")
        except Problem as problem:
            answer = f"{problem.body.status} {problem.body.detail}"
        self.lines.append(f"{message.op_id.hex[:8]} {message.kind} callback ({message.sender.value}) -> {answer}")

    def _plan(self, at: datetime, message: _Message) -> None:
        self._sequence += 1
        heapq.heappush(self._queue, (at, self._sequence, message))
