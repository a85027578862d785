"""Evidence export: a self-describing JSON document of what the ledger recorded about one
operation, and its verification against the store.

The document holds the exporting opledger's version, commit and code digest (the intent's own,
recorded when it was made, are in the summary's ``authority`` and on the ``Intended`` entry),
the integration's declaration and its digest (as recorded at intent, and now), the redacted
timeline with each record's position and sha256, the host entity's transitions the settlement
caused (their topics, versions and sha256: host events carry unclassified data, so their fields
stay out), and every trace id its records name (the intent's and each later record's
``traceparent``). Verifying hashes the stored records again and names each one that differs, is
missing, or is new.

Source: issue 13 item 5; issue 31 item 2 (provenance).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError

from adapters.operator import describe, event_entry, show, trace_id
from ledger.errors import CorruptRecordError, InvalidArgumentError, UnknownIntegrationError
from ledger.operation import Operation
from ledger.provenance import build_info
from ledger.store_identity import read_store_identity

if TYPE_CHECKING:
    from adapters.runtime import Store

KIND = "opledger.evidence"
SUMMARY_NOT_RECORDED = frozenset({"budgets", "projection_lag"})
"""Summary fields that are not read from the records, so verification does not check them."""
FORMAT_VERSION = 1


@cache
def code_digest() -> str:
    """sha256 over the source of the ``ledger`` package (path and bytes of each ``.py`` file,
    in path order): which code wrote and reads these records."""
    root = Path(__file__).resolve().parents[1] / "ledger"
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return "sha256:" + digest.hexdigest()


def record_digest(originator_id: UUID | str, version: int, topic: str, state: bytes) -> str:
    """sha256 of one stored record: its originator id, version, topic and state bytes."""
    head = f"{UUID(str(originator_id))}\0{version}\0{topic}\0".encode()
    return "sha256:" + hashlib.sha256(head + bytes(state)).hexdigest()


def export(store: Store, op_id: UUID) -> dict[str, Any]:
    """The evidence document of one operation (JSON-ready).

    Raises:
        OperationNotFoundError: no such operation.
    """
    app = store.app
    summary = show(store, op_id)  # raises OperationNotFoundError
    timeline, events = _timeline(app, list(app.recorder.select_events(op_id)))
    settled_versions = [e.entity_version for e in events if isinstance(e, Operation.Settled)]
    return {
        "kind": KIND, "format_version": FORMAT_VERSION,
        "generated_at": app.clock.now().isoformat(),
        "opledger": _exporter(),
        "store": {"backend": store.settings.database.backend, "application": app.name,
                  "store_id": _store_id(store)},
        "operation": summary,
        "declaration": _declaration(app, summary),
        "timeline": timeline,
        "settlement_transitions": _entity_records(store, summary, settled_versions),
        "trace_ids": _trace_ids(events),
    }


def _exporter() -> dict[str, str]:
    """The opledger making the document: version, commit and where the commit came from
    (``ledger.provenance.build_info``), and the digest of its ``ledger`` code."""
    build = build_info()
    return {"version": build.version, "commit": build.commit, "commit_source": build.commit_source,
            "code_digest": code_digest()}


def _timeline(app: Any, records: list[Any]) -> tuple[list[dict[str, Any]], list[Any]]:
    """The timeline entries of an operation's stored ``records`` (in order: an entry's redaction
    follows the ``Intended`` before it), and the events that decoded."""
    timeline: list[dict[str, Any]] = []
    events: list[Any] = []
    name = version = None
    for stored in records:
        entry: dict[str, Any] = {"position": stored.originator_version, "topic": stored.topic,
                                 "sha256": record_digest(stored.originator_id, stored.originator_version,
                                                         stored.topic, stored.state)}
        try:
            event = app.mapper.to_domain_event(stored)
        except CorruptRecordError as exc:
            entry.update({"event": "CORRUPT", "error": str(exc)})
        else:
            if isinstance(event, Operation.Intended):
                name, version = event.integration_name, event.integration_version
            events.append(event)
            entry.update(event_entry(app, event, name, version))
            entry.pop("version", None)
        timeline.append(entry)
    return timeline, events


def _as_exported(value: Any) -> Any:
    """``value`` as it reads back from an exported document (:func:`dumps`)."""
    return json.loads(json.dumps(value, default=str))


def _content_problems(store: Store, op_id: UUID, document: dict[str, Any],
                      stored: dict[int, Any]) -> list[dict[str, Any]]:
    """What the document shows that its records do not say: each timeline entry is made again
    from the stored record it names, and the summary (``operation``) from the operation as it
    stood at the summary's version. Left out of the summary: its call budgets (windows of the
    clock at export) and ``projection_lag`` (the status view at export), which are not records."""
    problems: list[dict[str, Any]] = []
    made, _ = _timeline(store.app, [stored[p] for p in sorted(stored)])
    shown = {e.get("position"): e for e in document["timeline"] if isinstance(e, dict)}
    for entry in _as_exported(made):
        doc = shown.get(entry["position"])
        # A record whose hash differs is reported as such; its content is not compared.
        if doc is None or doc.get("sha256") != entry["sha256"] or doc == entry:
            continue
        fields = sorted(k for k in entry.keys() | doc.keys() if entry.get(k) != doc.get(k))
        problems.append({"position": entry["position"], "topic": entry["topic"],
                         "problem": f"the document shows other content than the record ({', '.join(fields)})"})
    summary = document.get("operation")
    if not isinstance(summary, dict):
        return problems
    op: Operation | None = None
    try:
        version = int(summary["version"])
        op = store.app.repository.get(op_id, version=version)
    except CorruptRecordError:
        return problems  # the timeline check names the record that does not decode
    except (KeyError, TypeError, ValueError, AggregateNotFoundError):
        pass  # reported below
    if op is None or op.version != version:
        problems.append({"position": summary.get("version"), "topic": "operation",
                         "problem": "the summary names a version the records do not hold"})
        return problems
    made_summary = _as_exported(describe(store.app, op, None))
    fields = sorted(k for k in made_summary.keys() | summary.keys() if k not in SUMMARY_NOT_RECORDED
                    and made_summary.get(k) != summary.get(k))
    if fields:
        problems.append({"position": version, "topic": "operation",
                         "problem": f"the summary differs from the records ({', '.join(fields)})"})
    return problems


def _declaration(app: Any, summary: dict[str, Any]) -> dict[str, Any]:
    name, version = summary.get("integration"), summary.get("integration_version")
    try:
        declaration = app.registry.get(name, version)
    except UnknownIntegrationError:
        return {"name": name, "version": version, "declared_now": None, "digest_now": None}
    return {"name": declaration.name, "version": declaration.version,
            "declared_now": declaration.model_dump(mode="json"), "digest_now": declaration.digest()}


def _entity_records(store: Store, summary: dict[str, Any], versions: list[int]) -> list[dict[str, Any]]:
    source = summary.get("source")
    if not source or not versions:
        return []
    entity_id = UUID(source["entity_id"])
    out = []
    for version in versions:
        for stored in store.app.recorder.select_events(entity_id, gt=version - 1, lte=version):
            out.append({"entity_type": source["entity_type"], "entity_id": str(entity_id),
                        "version": stored.originator_version, "topic": stored.topic,
                        "sha256": record_digest(entity_id, stored.originator_version, stored.topic, stored.state)})
    return out


def verify(store: Store, document: dict[str, Any]) -> dict[str, Any]:
    """Compare an evidence document with the store now.

    Returns:
        ``{"matches": bool, "operation_id", "checked": n, "problems": [...]}``; each problem names
        a record (``position``, ``topic``) that differs, is missing from the store, or was added
        since (``new``: later records are not tampering, but the export no longer tells all), or
        content the document shows that its records do not say (a timeline entry, the summary).

    Raises:
        InvalidArgumentError: ``document`` is not an opledger evidence document.
    """
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise InvalidArgumentError("not an opledger evidence document (its 'kind' is not 'opledger.evidence')")
    try:
        op_id = UUID(document["operation"]["operation_id"])
        exported_through = int(document["operation"]["version"])
        expected = {int(e["position"]): (e["topic"], e["sha256"]) for e in document["timeline"]}
    except (KeyError, TypeError, ValueError) as exc:
        what = f"{type(exc).__name__}: {exc}" if not isinstance(exc, KeyError) else f"no member {exc}"
        raise InvalidArgumentError(f"the evidence document is malformed ({what})") from None
    exported_from = (document.get("store") or {}).get("store_id") if isinstance(document.get("store"), dict) else None
    if exported_from is not None and exported_from != _store_id(store):
        # Another store's records are not this one's: comparing them would call every record
        # "missing", which says nothing true. (A document from before store ids skips this.)
        return {"matches": False, "operation_id": str(op_id), "checked": 0, "problems": [
            {"problem": f"exported from store {exported_from}; this is store {_store_id(store)}: verify it "
                        "against the store it was exported from (--database-url)"}]}
    stored = {s.originator_version: s for s in store.app.recorder.select_events(op_id)}
    problems: list[dict[str, Any]] = []
    for position, (topic, digest) in sorted(expected.items()):
        record = stored.get(position)
        if record is None:
            problems.append({"position": position, "topic": topic, "problem": "missing from the store"})
        elif record_digest(op_id, position, record.topic, record.state) != digest:
            problems.append({"position": position, "topic": topic, "problem": "differs from the export"})
    # The export showed every record up to its summary's version: one it does not show was cut
    # out of the document; only records past that version are new since.
    problems += [{"position": p, "topic": stored[p].topic,
                  "problem": "new since the export" if p > exported_through else "left out of the document"}
                 for p in sorted(set(stored) - set(expected))]
    problems += _content_problems(store, op_id, document, {p: r for p, r in stored.items() if p in expected})
    problems += _trace_problems(store, document, [stored[p] for p in sorted(stored) if p <= exported_through])
    for entry in document.get("settlement_transitions") or []:
        try:
            entity_id, version = UUID(entry["entity_id"]), int(entry["version"])
        except (KeyError, TypeError, ValueError):
            problems.append({"entity_id": None, "version": None, "topic": "settlement_transitions",
                             "problem": f"a settlement transition is malformed: {str(entry)[:200]}"})
            continue
        found = store.app.recorder.select_events(entity_id, gt=version - 1, lte=version)
        if not found or record_digest(entity_id, version, found[0].topic, found[0].state) != entry.get("sha256"):
            problems.append({"entity_id": str(entity_id), "version": version, "topic": entry.get("topic"),
                             "problem": "entity record differs or is missing"})
    tampered = [p for p in problems if p["problem"] != "new since the export"]
    return {"matches": not tampered, "operation_id": str(op_id), "checked": len(expected), "problems": problems}


def _store_id(store: Store) -> str | None:
    """The store's id (``opledger_store``, ``ledger.store_identity``): which store an export came from."""
    return read_store_identity(store.settings.database, missing_ok=True).get("store_id")


def _trace_ids(events: list[Any]) -> list[str]:
    """The trace ids the events' ``traceparent``s name, sorted."""
    return sorted({t for e in events if (t := trace_id(getattr(e, "traceparent", None) or ""))})


def _trace_problems(store: Store, document: dict[str, Any], records: list[Any]) -> list[dict[str, Any]]:
    """``trace_ids`` must be the traces the exported records name, no more and no fewer."""
    _, events = _timeline(store.app, records)
    if document.get("trace_ids") == _trace_ids(events):
        return []
    return [{"position": None, "topic": "trace_ids",
             "problem": f"the document's trace ids are not the ones its records name ({_trace_ids(events)})"}]


def dumps(document: dict[str, Any]) -> str:
    """The document as JSON text (sorted keys, two-space indent, newline-terminated)."""
    return json.dumps(document, indent=2, sort_keys=True, default=str) + "\n"
