"""The claim change of the due-work pass: claim an operation and, in the same commit, start its
attempt, or decide the attempt a previous owner left open (``executors.recovery``). The call
of a started attempt is built here and handed to egress only after the commit
(``executors.claim``), so an attempt is recorded before any byte leaves (DESIGN §7).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate

from executors.commit import Change
from executors.flights import InFlight
from executors.outcomes import apply_decision, terms_of
from executors.recovery import decide_open_attempt
from executors.secrets import MissingSecretError, SecretResolver, attempt_request
from executors.unsure import landed
from ledger.application import LedgerApplication
from ledger.budgets import CallWindow
from ledger.decisions import ClaimStep, Lookup, claim_plan
from ledger.declarations import RetryPolicy
from ledger.egress import Adapter, EgressRequest
from ledger.errors import ConfigurationError, UnknownIntegrationError
from ledger.operation import Operation


@dataclass
class Plan:
    """What the changes of one pass planned, acted on only after their commit."""

    calls: dict[UUID, InFlight] = field(default_factory=dict)
    deferred: dict[UUID, str] = field(default_factory=dict)  # operations this worker cannot serve, why
    windows: dict[str, CallWindow] = field(default_factory=dict)  # call budget windows of this pass
    polls: set[UUID] = field(default_factory=set)  # accepted work claimed for polling


class ClaimChanges:
    """Builds claim changes for one worker.

    Args:
        app: the host application (its registry holds the declarations).
        adapters: adapter name (as declared by integrations) to adapter.
        secrets: resolves ``secretref:`` payload values of the request.
        rng: random source of attempt ids (a seeded run repeats them) and of recovery's jitter.
        worker_id: recorded on ``Claimed``.
        lease_seconds: lease length given at claim, seconds.
    """

    def __init__(self, *, app: LedgerApplication, adapters: Mapping[str, Adapter], secrets: SecretResolver,
                 rng: random.Random, worker_id: str, lease_seconds: float) -> None:
        self.app = app
        self.adapters = dict(adapters)
        self.secrets = secrets
        self.rng = rng
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds

    def claim_change(self, now: datetime, plan: Plan) -> Change:
        """Claim, then in the same commit start an attempt (or decide the open one); the call
        of a started attempt goes into ``plan.calls``. An operation this worker cannot serve
        (a missing secret, declaration or adapter) goes into ``plan.deferred`` and the change
        raises, so it claims nothing.

        Returns:
            A change (``executors.commit.Change``) for ``now`` (UTC).
        """

        def change(op: Operation) -> Sequence[Aggregate]:
            planned = plan.calls.pop(op.id, None)
            if planned is not None and landed(planned, op):
                # A commit of unknown fate landed (its retried insert conflicted with it): send
                # this very attempt rather than leave it to lapse (``executors.unsure``).
                planned.op = op
                plan.calls[op.id] = planned
                return []
            step = claim_plan(op)  # what this claim does next: asked, never restated
            sends = step is ClaimStep.SEND
            try:
                policy = self.app.registry.get(op.integration_name, op.integration_version).retry
                adapter = self.adapter(op)
                request = self.request(op, now) if sends else None
            except (MissingSecretError, UnknownIntegrationError, ConfigurationError) as exc:
                # This worker cannot serve it: a deployment problem, not the operation's
                # outcome. Claim nothing; it waits.
                plan.deferred[op.id] = str(exc)
                raise
            epoch = op.claim(now=now, worker_id=self.worker_id, lease_seconds=self.lease_seconds)
            if step is ClaimStep.CANCEL:
                op.cancel(now=now, epoch=epoch)
            elif step is ClaimStep.RECOVER:
                self._recover(op, epoch, policy, adapter, now, plan)
            elif step is ClaimStep.EXHAUST or request is None:
                op.exhaust_budget(epoch=epoch, now=now, last_attempt_possibly_applied=False)
            else:
                op.start_attempt(epoch=epoch, now=now, attempt_id=request.attempt_id,
                                 request_fingerprint=op.fingerprint)
                plan.calls[op.id] = InFlight(op=op, epoch=epoch, kind="send", request=request, policy=policy,
                                             adapter=adapter, started_at=now)
            return []

        return change

    def _recover(self, op: Operation, epoch: int, policy: RetryPolicy, adapter: Adapter, now: datetime,
                 plan: Plan) -> None:
        # The previous owner died or stalled mid-attempt: its outcome is unknown.
        decision = decide_open_attempt(op, policy, now, self.rng)
        if isinstance(decision, Lookup):
            request = self.request(op, now, attempt_id=op.last_attempt_id)
            plan.calls[op.id] = InFlight(op=op, epoch=epoch, kind="lookup", request=request, policy=policy,
                                         adapter=adapter, started_at=now)
        else:
            apply_decision(op, epoch, decision, now, terms_of(self.app, op, adapter))

    def adapter(self, op: Operation) -> Adapter:
        """The adapter ``op``'s integration names.

        Raises:
            ConfigurationError: this worker has no adapter of that name.
        """
        name = self.app.registry.get(op.integration_name, op.integration_version).adapter
        if name not in self.adapters:
            raise ConfigurationError(f"no adapter {name!r} is configured in this worker")
        return self.adapters[name]

    def request(self, op: Operation, now: datetime, attempt_id: UUID | None = None) -> EgressRequest:
        """The request of ``op``'s attempt ``attempt_id`` (a new id, from the random source,
        when None).

        Raises:
            MissingSecretError: a ``secretref:`` of the payload does not resolve.
        """
        # The attempt id comes from the injected random source, so a seeded run repeats it.
        return attempt_request(op, self.app.registry.get(op.integration_name, op.integration_version), self.secrets,
                               attempt_id or UUID(int=self.rng.getrandbits(128), version=4))
