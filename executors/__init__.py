"""Workers: claim, lease, attempt before egress, record honest outcomes, settle, recover.

Small services of one shape (STYLE rule 11), composed by :class:`Worker`; every decision they act
on is a pure function of ``ledger.decisions``. Depends on ``ledger`` (and reads the status view
from ``projections``); never on ``adapters``.
"""

from executors.claim import ClaimConfig, ClaimService
from executors.commit import CommitResult, Committer, Counts, commit_changes
from executors.egress import EgressConfig, EgressService
from executors.leases import LeaseConfig, LeaseService
from executors.outcomes import OutcomeService
from executors.polling import PollingConfig, PollingService
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets, FileSecrets, MissingSecretError, SecretProvider, SecretResolver
from executors.settlement import SettlementService

__all__ = [
    # running work
    "Worker",
    "WorkerConfig",
    "Counts",
    # the services a worker composes
    "ClaimService",
    "ClaimConfig",
    "EgressService",
    "EgressConfig",
    "OutcomeService",
    "PollingService",
    "PollingConfig",
    "SettlementService",
    "LeaseService",
    "LeaseConfig",
    # committing many operations at once
    "commit_changes",
    "CommitResult",
    "Committer",
    # secrets at egress
    "SecretProvider",
    "SecretResolver",
    "EnvironmentSecrets",
    "FileSecrets",
    "MissingSecretError",
]
