"""The worker: composes the executor services of one process and owns their threads.

Each service has one concern and one shape (``Config``, ``run_once(now) -> Counts``; STYLE
rule 11): the due-work pass (``claim``), egress, outcome recording, polling of accepted work,
settlement and lease renewal.
A cycle reads the clock once and runs them in the order below; ``run`` is only the loop and the
graceful stop. The deterministic simulator drives the same services through ``run_once(now)``
with ``inline`` egress, a fake clock and an in-memory store.

Source: DESIGN §7; docs/adr/0002-executor-services.md (the order, and the shutdown steps).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

import structlog

from executors.activity import DEFAULT_SUMMARY_INTERVAL_SECONDS, ActivitySummary, store_gauges
from executors.claim import DEFAULT_BATCH_SIZE, ClaimConfig, ClaimService
from executors.commit import Committer, Counts
from executors.egress import (
    DEFAULT_EGRESS_SLOTS,
    DEFAULT_EGRESS_THREADS,
    DEFAULT_PER_HOST_SLOTS,
    EgressConfig,
    EgressService,
)
from executors.leases import LeaseConfig, LeaseService
from executors.outcomes import OutcomeService
from executors.polling import DEFAULT_POLL_LEASE_SECONDS, PollingConfig, PollingService
from executors.secrets import EnvironmentSecrets, SecretResolver
from executors.settlement import SettlementConfig, SettlementService
from ledger.application import LedgerApplication
from ledger.clock import Clock
from ledger.config import DEFAULT_LEASE_SECONDS, DEFAULT_POLL_INTERVAL_SECONDS
from ledger.egress import Adapter
from ledger.facts import describe
from ledger.operation import Operation
from ledger.outages import backoff_seconds, is_transient, refresh_connections
from ledger.persistence import APPENDED_PAYLOAD
from ledger.settlement import SettlementPolicy, default_settlement_policy
from projections.status import StatusProjection
from projections.view import StatusView

log = structlog.get_logger("opledger.worker")

DEFAULT_GRACE_SECONDS = 10.0
"""How long a stopping worker waits for calls in flight to finish and be recorded, seconds."""
STOP_POLL_SECONDS = 0.05
"""How often a stopping worker records what finished, seconds."""
COALESCE_SECONDS = 0.005
"""A woken worker starts its next cycle at least this long after the last one began, seconds:
wake-ups (one per NOTIFY) then cost at most 200 cycles a second, each taking what arrived.
20 ms cost pickup latency (p99 28-35 ms against 17-22 at 5 ms, at 200 intents a second) and
bought no end-to-end rate that a run could tell from noise (docs/performance.md)."""


@dataclass(frozen=True)
class WorkerConfig:
    """Worker settings (each service's own config is derived from these).

    Attributes:
        worker_id: unique per worker process (recorded on ``Claimed``).
        lease_seconds: lease length, seconds.
        batch_size: due rows read per cycle, at least.
        egress_slots: concurrent egress calls at most (``executors.egress``).
        egress_per_host: concurrent egress calls at most to one target host.
        egress_threads: egress threads at most, for adapters without an event loop of their own
            (started as calls need them).
        poll_interval_seconds: idle wait between cycles, seconds.
        inline_egress: make calls inside ``run_once`` instead of on threads (simulator, tests).
        poll_lease_seconds: how long a poll lease holds accepted work, seconds
            (``executors.polling``; ADR 0004).
        summary_interval_seconds: how often the worker logs its summary line, seconds
            (``executors.activity``); 0 never.
        settlement_policy: asked before every settlement (``ledger.settlement``;
            ``OPLEDGER_SETTLEMENT_POLICY``); None: the default, exactly the declared method.
    """

    worker_id: str
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    batch_size: int = DEFAULT_BATCH_SIZE
    egress_slots: int = DEFAULT_EGRESS_SLOTS
    egress_per_host: int = DEFAULT_PER_HOST_SLOTS
    egress_threads: int = DEFAULT_EGRESS_THREADS
    poll_interval_seconds: float = DEFAULT_POLL_INTERVAL_SECONDS
    inline_egress: bool = False
    poll_lease_seconds: float = DEFAULT_POLL_LEASE_SECONDS
    summary_interval_seconds: float = DEFAULT_SUMMARY_INTERVAL_SECONDS
    settlement_policy: SettlementPolicy | None = None


class Worker:
    """Executes due operations of one host application.

    Args:
        app: the host application (its log holds the operations).
        view: the status view, to find due work.
        adapters: adapter name (as declared by integrations) to adapter.
        clock: injected UTC clock (read once per cycle).
        config: :class:`WorkerConfig`.
        secrets: resolves ``secretref:`` payload values at egress.
        rng: random source for row order, attempt ids and retry jitter (the simulator seeds it).
        projection: when this worker also keeps the status projection (the SQLite owner), each
            cycle first applies new log entries to it.
        on_committed: called with the operations of each successful commit (their committed
            state); the runtime hands them to this process's status projection (``offer``).
        egress: the egress service to use instead of one built from ``config`` (the simulator
            passes one whose calls take simulated time).
    """

    def __init__(self, *, app: LedgerApplication, view: StatusView, adapters: Mapping[str, Adapter],
                 clock: Clock, config: WorkerConfig, secrets: SecretResolver | None = None,
                 rng: random.Random | None = None, projection: StatusProjection | None = None,
                 on_committed: Callable[[Iterable[Operation]], None] | None = None,
                 egress: EgressService | None = None) -> None:
        self.app = app
        self.clock = clock
        self.config = config
        self.projection = projection
        self.stopping = threading.Event()
        self._cycle_began = 0.0  # monotonic start of the last cycle
        self._outage_since: float | None = None  # monotonic start of the outage being ridden out
        self._outage_retries = 0
        self._idling = False  # waiting in ``_idle``: the last cycle found nothing to do
        rng = rng or random.Random()
        self.committer = Committer(app, on_committed=on_committed)
        self.summary = ActivitySummary(interval_seconds=config.summary_interval_seconds,
                                       gauges=lambda: store_gauges(view, clock.now()))
        self.egress = egress or EgressService(clock=clock, config=EgressConfig(
            slots=config.egress_slots, per_host=config.egress_per_host, threads=config.egress_threads,
            inline=config.inline_egress))
        self.settlement = SettlementService(committer=self.committer, config=SettlementConfig(
            policy=config.settlement_policy or default_settlement_policy))
        self.polling = PollingService(committer=self.committer, egress=self.egress, settlement=self.settlement,
                                      adapters=adapters, rng=rng,
                                      config=PollingConfig(worker_id=config.worker_id,
                                                           lease_seconds=config.poll_lease_seconds),
                                      stopping=self.stopping)
        self.outcomes = OutcomeService(committer=self.committer, egress=self.egress, settlement=self.settlement,
                                       rng=rng, follow=self.polling.receive)
        self.leases = LeaseService(committer=self.committer, egress=self.egress,
                                   config=LeaseConfig(lease_seconds=config.lease_seconds))
        self.claims = ClaimService(
            committer=self.committer, view=view, egress=self.egress, settlement=self.settlement,
            adapters=adapters, secrets=secrets or EnvironmentSecrets(), rng=rng,
            config=ClaimConfig(worker_id=config.worker_id, lease_seconds=config.lease_seconds,
                               batch_size=config.batch_size), polling=self.polling)

    @property
    def in_flight(self) -> int:
        """Egress calls (and lookups) started and not yet recorded."""
        return len(self.egress.in_flight)

    def run_once(self, now: datetime | None = None) -> Counts:
        """One cycle at ``now`` (default: the clock, read once): keep the projection (if this
        worker keeps it), make inline calls, record finished calls, follow accepted work (record
        polls, renew poll leases, send due polls), settle what they ended, renew leases, then do
        due work (unless stopping).

        Returns:
            :class:`Counts` of what was committed.
        """
        given, now = now, self.clock.now() if now is None else now
        if self.projection is not None:
            try:
                self.projection.run_once()
            except Exception:  # the view lags; egress, outcomes and settlement carry on
                log.exception("status projection failed; retrying next cycle")
        counts = Counts()
        if not self.stopping.is_set():  # an intent announced since the last cycle goes first
            counts.add(self.claims.pickup(now))
        for service in (self.egress, self.outcomes, self.polling, self.settlement, self.leases):
            counts.add(service.run_once(now))
            if not self.stopping.is_set():
                # New intents announced meanwhile are claimed now, at the time of this pass,
                # rather than after the cycle's remaining passes (issue 17, pickup latency).
                counts.add(self.claims.pickup(self.clock.now() if given is None else given))
        if not self.stopping.is_set():
            counts.add(self.claims.run_once(now))
        return counts

    def run(self, stop: threading.Event, *, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> None:
        """Cycle until ``stop`` is set, then stop gracefully (the loop only; the work is
        :meth:`run_once`).

        Shutdown steps, in order:
        1. take no new work (``stopping``): the due-work pass no longer runs;
        2. keep recording, settling and renewing while calls finish, for at most
           ``grace_seconds`` of the monotonic clock (never the domain clock, which a test or
           a skewed host may hold still);
        3. return, logging the calls still in flight: their leases expire and recovery
           decides them by delivery mode. ``close`` then stops the egress threads.
        """
        while not stop.is_set():
            self._cycle_began = time.monotonic()
            counts = self._cycle(stop)
            if counts is not None:
                self.summary.add(counts)
            if counts is not None and not counts.busy:
                self._idle(stop)
        self.stopping.set()
        deadline = time.monotonic() + grace_seconds
        while self.egress.in_flight and time.monotonic() < deadline:
            self._cycle(None)
            self.egress.wait(min(STOP_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        if self.egress.in_flight:
            log.warning("stopping with attempts in flight; recovery will decide them",
                        operations=[str(f.op.id) for f in self.egress.flights()])

    @property
    def degraded(self) -> bool:
        """True while the store is unreachable (an outage is being ridden out)."""
        return self._outage_since is not None

    def _cycle(self, stop: threading.Event | None) -> Counts | None:
        """One :meth:`run_once`, riding out a store outage: a transient error
        (``ledger.outages.is_transient``) is logged once per outage, then the cycle is retried
        after a growing backoff (``ledger.outages.BACKOFF``); outcomes in hand are kept
        (``EgressService.put_back``). Any other error propagates: retrying cannot fix it.

        Returns:
            The cycle's counts, or None when the store was unreachable.
        """
        try:
            counts = self.run_once()
        except Exception as exc:
            if not is_transient(exc):
                raise
            self.outage(exc)
            wait = backoff_seconds(self._outage_retries)
            if stop is not None:
                stop.wait(wait)
            else:
                time.sleep(min(wait, STOP_POLL_SECONDS))
            return None
        if self._outage_since is not None:
            log.warning("store reachable again", outage_seconds=round(time.monotonic() - self._outage_since, 3),
                        retries=self._outage_retries)
            self._outage_since, self._outage_retries = None, 0
        return counts

    def outage(self, exc: BaseException) -> None:
        """Take note of a transient store error that cut a cycle short: the calls' operations
        may hold changes a failed commit made in memory only (reloaded before use), dead pooled
        connections are replaced, and the first error of an outage is logged. ``_cycle`` calls
        it; so does the simulator, which runs the services one by one."""
        self._outage_retries += 1
        self.egress.mark_stale()
        refresh_connections(self.app, self.claims.view)
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            log.warning("store unreachable; retrying with backoff", error=describe(exc),
                        in_flight=len(self.egress.in_flight))

    def _idle(self, stop: threading.Event) -> None:
        # Wait for the poll interval, a finished call or ``stop``, whichever comes first: a long
        # poll interval must not delay noticing SIGTERM (checked every STOP_POLL_SECONDS).
        deadline = time.monotonic() + self.config.poll_interval_seconds
        self._idling = True
        try:
            self._wait_idle(stop, deadline)
        finally:
            self._idling = False

    def _wait_idle(self, stop: threading.Event, deadline: float) -> None:
        while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
            if self.egress.wait(min(left, STOP_POLL_SECONDS)):
                # Woken (a finished call, a NOTIFY): let what else is arriving join this cycle,
                # so a busy store does not cost one cycle (and its queries) per event. Not for
                # appended events: the cycle claims them first (pickup latency, issue 17).
                if self.claims.tail.fresh:
                    return
                gap = self._cycle_began + COALESCE_SECONDS - time.monotonic()
                if gap > 0:
                    stop.wait(gap)
                return

    def wake(self) -> None:
        """Make an idle worker look for work now (a NOTIFY said something changed); thread-safe."""
        self.egress.wake.set()

    def wake_for_log(self, payload: str = "") -> None:
        """A NOTIFY said events were appended: when they may hold a new intent (``payload`` is
        ``ledger.persistence.INTENT_PAYLOAD``, or empty: an older insert function, or a listener
        that reconnected), the log's tail is read next, so the intent is claimed without waiting
        for the status projection to write its row. An idle worker (or one whose projection
        stands still) starts a cycle now; a busy one reads the tail once after the pass under
        way, however many intents arrived meanwhile. Other appends (claims, outcomes, the
        entities' events) change nothing: the tail holds nothing new for them, and an idle
        worker woken by another's commit would read it for nothing. Thread-safe."""
        if payload == APPENDED_PAYLOAD:
            return
        self.claims.tail.fresh = True
        if self._idling or self.claims.tail.stalled:
            self.wake()

    def close(self) -> None:
        """Stop the egress threads (calls under way finish on their own, unrecorded)."""
        self.egress.close()
