"""The reference partner as a provider that calls back (delivery mode ``callback``).

A delivery carrying ``X-Callback-Url`` is accepted (202, a remote id) and, in the same
transaction as its effect, a callback is queued in the partner's durable log (table
``callbacks``). A sender thread posts each queued callback to its URL as a Standard Webhooks
message signed with the partner's callback secret: ``webhook-id`` ``msg_<idempotency key>``
(the same on every retry), a fresh ``webhook-timestamp`` and signature on every send, and a body
naming the operation (the ``Idempotency-Key`` it received) and the attempt (``X-Attempt-Id``).
It retries with backoff until a 2xx, and stops on a refusal that a retry cannot change (401,
404, 409, 413, 422). Every send is a row of ``callback_sends``, committed before the next one.

For tests and the demo, control routes send what a provider must never be able to get accepted:

- ``POST /_control/callbacks/forge`` ``{"key": ...}``: the key's callback, signed with another
  secret;
- ``POST /_control/callbacks/replay`` ``{"key": ...}``: the exact bytes and headers of the key's
  last send again (a captured message replayed).

Both answer ``{"status": <what the receiver answered>}`` and are logged as sends (``kind``
``forged`` or ``replayed``).

Source: issue 12 items 3 and 6; Standard Webhooks specification ("webhook-id ... same on retries").
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import httpx
from standardwebhooks.webhooks import Webhook

from ledger.clock import Clock

CALLBACK_URL_HEADER = "x-callback-url"
CALLBACK_SECRET_ENV = "OPLEDGER_PARTNER_CALLBACK_SECRET"
"""Environment variable of the callback signing secret (default: the delivery secret)."""
FIRST_DELAY_SECONDS = 0.2
"""How long after acceptance the first callback is sent, seconds."""
RETRY_BASE_SECONDS = 0.2
RETRY_MAX_SECONDS = 2.0
SEND_TIMEOUT_SECONDS = 5.0
FINAL_REFUSALS = frozenset({401, 404, 409, 413, 422})
"""Receiver answers a retry cannot change: the callback is given up (and logged)."""
FORGED_SECRET = "whsec_" + base64.b64encode(b"not-the-callback-secret-at-all!!").decode()
"""What the forge control route signs with: a valid secret, just not the receiver's."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS callbacks (
    idempotency_key TEXT PRIMARY KEY,
    callback_id TEXT NOT NULL,
    url TEXT NOT NULL,
    body BLOB NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'refused')),
    sends INTEGER NOT NULL DEFAULT 0,
    due_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS callback_sends (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('send', 'forged', 'replayed')),
    sent_at TEXT NOT NULL,
    headers TEXT NOT NULL,
    status INTEGER,
    error TEXT
);
"""


def callback_body(*, operation_id: str, attempt_id: str | None, outcome: str = "succeeded",
                  remote_status: str = "done", detail: str = "") -> bytes:
    """The JSON body of a callback (what ``adapters.http.callbacks.CallbackBody`` reads)."""
    return json.dumps({"operation_id": operation_id, "attempt_id": attempt_id, "outcome": outcome,
                       "remote_status": remote_status, "detail": detail}, separators=(",", ":")).encode()


def signed_headers(secret: str, *, callback_id: str, at: datetime, body: bytes) -> dict[str, str]:
    """Standard Webhooks headers for ``body`` signed with ``secret`` at ``at`` (UTC)."""
    signature = Webhook(secret).sign(callback_id, at, body.decode("utf-8"))
    return {"webhook-id": callback_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": signature, "content-type": "application/json"}


def queue_callback(db: sqlite3.Connection, *, key: str, headers: Mapping[str, str], due_at: float) -> None:
    """Queue the callback of a delivery that asked for one (in the caller's transaction)."""
    url = headers.get(CALLBACK_URL_HEADER)
    if not url:
        return
    body = callback_body(operation_id=key, attempt_id=headers.get("x-attempt-id"),
                         detail=f"applied {key}")
    db.execute("INSERT OR IGNORE INTO callbacks VALUES (?, ?, ?, ?, 'pending', 0, ?)",
               (key, f"msg_{key}", url, body, due_at))


@dataclass(frozen=True, slots=True)
class CallbackRow:
    """One queued callback, as the partner's log holds it."""

    idempotency_key: str
    callback_id: str
    url: str
    body: bytes
    state: str
    sends: int


class CallbackSender:
    """Posts queued callbacks until each is answered 2xx (or refused for good).

    Args:
        db: the partner's connection (shared; every use under ``lock``).
        lock: the partner store's lock.
        secret: the callback signing secret (``whsec_...``).
        clock: the partner's clock (UTC): signing times, and due times as Unix seconds (durable
            across a partner restart, unlike a monotonic clock).
    """

    def __init__(self, *, db: sqlite3.Connection, lock: threading.Lock, secret: str, clock: Clock) -> None:
        self._db = db
        self._lock = lock
        self._secret = secret
        self._clock = clock
        self._client = httpx.Client(timeout=SEND_TIMEOUT_SECONDS)

    def run(self, stop: threading.Event, interval: float = 0.05) -> None:
        """Send due callbacks until ``stop`` is set."""
        while not stop.is_set():
            try:
                self.run_once()
            except sqlite3.ProgrammingError:
                return  # the store was closed: the partner is stopping
            stop.wait(interval)

    def run_once(self) -> int:
        """Send every due callback once. Returns how many were sent."""
        now = self._clock.now().timestamp()
        with self._lock:
            due = self._db.execute("SELECT idempotency_key, callback_id, url, body FROM callbacks WHERE state = "
                                   "'pending' AND due_at <= ? ORDER BY due_at LIMIT 20", (now,)).fetchall()
        for key, callback_id, url, stored_body in due:
            body = bytes(stored_body)
            headers = signed_headers(self._secret, callback_id=callback_id, at=self._clock.now(), body=body)
            status, error = self._post(url, headers, body)
            self._log(key, "send", headers, status, error)
            with self._lock:
                sends = self._db.execute("SELECT sends FROM callbacks WHERE idempotency_key = ?", (key,)).fetchone()[0]
                state = ("delivered" if status is not None and 200 <= status < 300
                         else "refused" if status in FINAL_REFUSALS else "pending")
                delay = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** sends)
                self._db.execute("UPDATE callbacks SET state = ?, sends = sends + 1, due_at = ? "
                                 "WHERE idempotency_key = ?", (state, now + delay, key))
        return len(due)

    def forge(self, key: str) -> int | None:
        """Send ``key``'s callback signed with another secret; return the receiver's status."""
        row = self._row(key)
        headers = signed_headers(FORGED_SECRET, callback_id=f"{row.callback_id}-forged", at=self._clock.now(),
                                 body=row.body)
        status, error = self._post(row.url, headers, row.body)
        self._log(key, "forged", headers, status, error)
        return status

    def replay(self, key: str) -> int | None:
        """Send ``key``'s last signed send again, byte for byte; return the receiver's status."""
        row = self._row(key)
        with self._lock:
            last = self._db.execute("SELECT headers FROM callback_sends WHERE idempotency_key = ? AND kind = 'send' "
                                    "ORDER BY seq DESC LIMIT 1", (key,)).fetchone()
        if last is None:
            raise KeyError(f"callback {key!r} was never sent")
        headers = json.loads(last[0])
        status, error = self._post(row.url, headers, row.body)
        self._log(key, "replayed", headers, status, error)
        return status

    def close(self) -> None:
        self._client.close()

    def _row(self, key: str) -> CallbackRow:
        with self._lock:
            row = self._db.execute("SELECT idempotency_key, callback_id, url, body, state, sends FROM callbacks "
                                   "WHERE idempotency_key = ?", (key,)).fetchone()
        if row is None:
            raise KeyError(f"no callback queued for {key!r}")
        return CallbackRow(row[0], row[1], row[2], bytes(row[3]), row[4], row[5])

    def _post(self, url: str, headers: Mapping[str, str], body: bytes) -> tuple[int | None, str | None]:
        try:
            return self._client.post(url, content=body, headers=dict(headers)).status_code, None
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"

    def _log(self, key: str, kind: str, headers: Mapping[str, str], status: int | None, error: str | None) -> None:
        with self._lock:
            self._db.execute("INSERT INTO callback_sends (idempotency_key, kind, sent_at, headers, status, error) "
                             "VALUES (?, ?, ?, ?, ?, ?)",
                             (key, kind, self._clock.now().isoformat(), json.dumps(dict(headers)), status, error))
