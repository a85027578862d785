"""Wake-ups on PostgreSQL: LISTEN for the notifications the store already sends, so an idle
worker or projection acts at once instead of at its next poll.

Two channels: the event log's (every insert of the ledger's insert function NOTIFYs it; the
status projection listens, and workers read the log's tail for new intents) and the status
view's (a write of the projection that leaves work due now, other than a new intent, NOTIFYs
it, ``projections.rows.due_when_written``; workers listen, so a granted approval, a cancel
request or a settlement to retry is acted on at once). Polling stays as the fallback: a
listener whose connection drops says so once, reconnects with backoff, and wakes everyone on
reconnect to cover the gap; a health check every ``CHECK_SECONDS`` finds a
connection that died quietly.

Source: issue 17 ("wake-ups and pickup latency"); PostgreSQL docs, LISTEN/NOTIFY.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

import psycopg
import structlog
from psycopg import sql

from ledger.outages import backoff_seconds, is_transient
from migrations.drivers.queries import load_queries

log = structlog.get_logger("opledger.notify")

CHECK_SECONDS = 5.0
"""How long the listener waits for a notification before checking its connection, seconds."""
STOP_CHECK_SECONDS = 0.5
"""How often the listener checks its stop event while nothing arrives, seconds."""
QUERIES = load_queries("postgres")
MAX_CHANNEL_CHARS = 63
"""PostgreSQL identifiers (channel names) are cut at 63 bytes."""


def status_channel(schema: str | None) -> str:
    """The status view's notification channel for a store in ``schema`` (channels are per
    database, so the schema keeps stores of one database apart)."""
    return f"opledger_status_{schema or 'public'}"[:MAX_CHANNEL_CHARS]


class Listener:
    """LISTENs on channels and calls the wake-ups registered for each.

    Args:
        conninfo: libpq connection string of the store's database.
        wakeups: channel name -> callables to call with each notification's payload, ``""`` when
            the listener (re)connects and anything may have been sent meanwhile (each must be
            quick and thread-safe, such as ``Worker.wake_for_log``).
    """

    def __init__(self, conninfo: str, wakeups: Mapping[str, Sequence[Callable[[str], None]]]) -> None:
        self.conninfo = conninfo
        self.wakeups = {channel: list(calls) for channel, calls in wakeups.items()}
        self.connected = threading.Event()
        """Set while listening (tests and health checks read it)."""

    def run(self, stop: threading.Event) -> None:
        """Listen until ``stop`` is set, reconnecting after a lost connection (the loop only)."""
        outage = 0
        while not stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    for channel in self.wakeups:
                        conn.execute(sql.SQL(QUERIES["listen_channel"]).format(channel=sql.Identifier(channel)))
                    self.connected.set()
                    if outage:
                        log.warning("listener reconnected", retries=outage)
                        outage = 0
                    self._wake_all()  # anything sent while we were away: look once
                    self._listen(conn, stop)
            except Exception as exc:
                self.connected.clear()
                if not is_transient(exc):
                    log.error("listener stopped; polling only", error=f"{type(exc).__name__}: {exc}")
                    return
                outage += 1
                if outage == 1:
                    log.warning("listener lost its connection; polling until it is back", error=str(exc))
                stop.wait(backoff_seconds(outage))
        self.connected.clear()

    def _listen(self, conn: psycopg.Connection, stop: threading.Event) -> None:
        quiet = 0.0  # seconds without a notification
        while not stop.is_set():
            received = False
            for notify in conn.notifies(timeout=STOP_CHECK_SECONDS):
                received = True
                for wake in self.wakeups.get(notify.channel, ()):
                    wake(notify.payload)
                if stop.is_set():
                    return
            quiet = 0.0 if received else quiet + STOP_CHECK_SECONDS
            if quiet >= CHECK_SECONDS:
                conn.execute(QUERIES["check_connection"])  # a connection that died quietly raises here
                quiet = 0.0

    def _wake_all(self) -> None:
        for calls in self.wakeups.values():
            for wake in calls:
                wake("")

    def start(self, stop: threading.Event) -> threading.Thread:
        """Run :meth:`run` on a daemon thread; returns it."""
        thread = threading.Thread(target=self.run, args=(stop,), name="listener", daemon=True)
        thread.start()
        return thread
