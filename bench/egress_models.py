"""Compare egress concurrency models against ``bench.fast_partner`` (ADR 0002, "Egress concurrency").

    python -m bench.egress_models                    # every model, 8/128/256 calls at once, 0 and 100 ms
    python -m bench.egress_models --n 2000 --model threads-per-thread-client
    python -m bench.egress_models --partner nginx --latency 0 --concurrency 128   # ADR 0009

Each model makes N POSTs of a small JSON body, C at once, to a partner answering after a fixed
delay, and prints requests per second and this process's CPU per request (user + system):

- ``threads-shared-client``: C threads sharing one ``httpx.Client`` (pool of C connections);
- ``threads-per-thread-client``: C threads, each with its own ``httpx.Client`` (what the webhook
  adapter does);
- ``asyncio-shared-client``: one event loop, C tasks sharing one ``httpx.AsyncClient``;
- ``aiohttp-one-loop``: one event loop, C tasks sharing one ``aiohttp.ClientSession`` (the
  ``bench`` extra installs aiohttp), each exchange under one ``asyncio.timeout`` (the total
  deadline docs/adr/0009-egress-event-loop.md relies on);
- ``aiohttp-handoff``: the same loop on its own thread, the calls submitted from the main thread
  (``asyncio.run_coroutine_threadsafe``) and their results taken back through a queue, as a
  worker's cycle would hand calls to it.

``--partner nginx`` measures against Debian's nginx answering ``200 {}`` (``bench.wire``, 13-54
µs of CPU per request) instead of ``bench.fast_partner`` (uvicorn, 218-305 µs), so the figures
are the client's; nginx answers at once, so ``--latency`` is 0 there.

Not a scenario of ``python -m bench``: it measures the HTTP client, not opledger.
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import resource
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager

import httpx

from bench.fast_partner import fast_partner
from bench.wire import nginx_partner

WARMUP = 300


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _threads(url: str, n: int, concurrency: int, shared: bool) -> tuple[float, float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    common = httpx.Client(limits=limits) if shared else None
    local = threading.local()

    def one(i: int) -> None:
        client = common or getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client()
        client.post(url, json={"n": i}).raise_for_status()

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(WARMUP)))
        began, cpu = time.perf_counter(), _cpu()
        list(pool.map(one, range(n)))
        return time.perf_counter() - began, _cpu() - cpu


async def _timed_gather(send: Callable[[int], Awaitable[None]], n: int, concurrency: int) -> tuple[float, float]:
    """Run ``send(i)`` for ``WARMUP`` untimed requests, then ``n`` timed ones, ``concurrency`` at
    once (a semaphore); (wall seconds, CPU seconds) of the timed ``n``."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await send(i)

    await asyncio.gather(*(one(i) for i in range(WARMUP)))
    began, cpu = time.perf_counter(), _cpu()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - began, _cpu() - cpu


def _asyncio(url: str, n: int, concurrency: int) -> tuple[float, float]:
    async def run() -> tuple[float, float]:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(limits=limits) as client:
            async def send(i: int) -> None:
                (await client.post(url, json={"n": i})).raise_for_status()

            return await _timed_gather(send, n, concurrency)

    return asyncio.run(run())


def _aiohttp(url: str, n: int, concurrency: int) -> tuple[float, float]:
    import aiohttp

    async def run() -> tuple[float, float]:
        connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            async def send(i: int) -> None:
                async with asyncio.timeout(30.0), session.post(url, json={"n": i}, allow_redirects=False) as answer:
                    await answer.content.read(64 * 1024)
                    answer.raise_for_status()

            return await _timed_gather(send, n, concurrency)

    return asyncio.run(run())


def _aiohttp_handoff(url: str, n: int, concurrency: int) -> tuple[float, float]:
    import aiohttp

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="egress-loop", daemon=True)
    thread.start()

    async def open_session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency))

    session = asyncio.run_coroutine_threadsafe(open_session(), loop).result()

    async def one(i: int) -> int:
        async with asyncio.timeout(30.0):
            async with session.post(url, json={"n": i}, allow_redirects=False) as answer:
                await answer.content.read(64 * 1024)
                return answer.status

    def drive(count: int) -> None:
        done: queue.Queue[Future[int]] = queue.Queue()
        sent = taken = 0
        while taken < count:
            while sent - taken < concurrency and sent < count:
                asyncio.run_coroutine_threadsafe(one(sent), loop).add_done_callback(done.put)
                sent += 1
            if done.get().result() != 200:
                raise RuntimeError("the partner did not answer 200")
            taken += 1

    try:
        drive(WARMUP)
        began, cpu = time.perf_counter(), _cpu()
        drive(n)
        return time.perf_counter() - began, _cpu() - cpu
    finally:
        asyncio.run_coroutine_threadsafe(session.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


MODELS: dict[str, Callable[[str, int, int], tuple[float, float]]] = {
    "threads-shared-client": lambda url, n, c: _threads(url, n, c, shared=True),
    "threads-per-thread-client": lambda url, n, c: _threads(url, n, c, shared=False),
    "asyncio-shared-client": _asyncio,
    "aiohttp-one-loop": _aiohttp,
    "aiohttp-handoff": _aiohttp_handoff,
}


def _partner(name: str, latency: float) -> AbstractContextManager[str | None]:
    return nginx_partner() if name == "nginx" else fast_partner(latency)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.egress_models", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=3000, help="requests per measurement (3000)")
    parser.add_argument("--model", action="append", choices=sorted(MODELS), help="repeatable; default all")
    parser.add_argument("--concurrency", type=int, action="append", help="repeatable; default 8, 128, 256")
    parser.add_argument("--partner", choices=("fast", "nginx"), default="fast",
                        help="bench.fast_partner (default) or nginx answering 200 {} (bench.wire)")
    parser.add_argument("--latency", type=float, action="append",
                        help="the fast partner's delay, seconds; repeatable; default 0 and 0.1")
    args = parser.parse_args(argv)
    latencies = [0.0] if args.partner == "nginx" else (args.latency or [0.0, 0.1])
    print(f"{'model':<27} {'latency':>8} {'at once':>8} {'req/s':>8} {'CPU µs/req':>11}")
    for latency in latencies:
        with _partner(args.partner, latency) as base:
            if base is None:
                print("nginx is not installed (apt-get install nginx)")
                return 1
            for model in args.model or list(MODELS):
                for concurrency in args.concurrency or (8, 128, 256):
                    seconds, cpu = MODELS[model](f"{base}/bench", args.n, concurrency)
                    print(f"{model:<27} {latency * 1000:>6.0f}ms {concurrency:>8} {args.n / seconds:>8.0f} "
                          f"{cpu / args.n * 1e6:>11.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
