"""The co-commit API: a host ``eventsourcing`` application with the ledger mixed in.

The host's command calls :meth:`LedgerApplication.intend` and then ``save(entity, operation)``;
the library records both aggregates' events in one transaction, atomic on SQLite and
PostgreSQL, so an intent can never diverge from the transition that authorized it.
Source: DESIGN §6; issue "Ledger core" item 6.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent, Repository
from eventsourcing.domain import Aggregate, BaseAggregate
from eventsourcing.persistence import Mapper, Recording
from eventsourcing.utils import get_topic
from pydantic import ValidationError

from ledger import failpoints, tracing
from ledger.clock import Clock, SystemClock
from ledger.config import Database, Settings
from ledger.declarations import CallBudget, Integration, Registry, validation_problems
from ledger.errors import (
    ConfigurationError,
    DeclarationError,
    IntentConflictError,
    InvalidArgumentError,
    OperationArchivedError,
    OperationNotFoundError,
    SettlementEntityMismatchError,
)
from ledger.identity import Source, fingerprint, operation_id
from ledger.intents import Delegation
from ledger.operation import Operation
from ledger.persistence import StoreLock
from ledger.provenance import BuildInfo, build_info, module_digest
from ledger.receipts import Receipt
from ledger.settlement import entity_type_problem, settlement_target_problems
from ledger.store_files import check_store_files
from ledger.store_identity import check_store_identity


def _check_settlement_targets(registry: Registry) -> None:
    # Here, not in Integration.parse: the entity class is usually defined below its declaration.
    for integration in registry:
        problems = settlement_target_problems(integration)
        if problems:
            raise DeclarationError(integration.name, problems)


class LedgerApplication(Application):
    """Base for host applications whose entities authorize external operations.

    Subclass it, list the integrations in ``integrations`` and write commands as usual::

        class Orders(LedgerApplication):
            integrations = [Integration.parse({...})]

            def place(self, order_id: UUID) -> UUID:
                order = self.repository.get(order_id)
                order.place()
                op = self.intend(order, "payments.charge", payload={...})
                self.save(order, op)  # one transaction: both events or neither
                return op.id

    Class attributes:
        integrations: the declarations this application intends (validated at construction;
            there each settlement action's ``entity_type`` is imported and its ``method``
            looked up, and a ``DeclarationError`` names the field that does not resolve:
            issue 34 item 3).
        tenant: the default tenant for intents.

    Construction takes the library's ``env`` plus an optional injected ``clock`` (UTC). Without
    ``env`` it opens the store named by ``OPLEDGER_DATABASE_URL`` (see :meth:`store_env`).
    Ledger events use ``ledger.codec.LedgerMapper``; the host's own events keep the library's
    transcoder and any transcodings the host registers.
    """

    integrations: ClassVar[Sequence[Integration | Mapping[str, Any]]] = ()
    tenant: ClassVar[str] = "default"
    global_call_budget: ClassVar[CallBudget | Mapping[str, Any] | None] = None
    """Calls to every provider together, per window (``{"calls_per_window": N,
    "window_seconds": S}``): the outermost level of the call budgets (``ledger.budgets``).
    Declared in code with the integrations, so every worker of the application agrees on it."""

    def __init__(self, env: Mapping[str, str] | None = None, *, clock: Clock | None = None) -> None:
        self.registry = Registry()
        for declaration in type(self).integrations:
            self.registry.declare(declaration)
        _check_settlement_targets(self.registry)
        self.global_budget: CallBudget | None = _global_budget(type(self).global_call_budget)
        self.clock: Clock = clock or SystemClock()
        # Provenance, found once at start (issue 31 item 2): the host module that declares the
        # integrations (this class's), and the opledger that records the intents.
        self.code_digest: str = module_digest(type(self).__module__)
        self.build: BuildInfo = build_info()
        if env is None and "PERSISTENCE_MODULE" not in os.environ and "PERSISTENCE_MODULE" not in type(self).env:
            settings = Settings()
            # Own the store (SQLite) from before the checks read it until the factory holds its share.
            with _owner_lock(settings.database):
                super().__init__(env=self.store_env(settings))
            return
        super().__init__(env=dict(env) if env is not None else None)

    @classmethod
    def store_env(cls, settings: Settings | None = None) -> dict[str, str]:
        """The library environment for the store ``OPLEDGER_DATABASE_URL`` names, checked.

        Used when the application is constructed without ``env``, so that ``Shop()`` writes to
        the configured store rather than the library's in-memory default.

        On SQLite the store's lock is taken before anything reads it (and released again: the
        application's factory takes its own share); the file checks include ``PRAGMA
        quick_check``.

        Raises:
            ConfigurationError: the store is not migrated for this application.
            StoreIdentityError: its identity differs (``OPLEDGER_STORE_ID`` included).
            StoreLockedError: another process owns the SQLite store.
            StorePathError, StoreDamagedError: an unsafe path; a damaged file.
        """
        settings = settings or Settings()
        database = settings.database
        with _owner_lock(database):
            if database.path is not None:  # a store in a file of its own
                check_store_files(database.path, thorough=settings.open_check == "quick")
            check_store_identity(database, cls.name, store_id=settings.store_id)
        return database.library_env(create_table=False)

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[Any]]:
        """Record the pending events of ``objs`` (aggregates or events) in one transaction.

        The library's ``save``, with one difference: events of ``eventsourcing`` aggregates are
        collected directly. The library tells aggregates from events with runtime-checkable
        protocol ``isinstance`` checks, which cost tens of microseconds each on Python 3.11 and
        dominated batched worker commits. Anything else goes through the library's own path.
        """
        processing_event: ProcessingEvent[Any] = ProcessingEvent()
        others = []
        for obj in objs:
            if isinstance(obj, BaseAggregate):
                processing_event.events.extend(obj.collect_events())
                processing_event.aggregates[obj.id] = obj
            elif obj is not None:
                others.append(obj)
        processing_event.collect_events(*others, **kwargs)
        boundaries: list[str] = []
        if failpoints.ACTIVE:  # tests only: SIGKILL (or raise, in-process) at a commit boundary
            boundaries = failpoints.commit_boundaries(type(e).__name__ for e in processing_event.events)
            for boundary in boundaries:
                failpoints.reached(f"{boundary}:before")
        try:
            recordings = self._record(processing_event)
        except BaseException as exc:
            tracing.INTENT_SPANS.saved(processing_event.aggregates, error=exc)
            raise
        tracing.INTENT_SPANS.saved(processing_event.aggregates)  # the intents' producer spans end
        for boundary in boundaries:
            failpoints.reached(f"{boundary}:after")
        self._take_snapshots(processing_event)
        self._notify(recordings)
        self.notify(processing_event.events)  # the library's deprecated hook, kept for subclasses
        return recordings

    def construct_repository(self) -> Repository[Any]:
        """The library's repository, configured by the same settings, folding events without its
        per-event protocol check (``ledger.replay``)."""
        from ledger.replay import LedgerRepository

        repository = super().construct_repository()
        repository.__class__ = LedgerRepository  # the same state: only the default projector differs
        return repository

    def construct_mapper(self) -> Mapper[Any]:
        """Use the msgspec ledger mapper; it delegates host events to the library's transcoder."""
        from ledger.codec import LedgerMapper

        return self.factory.mapper(transcoder=self.construct_transcoder(), mapper_class=LedgerMapper)

    def intend(
        self,
        entity: Aggregate,
        integration: str,
        *,
        payload: Mapping[str, Any],
        target: str | None = None,
        effect_index: int = 0,
        principal: str = "system",
        traceparent: str | None = None,
        tenant: str | None = None,
        now: datetime | None = None,
        code_digest: str = "",
        source_action: str | None = None,
        on_behalf_of: Sequence[Delegation] = (),
    ) -> Operation:
        """Create the operation an entity transition authorizes, to be saved with the entity.

        Call it *after* the entity's command method, so ``entity.version`` is the version after
        the transition; then ``self.save(entity, operation)``.

        Args:
            entity: the source aggregate, with its new event pending.
            integration: a declared integration name (latest version is used).
            payload: plain JSON data classified by the declaration.
            target: URL override; defaults to the declaration's endpoint.
            effect_index: which effect of this transition (0, 1, ...).
            principal: who authorized it.
            traceparent: W3C trace context of the authorizing request.
            tenant: defaults to the class attribute ``tenant`` when None; an empty tenant is refused.
            now: UTC-aware instant; defaults to the application's clock.
            code_digest: digest of the code that issued the intent; by default the host
                module's, computed at start (``self.code_digest``: the module declaring this
                application class and its integrations; ``ledger.provenance.module_digest``).
            source_action: the command or event that authorized it; defaults to the name of
                the entity's last pending event (``Order.Placed`` -> ``"Placed"``).
            on_behalf_of: the delegation chain (``ledger.Delegation(principal, role)``, the
                principal acted for first), when ``principal`` acts for another.

        Returns:
            A new ``Operation`` with a pending ``Intended``, or, for an exact retry (same derived
            id, same fingerprint, already recorded), the stored operation with nothing pending.

        Raises:
            IntentConflictError: the derived id exists with another fingerprint.
            OperationArchivedError: the derived id was archived (``opledger archive``).
            UnknownIntegrationError: the integration is not declared.
            PayloadError: the payload breaks the declaration.
            SettlementEntityMismatchError: the entity is not of the type the declaration
                settles into (``settlement.entity_type``).
        """
        if not entity.pending_events:
            raise InvalidArgumentError(
                "intend needs the entity's authorizing transition: call it after the entity's command "
                "method and before save(), while the entity's new event is still pending")
        declaration = self.registry.get(integration)
        if declaration.settlement is not None:
            problem = entity_type_problem(declaration.settlement.entity_type, type(entity))
            if problem is not None:
                raise SettlementEntityMismatchError(declaration.name, declaration.settlement.entity_type,
                                                    get_topic(type(entity)))
        if source_action is None:
            source_action = type(entity.pending_events[-1]).__name__
        source = Source(
            tenant=tenant if tenant is not None else type(self).tenant,
            entity_type=get_topic(type(entity)),
            entity_id=entity.id,
            entity_version=entity.version,
            effect_index=effect_index,
        )
        resolved_target = target if target is not None else declaration.endpoint
        # An entity created in this very transaction has no stored history, so no operation can
        # exist for it yet: only a transition of a stored entity needs the lookup.
        created_now = entity.version == len(entity.pending_events)
        op_id = operation_id(source, declaration.name)
        existing = None if created_now else self._find_operation(op_id)
        if existing is None and not created_now:
            self._refuse_archived(op_id)
        if existing is not None:
            given = fingerprint(declaration, payload, resolved_target)
            if existing.fingerprint != given:
                raise IntentConflictError(existing.id, existing.fingerprint, given)
            return existing
        # The producer span of the intent (DESIGN §9): its context is what the intent stores.
        span, stored_traceparent = tracing.start_intent(declaration.name, traceparent)
        try:
            op = Operation.intend(
                now=now or self.clock.now(),
                integration=declaration,
                source=source,
                payload=payload,
                target=resolved_target,
                principal=principal,
                traceparent=stored_traceparent,
                code_digest=code_digest or self.code_digest,
                source_action=source_action,
                on_behalf_of=on_behalf_of,
                build=self.build,
            )
        except BaseException as exc:
            span.set_attribute(tracing.ERROR_TYPE, type(exc).__name__)
            span.end()
            raise
        if span.is_recording():
            span.set_attribute(tracing.MESSAGE_ID, str(op.id))
            tracing.INTENT_SPANS.add(op.id, span)
        return op

    def get_operation(self, op_id: UUID) -> Operation:
        """Load an operation by id.

        Raises:
            OperationNotFoundError: no such operation.
            CorruptRecordError: a stored event cannot be decoded exactly.
        """
        found = self._find_operation(op_id)
        if found is None:
            raise OperationNotFoundError(f"no operation {op_id}")
        return found

    def _refuse_archived(self, op_id: UUID) -> None:
        """Refuse an id the store's archive index holds (its records are gone from the hot
        store, so only the index knows). The store's factory answers where it keeps archives
        (``migrations.drivers.recorders``, and ``memory_env``'s in memory); the library's own
        factories keep none.

        Raises:
            OperationArchivedError: ``op_id`` is archived.
        """
        lookup = getattr(self.factory, "archived_segment", None)
        segment = lookup(self.recorder, op_id) if lookup is not None else None
        if segment is not None:
            raise OperationArchivedError(op_id, segment)

    def _find_operation(self, op_id: UUID) -> Operation | None:
        if not self.recorder.select_events(op_id, limit=1):
            return None  # the common case when intending: one cheap read, nothing to decode
        try:
            aggregate: Any = self.repository.get(op_id)
        except AggregateNotFoundError:
            return None
        if not isinstance(aggregate, Operation):
            raise OperationNotFoundError(f"{op_id} is not an operation: {_what_it_is(aggregate)}")
        return aggregate


def _owner_lock(database: Database) -> AbstractContextManager[object]:
    """The store's single-owner lock for a store in a file of its own (nothing for a server)."""
    if database.path is not None:
        return StoreLock(database.path)
    return nullcontext()


def _global_budget(declared: CallBudget | Mapping[str, Any] | None) -> CallBudget | None:
    """``global_call_budget`` checked: None, a :class:`CallBudget`, or a mapping with
    ``calls_per_window`` (>= 1) and ``window_seconds`` (required; ``MIN_BUDGET_WINDOW_SECONDS``
    to ``MAX_BUDGET_WINDOW_SECONDS``).

    Raises:
        ConfigurationError: one line, naming each problem with its field (as declaration
            errors do: ``ledger.declarations.validation_problems``).
    """
    if declared is None or isinstance(declared, CallBudget):
        return declared
    if not isinstance(declared, Mapping):
        raise ConfigurationError(f"global_call_budget must be a mapping {{calls_per_window: N >= 1, "
                                 f"window_seconds: S}}, got {type(declared).__name__} {str(declared)[:80]!r}")
    problems: list[tuple[str, str]] = []
    budget: CallBudget | None = None
    try:
        budget = CallBudget.model_validate(dict(declared))
    except ValidationError as exc:
        problems = validation_problems(exc, "(budget)")
    if "window_seconds" not in declared:  # no default for the one budget every call counts against
        problems.append(("window_seconds", "required (seconds): the global budget names its window"))
    if problems:
        text = "; ".join(f"{path}: {message}" for path, message in problems)
        raise ConfigurationError(f"global_call_budget is invalid: {text}")
    return budget


def _what_it_is(aggregate: Any) -> str:
    """What an id names when it is not an operation, in the words an operator reads."""
    if isinstance(aggregate, Receipt):
        return ("it is a keyed command's receipt (`opledger attention` lists the stuck ones; "
                "`opledger resolve` resolves them)")
    return f"it is one of the application's own {type(aggregate).__name__} entities"
