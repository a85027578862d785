"""A fast partner for latency rows: answers every request ``200 {}`` after a fixed delay.

    python -m bench.fast_partner --latency 0.1      # prints its URL, serves until SIGTERM

Unlike the reference partner (``adapters.partner``) it keeps no durable log, verifies no
signature and dedupes nothing: a bench row against it measures opledger and the fixed delay,
not the partner's own commits. Served by uvicorn (asyncio), so hundreds of requests can wait
out their delay at once without a thread each.

Source: issue 10 item 7 (egress that hides provider latency); docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Any

import uvicorn

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
READY_TIMEOUT_SECONDS = 15.0
BODY = b"{}"
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


def make_app(latency_seconds: float) -> Callable[[Scope, Callable[[], Awaitable[Message]],
                                                   Callable[[Message], Awaitable[None]]], Awaitable[None]]:
    """A bare ASGI app: read the request body, wait ``latency_seconds``, answer ``200 {}``."""

    async def app(scope: Scope, receive: Callable[[], Awaitable[Message]],
                  send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        if latency_seconds > 0:
            await asyncio.sleep(latency_seconds)
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        await send({"type": "http.response.body", "body": BODY})

    return app


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fast_partner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each answer waits (0)")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Inherited by accepted sockets (Linux): uvicorn writes the head and the body of a response
    # separately, and with Nagle's algorithm the body then waits for the client's delayed ACK
    # (40 ms), which would swamp the latency this partner is meant to add.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((args.host, 0))
    sock.listen(4096)  # before the URL is printed: a client may connect at once
    config = uvicorn.Config(make_app(args.latency), log_level="warning", access_log=False, lifespan="off",
                            backlog=4096, timeout_keep_alive=60)
    print(f"http://{args.host}:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


@contextmanager
def fast_partner(latency_seconds: float) -> Iterator[str]:
    """Run ``python -m bench.fast_partner`` as a child process; yields its base URL."""
    process = subprocess.Popen([sys.executable, "-m", "bench.fast_partner", "--latency", str(latency_seconds)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the fast partner did not start (exit code {process.poll()})")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(READY_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    sys.exit(main())
