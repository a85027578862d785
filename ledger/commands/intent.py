"""The constructor command: recording an operation's intent (``Intended``).

A mixin of ``ledger.operation.Operation``; the rules every command keeps are in ``ledger.commands``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ledger.clock import require_utc
from ledger.commands.base import CommandBase
from ledger.declarations import Integration
from ledger.identity import Source, fingerprint, operation_id
from ledger.intents import Delegation, check_delegation, check_intent, check_payload
from ledger.provenance import BuildInfo, build_info
from ledger.status import ExecutionState
from ledger.time_limits import require_intent_times

if TYPE_CHECKING:
    from ledger.operation import Operation

E = ExecutionState


class IntentCommands(CommandBase):
    """The constructor command of the ``Operation`` aggregate."""

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
