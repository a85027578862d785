"""The commands of the ``Operation`` aggregate: the guards every transition passes, then one
past-tense event each (STYLE rule 1: checks here, ``apply`` bodies only assign).

Each command checks the transition (``ledger.lifecycle``), the caller's fencing epoch and the
time it is given, and records one event nested in ``Operation`` (their topics are stored, so the
events stay there; this mixin only holds the rules). No method reads the wall clock: ``now`` is
passed in, UTC-aware. Provider text goes through ``ledger.facts.storable_fact`` and derived times
through ``ledger.time_limits.require_later``.

Source: docs/adr/0001-operation-lifecycle.md; DESIGN §4.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger import decisions, lifecycle
from ledger.approvals import ApprovalPolicy, ApprovalRequest, default_policy, purpose_of, roles_of, void_reason
from ledger.callbacks import ProgressReport, repeats_progress
from ledger.clock import require_utc
from ledger.decisions import OutcomeRef
from ledger.declarations import DEFAULT_APPROVAL_VALID_SECONDS, DeliveryMode, Integration
from ledger.errors import (
    ApprovalRefusedError,
    AttemptBudgetExceededError,
    IllegalTransitionError,
    InvalidArgumentError,
    LeaseExpiredError,
    StaleEpochError,
    StaleSettlementError,
)
from ledger.facts import FactKind, storable_fact, storable_fact_or_none
from ledger.identity import Source, fingerprint, operation_id
from ledger.intents import (
    MAX_EVIDENCE_CHARS,
    MAX_PURPOSE_CHARS,
    MAX_REASON_CHARS,
    Delegation,
    check_delegation,
    check_intent,
    check_operator_text,
    check_payload,
    require_principal,
)
from ledger.modes import Follow, rules_for
from ledger.outcomes import FailureCategory
from ledger.provenance import BuildInfo, build_info
from ledger.refusals import WriteKind
from ledger.status import (
    APPROVAL_DENIED,
    APPROVAL_REQUIRED,
    OUTCOME_STATES,
    ExecutionState,
    SettlementState,
    Status,
)
from ledger.time_limits import require_intent_times, require_later

if TYPE_CHECKING:
    from ledger.operation import Operation

E = ExecutionState

SETTLEMENT_BLOCK_CODES = ("", "settlement_entity_mismatch", "settlement_denied")
"""``SettlementBlocked.code``: the rule that blocked a settlement, which is its attention
reason; ``""`` for a settlement that kept failing or could not run (attention
``settlement_blocked``). Source: issue 32 items 1 and 2."""
RESOLUTIONS_FOR_AMBIGUOUS = ("succeeded", "failed", "retry", "abandon")
RESOLUTIONS_FOR_BLOCKED = ("retry_settlement", "abandon")
RESOLUTIONS_FOR_LATE_OBSERVATION = ("acknowledge",)
"""An operator saw a late observation (``LateObservationRecorded``) and keeps the outcome."""
RESOLUTIONS_FOR_REMOTE_UNKNOWN = ("succeeded", "failed")
"""How an operator may end accepted work past its deadline (attention ``remote_unknown``)."""
RESOLUTIONS_FOR_REFUSED_WRITE = ("retry_write",)
"""An operator fixed what refused a write for the operation (``WriteRefused``, attention
``write_refused``): workers take it again from its recorded state, nothing else changes (issue 35)."""
RESOLUTIONS = tuple(dict.fromkeys(RESOLUTIONS_FOR_AMBIGUOUS + RESOLUTIONS_FOR_BLOCKED + RESOLUTIONS_FOR_LATE_OBSERVATION
                                  + RESOLUTIONS_FOR_REMOTE_UNKNOWN + RESOLUTIONS_FOR_REFUSED_WRITE))
"""Every resolution ``Operation.resolve`` knows, in the order an operator is offered them."""


class OperationCommands:
    """The command methods of :class:`ledger.operation.Operation` (a mixin it inherits).

    Each raises :class:`IllegalTransitionError`, :class:`StaleEpochError`,
    :class:`LeaseExpiredError` or :class:`AttemptBudgetExceededError` on a command the lifecycle
    does not allow, and records nothing then.
    """

    # The state the commands read, assigned by ``Operation.Intended.apply`` and the other events
    # (annotations only: listed for readers and type checkers).
    tenant: str
    principal: str
    traceparent: str | None
    integration_name: str
    integration_version: int
    integration_digest: str
    code_digest: str
    opledger_version: str
    opledger_commit: str
    delivery_mode: DeliveryMode
    max_attempts: int
    deadlines: dict[str, float]
    settlement_max_attempts: int
    payload: dict[str, Any]
    target: str | None
    fingerprint: str
    source: Source
    approval: str
    execution: ExecutionState
    settlement: SettlementState
    state_entered_at: datetime
    due_at: datetime
    epoch: int
    worker_id: str | None
    lease_expires_at: datetime | None
    attempts: int
    open_attempt_id: UUID | None
    last_attempt_id: UUID | None
    possibly_applied: bool
    remote_id: str | None
    remote_status: str | None
    callback_ids: set[str]
    callback_signed_at: dict[str, datetime]
    last_progress: ProgressReport | None
    late_observation: dict[str, Any] | None
    cancel_requested: bool
    cancel_reason: str | None
    failure: dict[str, Any] | None
    last_retry_reason: str | None
    ambiguity_reason: str | None
    excerpt: str
    settlement_attempts: int
    settlement_due_at: datetime | None
    settlement_error: str | None
    settled_entity_version: int | None
    settlement_block_code: str | None
    outcome_attempt_id: UUID | None
    outcome_epoch: int | None
    source_action: str
    on_behalf_of: list[dict[str, str]]
    disposition: str | None
    lease_takeovers: int
    resolution: str | None
    declaration_mismatch: str | None
    approval_fingerprint: str | None
    approval_purpose: str | None
    approval_expires_at: datetime | None
    approved_by: str | None
    approval_voided: str | None
    budget_wait: str | None
    budget_wait_until: datetime | None
    follow: str | None
    follow_until: datetime | None
    remote_overdue: bool
    cancel_refused: bool
    write_refused: str | None
    write_refused_error: str | None

    if TYPE_CHECKING:  # provided by ``Operation`` and the library's ``Aggregate``
        id: UUID
        Accepted: type[Any]
        Ambiguous: type[Any]
        ApprovalDenied: type[Any]
        ApprovalGranted: type[Any]
        ApprovalVoided: type[Any]
        AttemptStarted: type[Any]
        BudgetExhausted: type[Any]
        BudgetWaited: type[Any]
        CallbackReceived: type[Any]
        CancelFailed: type[Any]
        CancelRequested: type[Any]
        DeclarationMismatched: type[Any]
        Cancelled: type[Any]
        Claimed: type[Any]
        DeadlineExceeded: type[Any]
        Failed: type[Any]
        Intended: type[Any]
        LateObservationRecorded: type[Any]
        LeaseRenewed: type[Any]
        RemoteOverdue: type[Any]
        RemoteStatusObserved: type[Any]
        Resolved: type[Any]
        RetryScheduled: type[Any]
        Settled: type[Any]
        SettlementBlocked: type[Any]
        SettlementFailed: type[Any]
        Succeeded: type[Any]
        WriteRefused: type[Any]

        @property
        def status(self) -> Status: ...

        @property
        def deadline_at(self) -> datetime | None: ...

        def lease_expired(self, now: datetime) -> bool: ...

        def trigger_event(self, event_class: type[Any], **kwargs: Any) -> None: ...

        @classmethod
        def _create(cls, event_class: type[Any], **kwargs: Any) -> Any: ...

    # ------------------------------------------------------------------ constructor command

    @classmethod
    def intend(
        cls,
        *,
        now: datetime,
        integration: Integration,
        source: Source,
        payload: Mapping[str, Any],
        target: str | None = None,
        principal: str = "system",
        traceparent: str | None = None,
        code_digest: str = "",
        source_action: str = "",
        on_behalf_of: Sequence[Delegation] = (),
        build: BuildInfo | None = None,
    ) -> Operation:
        """Record the intent of an external effect (event ``Intended``).

        Args:
            now: UTC-aware instant of the intent.
            integration: the validated declaration the operation runs under.
            source: the authorizing transition (entity version *after* it).
            payload: plain JSON data; every key must be classified by the declaration, and
                secret fields must hold ``secretref:NAME`` references, never values.
            target: the URL to call; defaults to the declaration's ``endpoint``.
            principal: who authorized it (user or service id).
            traceparent: the W3C trace context header of the authorizing request, if any.
            code_digest: a digest of the module or code that issued the intent.
            source_action: the name of the entity's command or event that authorized it.
            on_behalf_of: the delegation chain: ``principal`` acts on behalf of the first
                link's principal, which acts for the next, and so on (issue 32 item 4).
            build: the opledger recording it (version, commit); this process's by default
                (``ledger.provenance.build_info``; issue 31 item 2).

        Returns:
            The new operation, with one pending ``Intended`` event. Its id is derived
            (``ledger.identity.operation_id``).

        Raises:
            PayloadError: an unclassified field, a secret value instead of a reference, or
                data that is not plain JSON.
            NaiveDatetimeError: ``now`` has no timezone.
        """
        now = require_utc(now, "now")
        check_payload(integration, payload)
        target = target if target is not None else integration.endpoint
        check_intent(integration, source, target, principal, traceparent)
        chain = check_delegation(on_behalf_of, source_action)
        require_intent_times(integration, now)
        build = build or build_info()
        return cls._create(
            cls.Intended,
            id=operation_id(source, integration.name),
            timestamp=now,
            tenant=source.tenant,
            principal=principal,
            traceparent=traceparent,
            integration_name=integration.name,
            integration_version=integration.version,
            integration_digest=integration.digest(),
            code_digest=code_digest,
            delivery_mode=integration.delivery_mode.value,
            max_attempts=integration.retry.max_attempts,
            deadlines=dict(integration.deadline_seconds),
            settlement_max_attempts=integration.settlement.max_attempts if integration.settlement else 0,
            requires_approval=integration.requires_approval,
            payload=dict(payload),
            target=target,
            fingerprint=fingerprint(integration, payload, target),
            source_entity_type=source.entity_type,
            source_entity_id=source.entity_id,
            source_entity_version=source.entity_version,
            effect_index=source.effect_index,
            source_action=source_action,
            on_behalf_of=chain,
            opledger_version=build.version,
            opledger_commit=build.commit,
        )

    # ------------------------------------------------------------------ guards

    def _allow(self, command: str, detail: str = "") -> None:
        if self.execution not in lifecycle.BY_EXECUTION[command]:
            raise IllegalTransitionError(command, self.execution.value, detail)

    def _allow_settlement(self, command: str) -> None:
        if self.settlement not in lifecycle.BY_SETTLEMENT[command]:
            raise IllegalTransitionError(command, f"settlement {self.settlement.value}")

    def _fence(self, epoch: int) -> None:
        if epoch != self.epoch:
            raise StaleEpochError(self.id, epoch, self.epoch)

    def _fence_settlement(self, settles: OutcomeRef | None) -> None:
        problem = None if settles is None else decisions.settlement_fence_problem(self, settles)
        if problem is not None:
            raise StaleSettlementError(self.id, problem)

    def _attempt(self, attempt_id: UUID | None, command: str) -> None:
        if attempt_id is not None and attempt_id != self.last_attempt_id:
            raise IllegalTransitionError(command, self.execution.value,
                                         f"attempt {attempt_id} is not the operation's latest attempt")

    # ------------------------------------------------------------------ commands

    def approval_request(self, approver: str, roles: Collection[str], purpose: str = "") -> ApprovalRequest:
        """What an approval policy decides on when ``approver`` with ``roles`` asks to approve
        this operation (``purpose``: the declaration's, "execute <integration>" when empty). Pure.

        Source: issue 14 item 2.
        """
        return ApprovalRequest(integration=self.integration_name, purpose=purpose_of(self.integration_name, purpose),
                               intended_by=self.principal, approver=approver, roles=roles_of(roles),
                               tenant=self.tenant)

    def grant_approval(self, *, now: datetime, principal: str, roles: Collection[str] = (),
                       purpose: str = "", valid_seconds: float = DEFAULT_APPROVAL_VALID_SECONDS,
                       fingerprint: str | None = None, policy: ApprovalPolicy = default_policy) -> None:
        """Record an approver's consent (``ApprovalGranted``), bound to this operation's
        fingerprint, a purpose and an expiry. Egress is refused once it expires.

        Args:
            now: UTC-aware instant of the grant.
            principal: who approves.
            roles: the approver's roles; the default policy needs ``approver``.
            purpose: the declaration's ``approval_purpose`` ("execute <integration>" when empty).
            valid_seconds: how long it allows egress, seconds (the declaration's
                ``approval_valid_seconds``).
            fingerprint: the fingerprint the approver saw; when given it must be the operation's.
            policy: who may approve what (``ledger.approvals``).

        Raises:
            IllegalTransitionError: not pending, or approval not required or already decided.
            ApprovalRefusedError: the policy refuses this approver (e.g. a self-approval), or the
                approval names another fingerprint.
            InvalidArgumentError: a blank principal, a purpose over 200 characters.

        Source: issue 14 item 2.
        """
        now = require_utc(now)
        self._allow("grant_approval")
        require_principal(principal)
        if self.approval != APPROVAL_REQUIRED:
            raise IllegalTransitionError("grant_approval", self.execution.value, f"approval is {self.approval}")
        if fingerprint is not None and fingerprint != self.fingerprint:
            raise ApprovalRefusedError(f"the approval names fingerprint {fingerprint!r}, but operation {self.id} has "
                                       f"{self.fingerprint!r}: look at the operation again")
        purpose = purpose_of(self.integration_name, purpose)
        check_operator_text("purpose", purpose, MAX_PURPOSE_CHARS)
        refusal = policy(self.approval_request(principal, roles, purpose))
        if refusal is not None:
            raise ApprovalRefusedError(f"approval of operation {self.id} refused: {refusal}")
        self.trigger_event(self.ApprovalGranted, timestamp=now, principal=principal, fingerprint=self.fingerprint,
                           purpose=purpose, expires_at=require_later(now, valid_seconds, "valid_seconds"))

    def void_approval(self, *, now: datetime) -> str:
        """Record that the granted approval no longer allows egress (``ApprovalVoided``): it
        expired, or was granted for another fingerprint. The operation waits for a new approval,
        or ends at its pending deadline.

        Returns:
            The reason (``ledger.approvals.void_reason``).

        Raises:
            IllegalTransitionError: not pending, or the approval still holds.
        """
        now = require_utc(now)
        self._allow("void_approval")
        reason = void_reason(self, now)
        if reason is None:
            raise IllegalTransitionError("void_approval", self.execution.value, "the approval holds")
        self.trigger_event(self.ApprovalVoided, timestamp=now, reason=reason)
        return reason

    def deny_approval(self, *, now: datetime, principal: str, reason: str) -> None:
        """Record an approver's refusal (``ApprovalDenied``): the operation fails, nothing sent.

        Raises:
            IllegalTransitionError: not pending, or approval not required or already decided.
        """
        self._allow("deny_approval")
        require_principal(principal)
        check_operator_text("reason", reason, MAX_REASON_CHARS)
        if self.approval != APPROVAL_REQUIRED:
            raise IllegalTransitionError("deny_approval", self.execution.value, f"approval is {self.approval}")
        self.trigger_event(self.ApprovalDenied, timestamp=require_utc(now), principal=principal, reason=reason)

    def claim(self, *, now: datetime, worker_id: str, lease_seconds: float) -> int:
        """Take the operation under a lease with a new fencing epoch (``Claimed``).

        A pending operation is claimable once due and approved; a claimed, dispatching or
        accepted one only after its lease expired (recovery takes it over).

        Args:
            now: UTC-aware instant.
            worker_id: the claiming worker's id.
            lease_seconds: lease length in seconds (> 0).

        Returns:
            The new epoch (previous + 1): the worker's fencing token.

        Raises:
            IllegalTransitionError: terminal or ambiguous, not due, awaiting approval, the
                current lease is still live, or a recorded call budget wait is not over.
        """
        now = require_utc(now)
        self._allow("claim")
        if lease_seconds <= 0:
            raise InvalidArgumentError("lease_seconds must be > 0")
        takeover = False
        if self.execution is E.PENDING:
            if self.approval == APPROVAL_REQUIRED:
                raise IllegalTransitionError("claim", "pending", "awaiting approval")
            voided = void_reason(self, now)
            if voided is not None:
                raise IllegalTransitionError("claim", "pending", f"{voided}: void it and wait for a new approval")
            if now < self.due_at:
                raise IllegalTransitionError("claim", "pending", f"not due until {self.due_at.isoformat()}")
        else:
            if not self.lease_expired(now):
                raise IllegalTransitionError("claim", self.execution.value, "the lease is still held")
            if self.budget_wait_until is not None and now < self.budget_wait_until:
                raise IllegalTransitionError("claim", self.execution.value,
                                             f"waits for a call budget until {self.budget_wait_until.isoformat()}")
            # A lease that lapsed is taken over; none (accepted work, or a lease its holder gave
            # up with a budget wait) is not.
            takeover = self.lease_expires_at is not None
        epoch = self.epoch + 1
        require_later(now, self.deadlines[E.CLAIMED.value], "deadlines.claimed")
        self.trigger_event(
            self.Claimed, timestamp=now, epoch=epoch, worker_id=worker_id,
            lease_expires_at=require_later(now, lease_seconds, "lease_seconds"), takeover=takeover,
        )
        return epoch

    def flag_declaration_mismatch(self, *, now: datetime, worker_id: str, declared_digest: str) -> bool:
        """Record that a worker refused the operation because its declaration of the same name
        and version has digest ``declared_digest``, not the recorded ``integration_digest``
        (``DeclarationMismatched``). The operation is on the attention queue as
        ``declaration_mismatch`` until a worker with the recorded declaration claims it; it is
        never executed under other rules.

        Returns:
            True when recorded; False when this mismatch is already the recorded one.

        Raises:
            IllegalTransitionError: not active, or ``declared_digest`` is the recorded digest.

        Source: issue 14 item 5.
        """
        self._allow("flag_declaration_mismatch")
        if declared_digest == self.integration_digest:
            raise IllegalTransitionError("flag_declaration_mismatch", self.execution.value,
                                         "the declared digest is the recorded one")
        if self.declaration_mismatch == declared_digest:
            return False
        self.trigger_event(self.DeclarationMismatched, timestamp=require_utc(now), worker_id=worker_id,
                           declared_digest=declared_digest)
        return True

    def wait_for_budget(self, *, now: datetime, scope: str, until: datetime, epoch: int | None = None) -> None:
        """Record that call budget ``scope`` is used up until ``until`` (``BudgetWaited``): the
        operation is due again then, in the state it is in. Not a failure (issue 14 item 1).

        Two ways, and never a lease the recorder does not hold:

        - ``epoch=None``, by whoever finds the operation due and its call not fitting: a
          pending operation once due, or a claimed or dispatching one whose lease lapsed (the
          reclaim records the wait instead of claiming; the lapsed lease, its epoch and its
          takeover are left as they are).
        - ``epoch`` given, by the live lease holder of a claimed or dispatching operation (a
          lookup after a lost response that cannot get a call): it gives up its lease with
          the wait, so the worker that takes it at ``until`` does not count a takeover.

        Each way needs the operation due (or held), so a wait is recorded once per window: a
        second worker finding the same window used up meets a wait already recorded.

        Args:
            now: UTC-aware instant.
            scope: the limiting level's scope key (``ledger.budgets.limiting_level``).
            until: the end of that level's window, UTC, after ``now``.
            epoch: the holder's fencing epoch, or None for an unleased wait.

        Raises:
            IllegalTransitionError: not pending, claimed or dispatching; ``until`` not after
                ``now``; unleased: not due yet (pending before ``due_at``, the lease still held,
                or a recorded wait not over); with an epoch: the operation is pending.
            StaleEpochError, LeaseExpiredError: with an epoch that is not the holder's live one.

        Source: issue 14 item 1; docs/adr/0001-operation-lifecycle.md (``wait_for_budget``).
        """
        now = require_utc(now)
        self._allow("wait_for_budget")
        until = require_utc(until, "until")
        state = self.execution.value
        if until <= now:
            raise IllegalTransitionError("wait_for_budget", state, "the next window must be later")
        if epoch is not None:
            if self.execution is E.PENDING:
                raise IllegalTransitionError("wait_for_budget", state, "a pending operation is not leased: "
                                             "record its wait without an epoch")
            self._fence(epoch)
            if self.lease_expired(now):
                raise LeaseExpiredError(f"operation {self.id}: lease expired at {self.lease_expires_at}")
        elif self.execution is E.PENDING:
            if now < self.due_at:
                raise IllegalTransitionError("wait_for_budget", state, f"not due until {self.due_at.isoformat()}")
        elif not self.lease_expired(now):
            raise IllegalTransitionError("wait_for_budget", state, "the lease is still held: its holder records "
                                         "the wait, with its epoch")
        elif self.budget_wait_until is not None and now < self.budget_wait_until:
            raise IllegalTransitionError("wait_for_budget", state,
                                         f"already waits until {self.budget_wait_until.isoformat()}")
        self.trigger_event(self.BudgetWaited, timestamp=now, scope=scope, until=until, epoch=epoch)

    def renew_lease(self, *, epoch: int, now: datetime, lease_seconds: float) -> None:
        """Extend the lease (``LeaseRenewed``). A lease that already ran out cannot be renewed:
        the worker must stop before egress (DESIGN §7).

        Raises:
            StaleEpochError, LeaseExpiredError, IllegalTransitionError.
        """
        now = require_utc(now)
        self._allow("renew_lease")
        self._fence(epoch)
        if lease_seconds <= 0:
            raise InvalidArgumentError("lease_seconds must be > 0")
        if self.lease_expired(now):
            raise LeaseExpiredError(f"operation {self.id}: lease expired at {self.lease_expires_at}")
        self.trigger_event(self.LeaseRenewed, timestamp=now, epoch=epoch,
                           lease_expires_at=require_later(now, lease_seconds, "lease_seconds"))

    def start_attempt(self, *, epoch: int, now: datetime, attempt_id: UUID, request_fingerprint: str) -> int:
        """Record an attempt before any byte leaves (``AttemptStarted``). Attempts count here,
        so a worker killed during every attempt still exhausts the budget (invariant 2).

        Returns:
            The attempt number (1-based).

        Raises:
            StaleEpochError, LeaseExpiredError, AttemptBudgetExceededError,
            IllegalTransitionError (not claimed, cancel requested, or approval missing).
        """
        now = require_utc(now)
        self._allow("start_attempt")
        self._fence(epoch)
        if self.lease_expired(now):
            raise LeaseExpiredError(f"operation {self.id}: lease expired at {self.lease_expires_at}")
        if self.cancel_requested and not self.possibly_applied:
            # After a possibly applied attempt the retry (same key, in a mode where that is safe)
            # is how the ledger learns what happened; a cancel then follows the evidence.
            raise IllegalTransitionError("start_attempt", "claimed", "cancellation was requested")
        if self.approval in (APPROVAL_REQUIRED, APPROVAL_DENIED):
            raise IllegalTransitionError("start_attempt", "claimed", f"approval is {self.approval}")
        voided = void_reason(self, now)
        if voided is not None:  # egress needs an unexpired approval of the current fingerprint
            raise IllegalTransitionError("start_attempt", "claimed", voided)
        if self.attempts >= self.max_attempts:
            raise AttemptBudgetExceededError(
                f"operation {self.id}: {self.attempts} of {self.max_attempts} attempts used")
        number = self.attempts + 1
        self.trigger_event(self.AttemptStarted, timestamp=now, epoch=epoch, attempt_id=attempt_id,
                           attempt_number=number, request_fingerprint=request_fingerprint)
        return number

    def accept(self, *, epoch: int, now: datetime, attempt_id: UUID, remote_id: str,
               status_code: int | None = None, excerpt: str = "", follow: Follow | str = Follow.WAIT,
               follow_until: datetime | None = None) -> None:
        """Record that the provider accepted the work as remote operation ``remote_id``.

        Args:
            follow: how its result will come (``ledger.modes.how_to_follow``).
            follow_until: the hard limit on waiting for it (UTC), from the declaration's
                ``polling.limit_seconds``; None: the ``accepted`` deadline ends it.

        Raises:
            InvalidArgumentError: an empty ``remote_id``, a ``follow_until`` before ``now``.
        """
        now = require_utc(now)
        self._allow("accept")
        self._fence(epoch)
        self._attempt(attempt_id, "accept")
        if not remote_id:
            raise InvalidArgumentError("remote_id must be non-empty")
        follow = Follow(follow)
        if follow_until is not None and require_utc(follow_until, "follow_until") < now:
            raise InvalidArgumentError("follow_until must not be before now")
        self.trigger_event(self.Accepted, timestamp=now, epoch=epoch, attempt_id=attempt_id,
                           remote_id=storable_fact(remote_id, FactKind.REMOTE_ID), status_code=status_code,
                           excerpt=storable_fact(excerpt, FactKind.EXCERPT), follow=follow.value,
                           follow_until=follow_until)

    def mark_remote_unknown(self, *, now: datetime) -> None:
        """Record that the ``accepted`` deadline passed with the provider still running
        (``RemoteOverdue``): not an outcome. The operation shows as ``remote_unknown`` on the
        attention queue and is followed until ``follow_until``, when ``exceed_deadline``
        records it ambiguous (issue 12 items 2 and 5).

        Raises:
            IllegalTransitionError: not accepted, no hard limit recorded (an acceptance recorded
                before polling existed: its deadline ends it), already overdue, or the deadline
                has not passed at ``now``.
        """
        now = require_utc(now)
        self._allow("mark_remote_unknown")
        if self.follow_until is None or self.remote_overdue:
            raise IllegalTransitionError("mark_remote_unknown", self.execution.value,
                                         "already overdue" if self.remote_overdue else "no hard limit recorded")
        deadline = self.deadline_at
        assert deadline is not None
        if now < deadline:
            raise IllegalTransitionError("mark_remote_unknown", self.execution.value,
                                         f"the deadline is {deadline.isoformat()}")
        self.trigger_event(self.RemoteOverdue, timestamp=now, deadline_at=deadline)

    def observe_remote_status(self, *, epoch: int, now: datetime, remote_status: str) -> bool:
        """Record a polled remote status, only when it changed (``RemoteStatusObserved``).

        Returns:
            True when an event was recorded; False when the status was unchanged.
        """
        self._allow("observe_remote_status")
        self._fence(epoch)
        remote_status = storable_fact(remote_status, FactKind.STATUS)
        if remote_status == self.remote_status:
            return False
        self.trigger_event(self.RemoteStatusObserved, timestamp=require_utc(now), epoch=epoch,
                           remote_status=remote_status)
        return True

    def receive_callback(self, *, now: datetime, callback_id: str, outcome: str,
                         remote_status: str | None = None, detail: str = "", attempt_id: UUID | None = None,
                         signed_at: datetime | None = None) -> bool:
        """Record an *authenticated* callback. Authentication is the inbound adapter's job
        (``adapters.http.callbacks``); a duplicate ``callback_id`` changes nothing (invariant 4).

        While the operation waits for its result (dispatching, accepted) the callback is
        recorded as ``CallbackReceived`` and a final outcome ends the operation. Once an outcome
        is recorded, a callback that contradicts it
        (``ledger.decisions.late_callback_contradicts``) is recorded as
        ``LateObservationRecorded``: it never changes the outcome and never settles twice, and
        the operation goes on the attention queue (``late_observation``).

        Args:
            now: UTC-aware instant of receipt.
            callback_id: the callback's ``webhook-id``: the provider's id for the message, the
                same on its retries.
            outcome: ``succeeded``, ``failed`` or ``progress``.
            remote_status: the provider's status word, if any.
            detail: the provider's text for operators.
            attempt_id: the attempt the callback answers; when given it must be the latest.
            signed_at: the callback's ``webhook-timestamp`` (UTC), kept to tell a replayed
                message from a re-signed retry (``ledger.callbacks.classify_callback``).

        Returns:
            True when a fact was recorded; False for a duplicate, a late callback that agrees
            with (or adds nothing to) the recorded outcome, or a ``progress`` report that
            repeats the last one for the same attempt (``ledger.callbacks.repeats_progress``).

        Raises:
            InvalidArgumentError: an unknown outcome.
            IllegalTransitionError: ``attempt_id`` is not the latest attempt, or a state that
                expects no callback (pending, claimed: nothing was sent yet).

        Source: issue 12 item 3; docs/adr/0005-callback-authentication.md.
        """
        if outcome not in ("succeeded", "failed", "progress"):
            raise InvalidArgumentError("outcome must be 'succeeded', 'failed' or 'progress'")
        if callback_id in self.callback_ids:
            return False
        self._attempt(attempt_id, "receive_callback")
        now = require_utc(now)
        signed_at = require_utc(signed_at, "signed_at") if signed_at is not None else None
        if self.execution in OUTCOME_STATES:
            if not decisions.late_callback_contradicts(self.execution, outcome):
                return False
            self.trigger_event(self.LateObservationRecorded, timestamp=now, callback_id=callback_id,
                               attempt_id=attempt_id, signed_at=signed_at, outcome=outcome,
                               remote_status=storable_fact_or_none(remote_status, FactKind.STATUS),
                               detail=storable_fact(detail, FactKind.DETAIL), recorded_outcome=self.execution.value)
            return True
        self._allow("receive_callback")
        status, text = storable_fact_or_none(remote_status, FactKind.STATUS), storable_fact(detail, FactKind.DETAIL)
        if outcome == "progress" and repeats_progress(self.last_progress, (attempt_id, status, text)):
            return False
        self.trigger_event(self.CallbackReceived, timestamp=now, callback_id=callback_id, outcome=outcome,
                           remote_status=status, detail=text, attempt_id=attempt_id, signed_at=signed_at)
        return True

    def succeed(self, *, epoch: int, now: datetime, attempt_id: UUID | None = None,
                status_code: int | None = None, remote_id: str | None = None, excerpt: str = "") -> None:
        """Record that the effect happened (``Succeeded``)."""
        self._allow("succeed")
        self._fence(epoch)
        self._attempt(attempt_id, "succeed")
        self.trigger_event(self.Succeeded, timestamp=require_utc(now), epoch=epoch, attempt_id=attempt_id,
                           status_code=status_code, remote_id=storable_fact_or_none(remote_id, FactKind.REMOTE_ID),
                           excerpt=storable_fact(excerpt, FactKind.EXCERPT))

    def fail(self, *, epoch: int, now: datetime, category: FailureCategory | str, retryable: bool,
             attempt_id: UUID | None = None, status_code: int | None = None, detail: str = "") -> None:
        """Record that the effect is known not to have happened or known to have failed."""
        self._allow("fail")
        self._fence(epoch)
        self._attempt(attempt_id, "fail")
        self.trigger_event(self.Failed, timestamp=require_utc(now), epoch=epoch, attempt_id=attempt_id,
                           category=FailureCategory(category).value, retryable=retryable,
                           status_code=status_code, detail=storable_fact(detail, FactKind.DETAIL))

    def mark_ambiguous(self, *, epoch: int, now: datetime, reason: str, attempt_id: UUID | None = None,
                       status_code: int | None = None, detail: str = "") -> None:
        """Record that egress may have happened and nothing says whether it applied."""
        self._allow("mark_ambiguous")
        self._fence(epoch)
        self._attempt(attempt_id, "mark_ambiguous")
        self.trigger_event(self.Ambiguous, timestamp=require_utc(now), epoch=epoch, attempt_id=attempt_id,
                           reason=storable_fact(reason, FactKind.REASON), status_code=status_code,
                           detail=storable_fact(detail, FactKind.DETAIL))

    def schedule_retry(self, *, epoch: int, now: datetime, attempt_id: UUID, retry_at: datetime,
                       category: FailureCategory | str, reason: str, possibly_applied: bool,
                       status_code: int | None = None, detail: str = "") -> None:
        """Close the open attempt and schedule another (``RetryScheduled``).

        Args:
            possibly_applied: whether the closed attempt may have applied (egress happened and
                the response was lost). Refused in ``non_idempotent`` mode (invariant 3).
            status_code: the closed attempt's HTTP status, if it had a response.
            detail: its bounded, redacted excerpt or error text (stored bounded again).

        Raises:
            AttemptBudgetExceededError: no attempt left; record ``exhaust_budget`` instead.
            IllegalTransitionError: not dispatching, or a non-idempotent retry of a possibly
                applied attempt.
        """
        now = require_utc(now)
        retry_at = require_utc(retry_at, "retry_at")
        self._allow("schedule_retry")
        self._fence(epoch)
        self._attempt(attempt_id, "schedule_retry")
        if possibly_applied and not rules_for(self.delivery_mode).retries_possibly_applied:
            raise IllegalTransitionError(
                "schedule_retry", self.execution.value,
                f"{self.delivery_mode.value} mode never retries an attempt that may have applied")
        if self.attempts >= self.max_attempts:
            raise AttemptBudgetExceededError(
                f"operation {self.id}: {self.attempts} of {self.max_attempts} attempts used")
        require_later(now, self.deadlines[E.PENDING.value], "deadlines.pending")
        self.trigger_event(self.RetryScheduled, timestamp=now, epoch=epoch, attempt_id=attempt_id,
                           retry_at=max(retry_at, now), category=FailureCategory(category).value,
                           reason=storable_fact(reason, FactKind.REASON), possibly_applied=possibly_applied,
                           status_code=status_code, detail=storable_fact(detail, FactKind.DETAIL))

    def request_cancel(self, *, now: datetime, principal: str, reason: str = "") -> bool:
        """Ask for cancellation (``CancelRequested``). Workers honour it before egress, and ask
        the provider to cancel accepted work.

        Returns:
            True when recorded; False when cancellation was already requested.

        Raises:
            InvalidArgumentError: ``reason`` over ``MAX_REASON_CHARS`` (1,000) characters or
                holding NUL or a lone surrogate; a blank principal.
        """
        self._allow("request_cancel")
        require_principal(principal)
        check_operator_text("reason", reason, MAX_REASON_CHARS)
        if self.cancel_requested:
            return False
        self.trigger_event(self.CancelRequested, timestamp=require_utc(now), principal=principal, reason=reason)
        return True

    def cancel(self, *, now: datetime, epoch: int | None = None, reason: str = "") -> None:
        """Record the cancellation (``Cancelled``). Needs a prior ``request_cancel``.

        A leased operation is cancelled by its lease holder (``epoch``); an unleased pending one
        by anyone (``epoch=None``).
        """
        now = require_utc(now)
        self._allow("cancel")
        check_operator_text("reason", reason, MAX_REASON_CHARS)
        if not self.cancel_requested:
            raise IllegalTransitionError("cancel", self.execution.value, "cancellation was not requested")
        if epoch is None:
            if not (self.execution is E.PENDING or self.lease_expired(now)):
                raise IllegalTransitionError("cancel", self.execution.value, "a worker holds the lease")
        else:
            self._fence(epoch)
        self.trigger_event(self.Cancelled, timestamp=now, epoch=epoch, reason=reason or self.cancel_reason or "")

    def cancel_failed(self, *, epoch: int, now: datetime, reason: str) -> None:
        """Record that the provider refused or could not cancel (``CancelFailed``)."""
        self._allow("cancel_failed")
        self._fence(epoch)
        if not self.cancel_requested:
            raise IllegalTransitionError("cancel_failed", self.execution.value, "cancellation was not requested")
        self.trigger_event(self.CancelFailed, timestamp=require_utc(now), epoch=epoch,
                           reason=storable_fact(reason, FactKind.DETAIL))

    def exceed_deadline(self, *, now: datetime) -> None:
        """Record that the current state's deadline passed (``DeadlineExceeded``).

        The outcome is ``failed`` when no attempt may have applied, else ``ambiguous``.

        Raises:
            IllegalTransitionError: no deadline applies, or it has not passed at ``now``.
        """
        now = require_utc(now)
        self._allow("exceed_deadline")
        deadline = self.deadline_at
        assert deadline is not None
        if now < deadline:
            raise IllegalTransitionError("exceed_deadline", self.execution.value,
                                         f"the deadline is {deadline.isoformat()}")
        ambiguous = self.possibly_applied or self.execution in (E.DISPATCHING, E.ACCEPTED)
        self.trigger_event(self.DeadlineExceeded, timestamp=now, state=self.execution.value,
                           deadline_at=deadline, ambiguous=ambiguous)

    def exhaust_budget(self, *, epoch: int, now: datetime, last_attempt_possibly_applied: bool,
                       status_code: int | None = None, detail: str = "") -> None:
        """Record that no attempt is left (``BudgetExhausted``): ``failed`` when every attempt is
        known not to have applied, else ``ambiguous``; with the last attempt's HTTP status and
        bounded detail, when it had them.

        Raises:
            IllegalTransitionError: attempts remain.
        """
        self._allow("exhaust_budget")
        self._fence(epoch)
        if self.attempts < self.max_attempts:
            raise IllegalTransitionError("exhaust_budget", self.execution.value,
                                         f"{self.max_attempts - self.attempts} attempts remain")
        ambiguous = self.possibly_applied or last_attempt_possibly_applied
        self.trigger_event(self.BudgetExhausted, timestamp=require_utc(now), epoch=epoch,
                           attempts=self.attempts, ambiguous=ambiguous, status_code=status_code,
                           detail=storable_fact(detail, FactKind.DETAIL))

    def fail_settlement(self, *, now: datetime, error: str, retry_at: datetime,
                        settles: OutcomeRef | None = None) -> None:
        """Record a failed settlement action, to retry at ``retry_at`` without new egress.

        Args:
            settles: the outcome the settler read (``SettlementOutcome.ref``); None: the
                recorded one. Either way the event names the recorded outcome's attempt and epoch.

        Raises:
            IllegalTransitionError: settlement not pending, or the last try is used (record
                ``block_settlement`` instead).
            StaleSettlementError: ``settles`` is not the recorded outcome
                (``ledger.decisions.settlement_fence_problem``).
        """
        self._allow_settlement("fail_settlement")
        self._fence_settlement(settles)
        if self.settlement_attempts + 1 >= self.settlement_max_attempts:
            raise IllegalTransitionError("fail_settlement", "settlement pending",
                                         "settlement tries are used up; block it instead")
        self.trigger_event(self.SettlementFailed, timestamp=require_utc(now), error=error,
                           retry_at=require_utc(retry_at, "retry_at"), attempt_id=self.outcome_attempt_id,
                           epoch=self.outcome_epoch)

    def block_settlement(self, *, now: datetime, reason: str, code: str = "",
                         settles: OutcomeRef | None = None) -> None:
        """Stop settling and ask an operator (``SettlementBlocked``).

        Args:
            reason: what stopped it, in words (bounded when stored).
            code: the rule that stopped it, which becomes the attention reason
                (``settlement_entity_mismatch``, ``settlement_denied``), or ``""``.
            settles: as for :meth:`fail_settlement`.

        Raises:
            InvalidArgumentError: an unknown ``code``.
            StaleSettlementError: as for :meth:`fail_settlement`.
        """
        self._allow_settlement("block_settlement")
        self._fence_settlement(settles)
        if code not in SETTLEMENT_BLOCK_CODES:
            raise InvalidArgumentError(f"unknown settlement block code {code!r}")
        self.trigger_event(self.SettlementBlocked, timestamp=require_utc(now),
                           reason=storable_fact(reason, FactKind.DETAIL), code=code,
                           attempt_id=self.outcome_attempt_id, epoch=self.outcome_epoch)

    def settle(self, *, now: datetime, entity_version: int, principal: str | None = None,
               traceparent: str | None = None, settles: OutcomeRef | None = None) -> None:
        """Record that the entity action ran (``Settled``), naming the attempt whose outcome it
        settled and its epoch; save it with the entity in one ``save()``. A second settlement
        raises (invariant 4).

        Raises:
            StaleSettlementError: as for :meth:`fail_settlement`.
        """
        self._allow_settlement("settle")
        self._fence_settlement(settles)
        self.trigger_event(self.Settled, timestamp=require_utc(now), entity_version=entity_version,
                           principal=principal or self.principal,
                           traceparent=traceparent if traceparent is not None else self.traceparent,
                           attempt_id=self.outcome_attempt_id, epoch=self.outcome_epoch)

    def note_refused_write(self, *, now: datetime, kind: str, error: str, epoch: int | None = None) -> None:
        """Record that the store refused a write for this operation alone (``WriteRefused``):
        workers leave it until an operator acts (attention ``write_refused``).

        Allowed in every state: any write may be refused. A lease holder records it under its
        ``epoch`` (fenced); a worker that holds no lease (a claim, a deadline, a settlement)
        records it with None.

        Args:
            now: UTC-aware instant.
            kind: what the write was for (``ledger.refusals.WriteKind``).
            error: the database's error text (``ledger.refusals.refusal_text``); bounded here too.
            epoch: the lease holder's fencing epoch, or None.

        Raises:
            StaleEpochError: ``epoch`` is not the operation's.
            InvalidArgumentError: ``kind`` is not a ``WriteKind``.

        Source: issue 35 item 2; docs/adr/0002-executor-services.md ("Refused writes").
        """
        if epoch is not None:
            self._fence(epoch)
        try:
            kind = WriteKind(kind).value
        except ValueError:
            raise InvalidArgumentError(f"unknown write kind {kind!r}") from None
        self.trigger_event(self.WriteRefused, timestamp=require_utc(now), kind=kind,
                           error=storable_fact(error, FactKind.DETAIL), epoch=epoch)

    def resolution_refusal(self, resolution: str) -> str | None:
        """Why ``resolution`` does not fit the operation now, or None when ``resolve`` may record it.

        The one rule :meth:`resolve` enforces and an operator's tools ask before offering a
        resolution (``ledger.operator_actions``). Pure: reads the aggregate's state only.

        Args:
            resolution: a known resolution (``RESOLUTIONS_FOR_*``).

        Returns:
            None, or the refusal's detail: ``already abandoned``, ``nothing to resolve``,
            ``resolution must be one of ...`` or ``no attempt left to retry with``.

        Source: issue 12 items 2-3; issue 31 item 5 (the console offers only what this allows).
        """
        if self.disposition == "abandoned":
            return "already abandoned"
        allowed: tuple[str, ...]
        if self.execution in lifecycle.RESOLVABLE_EXECUTION:
            allowed = RESOLUTIONS_FOR_AMBIGUOUS
        elif self.execution is E.ACCEPTED and self.remote_overdue:
            # remote_unknown: the operator may say how it ended (issue 12 item 2); the provider
            # may still be running it, so neither retry nor abandon.
            allowed = RESOLUTIONS_FOR_REMOTE_UNKNOWN
        elif self.settlement in lifecycle.RESOLVABLE_SETTLEMENT:
            allowed = RESOLUTIONS_FOR_BLOCKED
        else:
            allowed = ()
        if self.late_observation is not None and self.execution not in lifecycle.RESOLVABLE_EXECUTION:
            allowed += RESOLUTIONS_FOR_LATE_OBSERVATION
        if self.write_refused is not None:
            allowed += RESOLUTIONS_FOR_REFUSED_WRITE
        if not allowed:
            return "nothing to resolve"
        if resolution not in allowed:
            return f"resolution must be one of {', '.join(allowed)}"
        if resolution == "retry" and self.attempts >= self.max_attempts:
            return "no attempt left to retry with"
        return None

    def resolve(self, *, now: datetime, principal: str, resolution: str, evidence: str) -> None:
        """Record an operator's decision with evidence (``Resolved``).

        Args:
            resolution: for an ambiguous operation ``succeeded``, ``failed``, ``retry`` (the
                operator asserts nothing applied; needs an attempt left) or ``abandon``; for
                accepted work past its deadline (``remote_unknown``) ``succeeded`` or ``failed``;
                for a blocked settlement ``retry_settlement`` or ``abandon``; for a late
                observation (``LateObservationRecorded``) ``acknowledge``, which keeps the
                outcome; for a write the store refused (``WriteRefused``) ``retry_write``, which
                changes nothing but lets workers take the operation again. Every resolution
                clears a late observation and a refused write.
            evidence: what the operator checked (required, shown on the timeline).

        Raises:
            IllegalTransitionError: nothing to resolve, or a resolution that does not fit.
        """
        if not isinstance(evidence, str) or not evidence.strip():
            raise InvalidArgumentError("evidence is required: say what was checked")
        check_operator_text("evidence", evidence, MAX_EVIDENCE_CHARS, required=True)
        require_principal(principal)
        if resolution not in RESOLUTIONS:
            raise InvalidArgumentError(f"unknown resolution {resolution!r}: one of {', '.join(RESOLUTIONS)}")
        refusal = self.resolution_refusal(resolution)
        if refusal is not None:
            raise IllegalTransitionError("resolve", self.status.value, refusal)
        self.trigger_event(self.Resolved, timestamp=require_utc(now), principal=principal,
                           resolution=resolution, evidence=evidence)
