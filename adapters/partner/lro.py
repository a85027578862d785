"""The reference partner's mock long-running-operation provider (AIP-151 shape), on the same
durable log as its webhooks.

- ``POST /lro/<anything>`` (not under ``/lro/operations/``): a create call, signed and deduped on
  ``Idempotency-Key`` like any delivery. The first one creates ``operations/<key>`` in the same
  transaction as its effect and answers ``202`` with the operation
  (``{"name": "operations/<key>", "done": false, ...}``) and an ``Operation-Location`` header;
  a repeat gets the stored first response. The behaviour of the operation is scripted by the
  create URL's query (:class:`LroScript`), stored with it, so a restarted partner keeps it.
- ``GET /lro/operations/<key>``: a poll, answered with ``{name, done, metadata, response | error}``
  (``error.code`` 1 is CANCELLED, 13 INTERNAL: google.rpc.Code), or ``404`` once lost.
- ``POST /lro/operations/<key>:cancel``: a cancel: ``200 {}`` when it wins (the operation is
  cancelled at once) or arrives as the operation completes (it completed: the next poll shows
  the response), ``409`` when it loses or the operation is already done, ``404`` when unknown.

Every poll and cancel is one row of the log (kinds ``poll`` and ``cancel``), committed with the
state change it caused.

Source: AIP-151 (long-running operations); issue 12 item 1 (the faults).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

LRO_PREFIX = "/lro/"
OPERATIONS_PREFIX = "/lro/operations/"
CANCEL_SUFFIX = ":cancel"
CODE_CANCELLED = 1
"""google.rpc.Code CANCELLED."""
CODE_INTERNAL = 13
"""google.rpc.Code INTERNAL: the remote work failed."""
MAX_PENDING_POLLS = 1_000_000
MAX_AFTER_SECONDS = 86_400.0


class LroScriptError(ValueError):
    """A create URL's script is malformed; the message names the key."""


@dataclass(frozen=True, slots=True)
class LroScript:
    """How one long-running operation behaves, from its create URL's query.

    Attributes:
        polls: polls answered "running" before it is done (``?polls=N``, default 1).
        after: seconds after creation before it may be done, whatever the polls (``?after=S``).
        result: ``success`` (default), ``failure``, or ``lost`` (then polls get ``404``).
        retry_after: a ``Retry-After`` value sent with every "running" poll (``?retry_after=N``).
        cancel: what a cancel does while it runs: ``wins`` (default), ``loses``, ``completes``.
    """

    polls: int = 1
    after: float = 0.0
    result: str = "success"
    retry_after: int | None = None
    cancel: str = "wins"

    @classmethod
    def from_query(cls, query: str) -> LroScript:
        """Parse ``polls=2&result=failure&...``.

        Raises:
            LroScriptError: an unknown key or a value out of range.
        """
        values = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        unknown = set(values) - {"polls", "after", "result", "retry_after", "cancel"}
        if unknown:
            raise LroScriptError(f"unknown LRO script keys: {', '.join(sorted(unknown))}")
        try:
            script = cls(polls=int(values.get("polls", 1)), after=float(values.get("after", 0.0)),
                         result=values.get("result", "success"),
                         retry_after=int(values["retry_after"]) if "retry_after" in values else None,
                         cancel=values.get("cancel", "wins"))
        except ValueError as exc:
            raise LroScriptError(f"bad LRO script value: {exc}") from None
        if not 0 <= script.polls <= MAX_PENDING_POLLS or not 0 <= script.after <= MAX_AFTER_SECONDS:
            raise LroScriptError("polls or after out of range")
        if script.result not in ("success", "failure", "lost"):
            raise LroScriptError("result must be success, failure or lost")
        if script.cancel not in ("wins", "loses", "completes"):
            raise LroScriptError("cancel must be wins, loses or completes")
        if script.retry_after is not None and not 0 <= script.retry_after <= 3600:
            raise LroScriptError("retry_after must be 0..3600")
        return script


def is_create(method: str, path: str) -> bool:
    """A create call: a POST under ``/lro/`` that is not an operation's own path."""
    return method == "POST" and path.startswith(LRO_PREFIX) and not path.startswith(OPERATIONS_PREFIX)


def kind_of(method: str, path: str) -> str | None:
    """``poll`` or ``cancel`` for an operation's own path, else None."""
    if not path.startswith(OPERATIONS_PREFIX):
        return None
    if method == "GET" and not path.endswith(CANCEL_SUFFIX):
        return "poll"
    if method == "POST" and path.endswith(CANCEL_SUFFIX):
        return "cancel"
    return None


def name_of(path: str) -> str:
    """The operation name (``operations/<key>``) a poll or cancel path names."""
    return "operations/" + path[len(OPERATIONS_PREFIX):].removesuffix(CANCEL_SUFFIX)


def created_response(key: str) -> tuple[int, bytes, str]:
    """The first response to a create: status, body, and the ``Operation-Location`` path."""
    name = f"operations/{key}"
    document = {"name": name, "done": False, "metadata": {"state": "running"}}
    return 202, json.dumps(document, separators=(",", ":")).encode(), LRO_PREFIX + name


def create(db: sqlite3.Connection, *, key: str, now: datetime, script: LroScript) -> None:
    """Create ``operations/<key>`` (inside the create's effect transaction)."""
    db.execute("INSERT OR IGNORE INTO lro_operations (name, idempotency_key, created_at, script, state) "
               "VALUES (?, ?, ?, ?, 'running')", (f"operations/{key}", key, now.isoformat(),
                                                  json.dumps(asdict(script))))


@dataclass(frozen=True, slots=True)
class LroAnswer:
    """What the partner answers a poll or cancel with."""

    status: int
    document: dict[str, Any]
    retry_after: int | None = None


def poll(db: sqlite3.Connection, name: str, now: datetime) -> LroAnswer:
    """Answer a poll of ``name`` at ``now``, moving the operation on by its script."""
    row = _load(db, name)
    if row is None or row["state"] == "lost":
        return LroAnswer(404, {"error": {"code": 5, "message": f"{name} not found"}})
    script = row["script"]
    state = row["state"]
    if state == "running":
        polls = row["polls"] + 1
        due = polls > script.polls and now >= row["created_at"] + timedelta(seconds=script.after)
        if due:
            state = {"success": "succeeded", "failure": "failed", "lost": "lost"}[script.result]
        db.execute("UPDATE lro_operations SET polls = ?, state = ?, done_at = ? WHERE name = ?",
                   (polls, state, now.isoformat() if due else None, name))
        if state == "lost":
            return LroAnswer(404, {"error": {"code": 5, "message": f"{name} not found"}})
        if state == "running":
            return LroAnswer(200, _document(name, state, polls), retry_after=script.retry_after)
    return LroAnswer(200, _document(name, state, row["polls"]))


def cancel(db: sqlite3.Connection, name: str, now: datetime) -> LroAnswer:
    """Answer a cancel of ``name`` at ``now`` by its script."""
    row = _load(db, name)
    if row is None or row["state"] == "lost":
        return LroAnswer(404, {"error": {"code": 5, "message": f"{name} not found"}})
    db.execute("UPDATE lro_operations SET cancel_requests = cancel_requests + 1 WHERE name = ?", (name,))
    if row["state"] != "running":
        return LroAnswer(409, {"error": {"code": 9, "message": f"{name} is already {row['state']}"}})
    behaviour = row["script"].cancel
    if behaviour == "loses":
        return LroAnswer(409, {"error": {"code": 9, "message": f"{name} can no longer be cancelled"}})
    state = "cancelled" if behaviour == "wins" else "succeeded"  # completes: it finished as the cancel came
    db.execute("UPDATE lro_operations SET state = ?, done_at = ? WHERE name = ?", (state, now.isoformat(), name))
    return LroAnswer(200, {})


def _document(name: str, state: str, polls: int) -> dict[str, Any]:
    document: dict[str, Any] = {"name": name, "done": state != "running",
                                "metadata": {"state": state, "polls": polls}}
    if state == "succeeded":
        document["response"] = {"name": name.replace("operations/", "resources/"), "state": "ACTIVE"}
    elif state == "failed":
        document["error"] = {"code": CODE_INTERNAL, "message": "provisioning failed"}
    elif state == "cancelled":
        document["error"] = {"code": CODE_CANCELLED, "message": "cancelled"}
    return document


def _load(db: sqlite3.Connection, name: str) -> dict[str, Any] | None:
    row = db.execute("SELECT created_at, script, polls, state FROM lro_operations WHERE name = ?",
                     (name,)).fetchone()
    if row is None:
        return None
    return {"created_at": datetime.fromisoformat(row[0]), "script": LroScript(**json.loads(row[1])),
            "polls": row[2], "state": row[3]}
