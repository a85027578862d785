"""Every error opledger raises on purpose, under one root.

Each class is named after the rule it enforces; its docstring says what happened and how to fix
it. Database errors are translated once, at the persistence seam (STYLE rule 9).
"""

from __future__ import annotations

from uuid import UUID


class LedgerError(Exception):
    """Root of every error opledger raises on purpose."""


class NaiveDatetimeError(LedgerError, ValueError):
    """A datetime without a timezone reached the ledger.

    Every time in opledger is timezone-aware UTC and injected by the caller (DESIGN §7). Fix: take
    the instant from a clock (``ledger.clock.SystemClock().now()``), never a naive datetime.
    """


class IllegalTransitionError(LedgerError):
    """A command was called in a state the lifecycle table does not allow it from.

    Source: docs/adr/0001-operation-lifecycle.md, the transition table. Fix: reload the operation
    and decide again from its current state.
    """

    def __init__(self, command: str, state: str, detail: str = "") -> None:
        self.command = command
        self.state = state
        self.detail = detail
        text = f"'{command}' is not allowed while the operation is {state}"
        super().__init__(f"{text}: {detail}" if detail else text)


class OperatorActionRefusedError(LedgerError):
    """An operator's decision (approve, deny, cancel, resolve, retry a settlement) does not fit the
    operation's state now; the message says why in the operator's words ("cannot approve: the
    operation is already claimed by a worker"). Nothing was recorded.

    Source: issue 13 item 6. Fix: look at the operation again (``opledger ops show``) and decide
    from its current state.
    """


class InvalidArgumentError(LedgerError, ValueError):
    """A command was given an argument outside its domain (a non-positive lease, an empty remote
    id, an unknown callback outcome, blank evidence). Fix: as the message says."""


class UnrepresentableTimeError(InvalidArgumentError):
    """A time the ledger would compute or store cannot be represented.

    Python datetimes end at 9999-12-31 and ``timedelta`` holds at most 999,999,999 days; an
    infinite, NaN or negative duration, or an instant plus a duration past that end (``now`` in
    year 9999 plus a deadline, a lease of ``1e20`` seconds), is refused before anything is
    recorded, instead of overflowing later in every worker that reads the operation. Fix: check
    the clock the command was given (a fake clock far in the future?) and keep durations within
    the limits in ``ledger.time_limits``.
    """


class StaleEpochError(LedgerError):
    """A worker acted with a fencing epoch that is no longer current (DESIGN §4 invariant 5).

    Another worker claimed the operation after this one. Fix: none; the stale worker must stop
    touching this operation.
    """

    def __init__(self, operation_id: UUID, given: int, current: int) -> None:
        self.operation_id = operation_id
        self.given = given
        self.current = current
        super().__init__(
            f"operation {operation_id}: epoch {given} is stale (current epoch is {current}); "
            "this worker lost its claim and must stop touching the operation"
        )


class LeaseExpiredError(LedgerError):
    """A worker tried to act after its lease ran out (DESIGN §7).

    A worker that cannot renew its lease must not start egress: another worker may already be
    reclaiming the operation. Fix: none; let recovery reclaim it with a new epoch.
    """


class AttemptBudgetExceededError(LedgerError):
    """Starting another attempt would exceed the integration's attempt budget (invariant 2).

    Fix: record ``exhaust_budget`` instead, which ends the operation honestly.
    """


class IntentConflictError(LedgerError):
    """The same source transition was intended twice with a different caller intent.

    The operation id is derived from the source (DESIGN §6), so a second ``intend`` for the same
    transition must carry the same fingerprint. Fix: the caller changed its payload, target or
    integration version for a transition already recorded; use a new effect index or transition.
    """

    def __init__(self, operation_id: UUID, stored: str, given: str) -> None:
        self.operation_id = operation_id
        self.stored_fingerprint = stored
        self.given_fingerprint = given
        super().__init__(
            f"operation {operation_id} was already intended with fingerprint {stored}; "
            f"this intent has fingerprint {given}"
        )


class OperationArchivedError(LedgerError):
    """The operation was closed and moved into an archive segment (``opledger archive``): its id
    is never intended again (docs/adr/0010-archives.md §3). A host replaying old input would
    otherwise re-create an operation whose effect already happened. Fix: nothing to redo; its
    history is in the named segment (``opledger archive restore`` puts it back for an audit).

    Attributes:
        operation_id: the archived operation.
        segment: the number of the segment holding it.
    """

    def __init__(self, operation_id: UUID, segment: int) -> None:
        self.operation_id = operation_id
        self.segment = segment
        super().__init__(f"operation {operation_id} is archived (segment seg-{segment:06d}); "
                         "an archived operation is never intended again")


# Python-style alias: the issue text names this rule ``IntentConflict``.
IntentConflict = IntentConflictError


class DeclarationError(LedgerError, ValueError):
    """An integration declaration is malformed. ``problems`` lists every problem with its path.

    Fix: correct each listed field; the message names all of them at once.
    """

    def __init__(self, name: str, problems: list[tuple[str, str]]) -> None:
        self.name = name
        self.problems = problems
        lines = "\n".join(f"  - {path}: {message}" for path, message in problems)
        super().__init__(f"integration declaration {name!r} is invalid:\n{lines}")


class _MessageKeyError(KeyError):
    # KeyError's str() is the repr of its argument; these errors are read by people.
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownIntegrationError(LedgerError, _MessageKeyError):
    """An operation names an integration that is not declared in this process.

    Fix: declare it (``Registry.declare``) in every process that handles it.
    """


class CorruptRecordError(LedgerError):
    """A stored ledger record cannot be decoded exactly; the ledger fails closed.

    Names the operation and position. Fix: restore the record from a backup or write an upcaster
    under ``migrations/``; opledger never builds a half-decoded aggregate.
    """

    def __init__(self, originator_id: object, position: int, topic: str, reason: str) -> None:
        self.originator_id = originator_id
        self.position = position
        self.topic = topic
        self.reason = reason
        super().__init__(
            f"stored event of operation {originator_id} at position {position} "
            f"(topic {topic!r}) is corrupt: {reason}"
        )


class UnreadableEventError(CorruptRecordError):
    """A stored ledger event is well formed for some version of the code, not for this one.

    Its topic does not resolve here (an event type added by a newer version, or a class renamed
    without ``eventsourcing.utils.register_topic`` for its old topic), or its ``class_version`` is
    newer than the class's. Readers treat it as a corrupt record of that operation only (it is a
    ``CorruptRecordError``), and the status projection puts the operation on the attention queue
    as ``unreadable_event``. Fix: run the code that wrote it (or register the rename, or add the
    upcaster); the operation comes back by itself once the running code reads it.

    Source: issue 10 item 5 ("history the code cannot read"); docs/operations.md.
    """

    def __init__(self, originator_id: object, position: int, topic: str, reason: str) -> None:
        super().__init__(originator_id, position, topic, reason)
        # Replaces the parent's wording: nothing is damaged, this code is too old for it.
        self.args = (
            f"stored event of operation {originator_id} at position {position} "
            f"(topic {topic!r}) cannot be read by this code: {reason}",
        )


class ConfigurationError(LedgerError, ValueError):
    """opledger's settings are invalid or do not match the store they point at.

    Fix: as the message says (database URL, schema version, store identity).
    """


class UnreadableHistoryError(ConfigurationError):
    """The store holds ledger event topics this code cannot resolve, so a process refuses to start.

    ``topics`` maps each such topic to its number of records. Typical causes: an older version
    started against a store a newer version wrote to, or a class renamed without registering its
    old topic (``eventsourcing.utils.register_topic``). Fix: run the newer code (or register the
    rename); or start with ``--allow-unreadable-events`` (``OPLEDGER_ALLOW_UNREADABLE_EVENTS=1``)
    to run anyway, each affected operation then waiting on the attention queue as
    ``unreadable_event``.

    Source: issue 10 item 5; docs/operations.md ("Events this code cannot read").
    """

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = dict(topics)
        listed = ", ".join(f"{topic} ({n} record{'s' if n != 1 else ''})" for topic, n in sorted(topics.items()))
        super().__init__(
            f"the store holds {len(topics)} ledger event topic(s) this code cannot resolve: {listed}. "
            "Run the code that wrote them, or register the renamed classes' old topics "
            "(eventsourcing.utils.register_topic); to run anyway, with their operations on the attention "
            "queue as unreadable_event, pass --allow-unreadable-events (OPLEDGER_ALLOW_UNREADABLE_EVENTS=1)"
        )


class StoreIdentityError(ConfigurationError):
    """The store's recorded identity differs from what this process expects (DESIGN §8).

    The identity (store id, owner application, backend, schema version, ledger codec version) is
    written once by ``opledger migrate`` and compared on every open. ``differences`` maps each
    differing key to ``(stored, expected)``. Fix: as the message says; usually the database URL
    points at another store (a restored copy, another environment), ``OPLEDGER_APP`` names
    another application, or the code is older or newer than the store.

    Source: DESIGN §8; issue 16 item 2.
    """

    def __init__(self, store: str, differences: dict[str, tuple[str | None, str]], reasons: list[str]) -> None:
        self.store = store
        self.differences = dict(differences)
        super().__init__(f"the store {store} does not match this process: " + "; ".join(reasons))


class StorePathError(ConfigurationError):
    """The embedded store's path or permissions are unsafe, so opledger refuses to touch it.

    Refused: a store file or directory that is a symlink, a directory anyone may write to, a
    directory or file owned by another user. Fix: as the message says (move the store to a
    directory of its own, ``chmod 700`` it, or run as the user who owns it).

    Source: DESIGN §8; issue 16 item 3.
    """


class StoreDamagedError(LedgerError):
    """The embedded SQLite store's file is damaged (a corrupt page, a truncated file, a lost WAL).

    Raised once, at open or at the first read that meets the damage, naming the file; no worker
    keeps running on a damaged store. Fix: run ``opledger doctor`` to see what is wrong, stop
    every process using the store, and restore it from the backup (docs/operations.md,
    "Restore").

    Source: issue 16 item 4.
    """


class StoreLockedError(LedgerError):
    """Another process owns the embedded SQLite store for writing (DESIGN §8).

    Fix: stop the other process, or open the store read-only for inspection.
    """


class OperationNotFoundError(LedgerError, _MessageKeyError):
    """No operation with this id is recorded. Fix: check the id (``opledger ops list``)."""


class OperationInArchiveError(OperationNotFoundError):
    """The operation is not in the hot store: ``opledger archive`` moved it into an archive
    segment (docs/adr/0010-archives.md). Fix: read it from its segment (``ops show`` and ``ops
    timeline`` do, given the archive directory: ``OPLEDGER_ARCHIVE_DIR`` or ``--archive-dir``), or
    restore the segment for an audit (``opledger archive restore``).

    Attributes:
        operation_id: the archived operation.
        segment: the number of the segment holding it.
        status: its final status, as the archive index recorded it.
    """

    def __init__(self, operation_id: UUID, segment: int, status: str) -> None:
        self.operation_id, self.segment, self.status = operation_id, segment, status
        super().__init__(
            f"operation {operation_id} is archived ({status}) in segment seg-{segment:06d}: its history left the "
            "store; set OPLEDGER_ARCHIVE_DIR (or pass --archive-dir) to read it from the segment, or restore that "
            f"segment for an audit (opledger archive restore DIR/seg-{segment:06d} --database-url ...)")


class ReceiptNotFoundError(LedgerError, _MessageKeyError):
    """No idempotency receipt with this id is recorded. Fix: check the id (``opledger
    attention`` lists the receipts recovery gave up on, by ``receipt_id``)."""


class SettlementError(LedgerError):
    """A settlement action could not be applied to the source entity (DESIGN §1.5).

    Recorded as ``SettlementFailed`` and retried without any new egress.
    """


class SettlementEntityMismatchError(SettlementError):
    """An intent's source entity is not of the type its declaration settles into
    (``settlement.entity_type``): the result would be settled into the wrong entity, or into
    none. Nothing was recorded.

    Source: issue 32 item 1. Fix: intend the integration from the entity type it declares, or
    declare one for this entity type.
    """

    def __init__(self, integration: str, declared: str, actual: str) -> None:
        self.integration = integration
        self.declared = declared
        self.actual = actual
        super().__init__(f"integration {integration!r} settles into {declared}, but the source entity is a "
                         f"{actual}: intend it from a {declared}, or declare an integration for {actual}")


class StaleSettlementError(SettlementError):
    """A settler tried to settle an outcome that is not the operation's recorded outcome: read
    under a stale epoch, or of another attempt (``ledger.decisions.settlement_fence_problem``).
    Nothing was recorded and the entity's action did not run.

    Source: issue 32 item 3. Fix: none; the settler read an old copy of the operation, and the
    recorded outcome is settled by whoever reads it now.
    """

    def __init__(self, operation_id: UUID, problem: str) -> None:
        self.operation_id = operation_id
        self.problem = problem
        super().__init__(f"operation {operation_id}: settlement refused (fenced): {problem}")


class ApprovalRefusedError(LedgerError):
    """The approval policy refuses this approver for this operation (no approver role, a
    self-approval, ...), or the approval names another fingerprint. Fix: as the message says;
    the policy is ``OPLEDGER_APPROVAL_POLICY`` (docs/guide.md, "Approvals")."""


class DeclarationMismatchError(LedgerError):
    """A worker's declaration of an integration differs from the one recorded on the operation
    under the same name and version: the worker does not execute it under other rules. Fix:
    declare the recorded rules under that version again, or bump the version for new rules.
    """


class PayloadError(LedgerError, ValueError):
    """An intent's payload breaks its declaration's classification.

    Every field must be classified; secret fields hold a ``secretref:NAME`` reference, never the
    value; values are plain JSON data. ``problems`` lists each problem. Fix: as listed.
    """

    def __init__(self, integration: str, problems: list[str]) -> None:
        self.integration = integration
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"payload for integration {integration!r} is invalid:\n{lines}")


class StoreError(LedgerError):
    """The store refused this process for good (a missing table, a permission denied, a
    corrupt file): retrying cannot fix it, unlike a lost connection, which workers ride out.

    Fix: read the error; migrate the store (``opledger migrate``), grant the permission or
    restore the file, then start again (docs/operations.md, "Database outages").
    """


class WriteRefusedError(LedgerError):
    """The database refused a write for one operation (or one command) alone while it accepts
    others: a trigger, a ``CHECK`` or ``NOT NULL`` constraint, a row-level security policy or an
    extension rejected its row (issue 35). Nothing of the write was stored; the operation
    records ``WriteRefused`` when it can (attention ``write_refused``) and workers leave it
    alone. Fix: find what refuses the row (``error`` names the trigger or constraint), fix it,
    then ``opledger resolve ID --resolution retry_write --evidence "..."``.

    Attributes:
        operation_id: the operation whose write was refused, or None (a command's).
        kind: what the write was for (``ledger.refusals.WriteKind``).
        error: the database's text (``ledger.refusals.refusal_text``).

    Source: issue 35 item 3.
    """

    def __init__(self, operation_id: UUID | None, kind: str, error: str) -> None:
        self.operation_id = operation_id
        self.kind = kind
        self.error = error
        whose = f"operation {operation_id}" if operation_id is not None else "this command"
        super().__init__(f"the store refused the {kind} write of {whose}: {error}")


class ReceiptFencedError(LedgerError):
    """A receipt command came from an owner whose epoch is no longer the receipt's (a successor
    adopted it), or the receipt is no longer pending (completed or expired). Nothing was recorded.

    Source: issue 15 item 5 (owner leases fenced by epoch). Fix: reload the receipt and answer from
    its current state (``ledger.receipt_decisions.decide_request``); never run the handler again
    under the stale epoch.
    """

    def __init__(self, receipt_id: UUID, command: str, epoch: int, current_epoch: int, state: str) -> None:
        self.receipt_id = receipt_id
        self.epoch = epoch
        self.current_epoch = current_epoch
        self.state = state
        super().__init__(f"cannot {command} receipt {receipt_id} under epoch {epoch}: it is {state} "
                         f"under epoch {current_epoch}")


class ReceiptMismatchError(LedgerError):
    """An ``Idempotency-Key`` was reused for another request (another body, principal-visible
    parameter or route): the fingerprint differs from the receipt's. Nothing was recorded.

    Source: IETF draft-ietf-httpapi-idempotency-key-header-07 (422); issue 15 item 3. Fix: send a
    fresh key for a new request; reuse a key only to retry the very same request.
    """


class ReceiptPendingError(LedgerError):
    """The request with this key is being executed by its owner (its lease is live): answer 409
    ``idempotency_receipt_pending``, retryable after ``retry_after_seconds``.

    Source: IETF draft-07 (409 for a concurrent request); issue 15 item 3. Fix: retry the same
    request with the same key after ``Retry-After``.
    """

    def __init__(self, retry_after_seconds: int, message: str = "") -> None:
        self.retry_after_seconds = retry_after_seconds
        super().__init__(message or "a request with this idempotency key is still being processed; "
                                    f"retry after {retry_after_seconds}s with the same key")


class CommandIncompleteError(LedgerError):
    """The command's execution threw (the store failed, or the handler has a bug) or its commit's
    fate is not known yet: the receipt stays pending, nothing was guessed. Answer 503, retryable.

    Source: issue 15 item 4 ("thrown errors stay pending and retryable"). Fix: retry the same
    request with the same key after ``retry_after_seconds``; it converges on the one outcome.
    """

    def __init__(self, retry_after_seconds: int, message: str) -> None:
        self.retry_after_seconds = retry_after_seconds
        super().__init__(message)
