"""Workers: claim, lease, attempt before egress, record honest outcomes, settle, recover.

Depends on ``ledger`` (and reads the status view from ``projections``); never on ``adapters``.
"""

from executors.commit import CommitResult, commit_changes
from executors.retry import AwaitCallback, GiveUp, Lookup, Record, Retry, backoff_seconds, decide
from executors.secrets import EnvironmentSecrets, MissingSecretError, SecretResolver
from executors.worker import Counts, Worker, WorkerConfig

__all__ = [
    # running work
    "Worker",
    "WorkerConfig",
    "Counts",
    # decisions (pure)
    "decide",
    "backoff_seconds",
    "Record",
    "Retry",
    "GiveUp",
    "Lookup",
    "AwaitCallback",
    # committing many operations at once
    "commit_changes",
    "CommitResult",
    # secrets at egress
    "SecretResolver",
    "EnvironmentSecrets",
    "MissingSecretError",
]
