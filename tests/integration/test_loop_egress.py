"""Many calls in flight on the adapter's event loop hold no thread each (ADR 0009 step 2, issue 30
item 3): a worker starts 2,000 calls to a provider that holds every request until released,
with a thread count that does not grow with them, then records every outcome."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psutil
import pytest

from ledger.clock import SystemClock
from ledger.config import Database
from ledger.declarations import DeliveryMode
from tests.apps import ModesApp, Thing, declaration
from tests.workers import drive_until, webhook_worker

CALLS = 2000
HELD_SECONDS = 60.0
"""The calls' total deadline, seconds: far longer than the test holds them."""
MAX_MEMORY_PER_CALL = 100 * 1024
"""Resident memory one call in flight may add to this process at most, bytes: generous (the
held server's side of each connection is counted too); a thread per call would not break it,
the thread count does."""


class _HeldApp(ModesApp):
    """The test application; its idempotent integration waits up to ``HELD_SECONDS`` per call."""

    name = "modes"
    integrations = [declaration(DeliveryMode.IDEMPOTENT, request_timeout_seconds=HELD_SECONDS)]


@dataclass
class _Held:
    """A provider on one event loop thread that holds each request until :meth:`release`."""

    url: str
    loop: asyncio.AbstractEventLoop
    gate: asyncio.Event
    received: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def release(self) -> None:
        self.loop.call_soon_threadsafe(self.gate.set)


@contextmanager
def _held_provider() -> Iterator[_Held]:
    """Serve HTTP/1.1 keep-alive on loopback from one thread: read a request, count it, wait for
    the gate, answer ``200 {}``."""
    loop = asyncio.new_event_loop()
    gate = asyncio.Event()
    held: list[_Held] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                with held[0].lock:
                    held[0].received += 1
                await gate.wait()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, name="held-provider", daemon=True)
    thread.start()
    held.append(_Held(url=f"http://127.0.0.1:{port}/hook", loop=loop, gate=gate))
    try:
        yield held[0]
    finally:
        asyncio.run_coroutine_threadsafe(_shutdown(server), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


async def _shutdown(server: asyncio.Server) -> None:
    """Stop serving and end every connection's task, on the server's loop."""
    server.close()
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _intend(app: _HeldApp, target: str, n: int) -> list:
    """``n`` operations to ``target``, saved 200 to a commit (faster than one each)."""
    ids, batch = [], []
    for i in range(n):
        thing = Thing(label=f"thing-{i}")
        op = app.intend(thing, "test.idempotent", target=target,
                        payload={"n": i, "note": "internal note", "token": "secretref:test-token"})
        batch += [thing, op]
        ids.append(op.id)
        if len(batch) >= 400:
            app.save(*batch)
            batch = []
    if batch:
        app.save(*batch)
    return ids


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_two_thousand_calls_in_flight_hold_no_thread_each(modes_db: Database) -> None:
    app = _HeldApp(env=modes_db.library_env(create_table=False), clock=SystemClock())
    process = psutil.Process()
    try:
        with _held_provider() as provider, webhook_worker(app, modes_db, worker_id="many", token="tok",
                                                          egress_slots=CALLS) as worker:
            ids = _intend(app, provider.url, CALLS)
            threads_before, memory_before = threading.active_count(), process.memory_info().rss
            drive_until(worker, lambda: provider.received == CALLS, timeout_seconds=60,
                        what=f"{CALLS} calls held by the provider")
            assert worker.egress.on_loops == CALLS and len(worker.egress.in_flight) == CALLS
            assert worker.egress.threads == 0
            # The adapter's loop thread may have started since; no thread per call.
            assert threading.active_count() <= threads_before + 2, threading.enumerate()
            grown = process.memory_info().rss - memory_before
            assert grown < CALLS * MAX_MEMORY_PER_CALL, grown
            provider.release()
            drive_until(worker, lambda: not worker.egress.in_flight, timeout_seconds=60,
                        what="every held call's outcome recorded")
            assert {app.get_operation(op_id).status.value for op_id in ids} <= {"succeeded", "settled"}
    finally:
        app.close()
