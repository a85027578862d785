"""Recovery: deciding the attempt a lost worker left open (DESIGN §7: "recovery is the normal
path, not a special mode").

An operation whose lease expired while dispatching is reclaimed by the due-work pass
(``ledger.decisions.Reclaim``) under a new epoch; its open attempt may have reached the provider,
so its outcome is unknown: ``Ambiguous(reason="worker_lost")``, decided by the delivery mode
like any lost response (retry with the same key, look it up, wait for the callback, or stop
for an operator).

Source: DESIGN §5, §7; docs/adr/0001-operation-lifecycle.md (crash windows).
"""

from __future__ import annotations

from datetime import datetime

from ledger.decisions import Decision, RandomSource, decide
from ledger.declarations import RetryPolicy
from ledger.operation import Operation
from ledger.outcomes import Ambiguous

WORKER_LOST = Ambiguous(reason="worker_lost", detail="the previous lease expired with the attempt open")
"""The outcome of an attempt whose worker's lease expired before it recorded a result."""


def decide_open_attempt(op: Operation, policy: RetryPolicy, now: datetime, rng: RandomSource) -> Decision:
    """Decide the attempt ``op``'s previous holder left open (``op`` reclaimed, dispatching).

    Args:
        op: the reclaimed operation.
        policy: its retry policy.
        now: UTC-aware instant.
        rng: random source for retry jitter.

    Returns:
        The decision for :data:`WORKER_LOST` under ``op``'s delivery mode.
    """
    return decide(outcome=WORKER_LOST, mode=op.delivery_mode, policy=policy, attempts=op.attempts,
                  now=now, rng=rng)
