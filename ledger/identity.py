"""Derived operation identity and intent fingerprints (DESIGN §3, §6).

The same source transition always yields the same operation id, so re-running a command cannot
create a second operation; the fingerprint tells an exact retry from a conflicting intent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid5

from ledger.declarations import Classification, Integration, canonical_json

OPERATION_NAMESPACE = UUID("6f1c7a2e-3b0d-5e8a-9c41-0d2b7e5f9a13")
"""Fixed uuid5 namespace for operation ids. Changing it would change every id: never do."""


@dataclass(frozen=True, slots=True)
class Source:
    """What caused an intent: the entity transition that authorized it.

    Attributes:
        tenant: the tenant the entity belongs to.
        entity_type: topic of the entity class (``module:Class``).
        entity_id: the entity's id.
        entity_version: the entity's version *after* the authorizing transition.
        effect_index: which effect of that transition (0 for the first).
    """

    tenant: str
    entity_type: str
    entity_id: UUID
    entity_version: int
    effect_index: int = 0


_KEY_ENCODER = json.JSONEncoder(separators=(",", ":"))  # json.dumps(..., separators=...), minus a new encoder per call


def operation_id(source: Source, integration_name: str) -> UUID:
    """Return the operation id: ``uuid5`` over tenant, entity id, entity version, integration
    name and effect index (DESIGN §3 'operation id').

    Args:
        source: the authorizing transition.
        integration_name: the declared integration's name (not its version, so a redeploy with a
            new declaration version maps to the same operation and is caught as a conflict).

    Returns:
        A stable UUID.
    """
    key = _KEY_ENCODER.encode(
        [source.tenant, str(source.entity_id), source.entity_version, integration_name, source.effect_index])
    return uuid5(OPERATION_NAMESPACE, key)


def stable_payload(integration: Integration, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Return the payload without secret fields: what the fingerprint covers."""
    return {
        k: v for k, v in payload.items() if integration.classification_of(k) is not Classification.SECRET
    }


def fingerprint(integration: Integration, payload: Mapping[str, Any], target: str | None) -> str:
    """Return ``sha256:<hex>`` of the stable caller intent: integration name and version, the
    non-secret payload and the target. Timestamps, generated ids and secrets are not in it.

    Raises:
        ValueError: the payload is not plain JSON data.
    """
    body = {
        "integration": integration.name,
        "version": integration.version,
        "payload": stable_payload(integration, payload),
        "target": target,
    }
    return "sha256:" + hashlib.sha256(canonical_json(body)).hexdigest()
