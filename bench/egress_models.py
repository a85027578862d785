"""Compare egress concurrency models against ``bench.fast_partner`` (ADR 0002, "Egress concurrency").

    python -m bench.egress_models                    # every model, 8/128/256 calls at once, 0 and 100 ms
    python -m bench.egress_models --n 2000 --model threads-per-thread-client

Each model makes N POSTs of a small JSON body, C at once, to a partner answering after a fixed
delay, and prints requests per second and this process's CPU per request (user + system):

- ``threads-shared-client``: C threads sharing one ``httpx.Client`` (pool of C connections);
- ``threads-per-thread-client``: C threads, each with its own ``httpx.Client`` (what the webhook
  adapter does);
- ``asyncio-shared-client``: one event loop, C tasks sharing one ``httpx.AsyncClient``.

Not a scenario of ``python -m bench``: it measures the HTTP client, not opledger.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx

from bench.fast_partner import fast_partner

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


def _asyncio(url: str, n: int, concurrency: int) -> tuple[float, float]:
    async def run() -> tuple[float, float]:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(limits=limits) as client:
            gate = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                async with gate:
                    (await client.post(url, json={"n": i})).raise_for_status()

            await asyncio.gather(*(one(i) for i in range(WARMUP)))
            began, cpu = time.perf_counter(), _cpu()
            await asyncio.gather(*(one(i) for i in range(n)))
            return time.perf_counter() - began, _cpu() - cpu

    return asyncio.run(run())


MODELS: dict[str, Callable[[str, int, int], tuple[float, float]]] = {
    "threads-shared-client": lambda url, n, c: _threads(url, n, c, shared=True),
    "threads-per-thread-client": lambda url, n, c: _threads(url, n, c, shared=False),
    "asyncio-shared-client": _asyncio,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.egress_models", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=3000, help="requests per measurement (3000)")
    parser.add_argument("--model", action="append", choices=sorted(MODELS), help="repeatable; default all")
    parser.add_argument("--concurrency", type=int, action="append", help="repeatable; default 8, 128, 256")
    args = parser.parse_args(argv)
    print(f"{'model':<27} {'latency':>8} {'at once':>8} {'req/s':>8} {'CPU µs/req':>11}")
    for latency in (0.0, 0.1):
        with fast_partner(latency) as base:
            for model in args.model or list(MODELS):
                for concurrency in args.concurrency or (8, 128, 256):
                    seconds, cpu = MODELS[model](f"{base}/bench", args.n, concurrency)
                    print(f"{model:<27} {latency * 1000:>6.0f}ms {concurrency:>8} {args.n / seconds:>8.0f} "
                          f"{cpu / args.n * 1e6:>11.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
