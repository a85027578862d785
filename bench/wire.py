"""The wire rows: a partner that costs next to nothing (nginx), and a bare client loop against it.

    python -m bench.wire nginx                         # prints the URL, serves until SIGTERM/Ctrl-C
    python -m bench.wire client --url URL --n 5000 --concurrency 128

**nginx** (:func:`nginx_partner`): Debian's ``nginx`` answering every request ``200 {}`` from a
configuration this module writes into a temporary directory, on loopback, keep-alive on, one
worker process. It costs 13-54 µs of CPU per request on the reference machine (issue 30), against
218-305 µs for ``bench.fast_partner`` (uvicorn), so a row against it measures the client side. When
``nginx`` is not installed, :func:`nginx_partner` yields None and the rows that need it are skipped
with a note saying so, never run against another partner.

**The bare client** (:func:`bare_client`): what the HTTP library itself costs on this machine at
``BARE_CONCURRENCY`` (128) calls at once, doing nothing else, on one event loop
sharing one ``aiohttp`` session (the library and session ``adapters.webhook.transport`` uses,
docs/adr/0009-egress-event-loop.md), each POSTing the request a webhook attempt sends (the canonical JSON body ``{"n": i}``, Standard Webhooks signature headers,
``Idempotency-Key``, ``X-Attempt-Id``, ``User-Agent``, ``Accept-Encoding: identity``) and reading
the answer. It runs in its own process (one per worker process of the row it is compared with),
so its CPU time is its own. The ceiling of the ``drain.wire`` row for this machine and library.

Source: issue 30 item 1 (measure the egress path against a bare client in the same run, with the
same HTTP library).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.harness import Result, Stats

READY_TIMEOUT_SECONDS = 15.0
BARE_CONCURRENCY = 128
"""Calls at once per process of the bare client: the worker's per-host slots until ADR 0009's
step 2, and where aiohttp costs least per call. At the new default of 1,024 per host the same
loop costs about twice the CPU per call and runs slower (291-307 against 161-170 µs per call,
docs/performance-history.md, 2026-12-06), so the ceiling stays at 128: a slower bare row would
make ``drain.wire``'s ratio to it look better than the egress path is."""
WIRE_DRAIN_TARGET, WIRE_BARE_TARGET, WIRE_CPU_LIMIT = 0.5, 0.8, 1.5
"""Issue 30's acceptance: ``drain.wire`` at least 0.5x ``drain`` (instant provider) and 0.8x
``client.bare`` in the same run, with client CPU per call at most 1.5x ``client.bare``'s."""
NGINX_CONF = """\
worker_processes 1;
pid {dir}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 120s;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{ default_type application/json; return 200 '{{}}'; }}
  }}
}}
"""


def nginx_binary() -> str | None:
    """The path of ``nginx`` (PATH, then /usr/sbin, where Debian puts it), or None."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.post(url, content=b"{}", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def nginx_partner() -> Iterator[str | None]:
    """Run nginx answering ``200 {}`` on loopback; yields its base URL, or None without nginx.

    Raises:
        RuntimeError: nginx is installed but did not answer within ``READY_TIMEOUT_SECONDS``
            (its error log is in the message).
    """
    binary = nginx_binary()
    if binary is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="opledger-nginx-") as workdir:
        port = _free_port()
        conf = Path(workdir) / "nginx.conf"
        conf.write_text(NGINX_CONF.format(dir=workdir, port=port))
        error_log = Path(workdir) / "error.log"
        process = subprocess.Popen([binary, "-p", workdir, "-c", str(conf), "-e", str(error_log),
                                    "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + READY_TIMEOUT_SECONDS
            while not _answers(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    log = error_log.read_text() if error_log.exists() else ""
                    raise RuntimeError(f"nginx did not start (exit code {process.poll()}): {log.strip()[-400:]}")
                time.sleep(0.05)
            yield url
        finally:
            process.send_signal(signal.SIGQUIT)  # graceful: finish requests, then exit
            try:
                process.wait(READY_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@dataclass(frozen=True)
class BareRun:
    """One bare client run: ``requests`` answered 200 in ``seconds`` (wall), using ``cpu_seconds``
    of its processes' CPU (user + system); ``errors`` did not get a 200."""

    requests: int
    seconds: float
    cpu_seconds: float
    errors: int

    @property
    def cpu_us_per_call(self) -> float:
        return self.cpu_seconds / max(self.requests, 1) * 1e6


def _client_loop(url: str, n: int, concurrency: int, secret: str) -> dict[str, float]:
    """The loop of one bare client process (see the module docstring); returns its figures."""
    import asyncio

    import aiohttp
    from standardwebhooks.webhooks import Webhook

    from ledger.declarations import canonical_json

    webhook = Webhook(secret)
    counter = iter(range(n))
    errors = [0]

    async def work(session: aiohttp.ClientSession) -> None:
        for i in counter:
            body = canonical_json({"n": i}).decode()
            now, msg_id = datetime.now(UTC), str(uuid.uuid4())
            headers = {"webhook-id": msg_id, "webhook-timestamp": str(int(now.timestamp())),
                       "webhook-signature": webhook.sign(msg_id, now, body), "Idempotency-Key": msg_id,
                       "X-Attempt-Id": str(uuid.uuid4()), "User-Agent": "opledger-bench",
                       "Accept-Encoding": "identity", "Content-Type": "application/json"}
            try:
                async with asyncio.timeout(30.0):
                    async with session.post(url, data=body.encode(), headers=headers, allow_redirects=False) as answer:
                        await answer.content.read(64 * 1024)
                        if answer.status != 200:
                            errors[0] += 1
            except (aiohttp.ClientError, TimeoutError):
                errors[0] += 1

    async def run() -> dict[str, float]:
        # As the adapter's transport makes it (adapters.webhook.transport): one session, no
        # decompression, no cookies. Imports and the session are outside the figures: the row
        # is the loop's cost, not an interpreter's start.
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                         cookie_jar=aiohttp.DummyCookieJar()) as session:
            print("ready", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            cpu_began, began = time.process_time(), time.perf_counter()
            await asyncio.gather(*(work(session) for _ in range(concurrency)))
            return {"requests": n - errors[0], "seconds": time.perf_counter() - began,
                    "cpu_seconds": time.process_time() - cpu_began, "errors": errors[0]}

    return asyncio.run(run())


def bare_client(url: str, n: int, *, concurrency: int, processes: int, secret: str) -> BareRun:
    """Run the bare client loop in ``processes`` child processes, ``n`` requests in all.

    Args:
        url: the partner's URL (nginx's, from :func:`nginx_partner`).
        n: requests in all, split evenly over the processes.
        concurrency: calls at once per process (tasks on its one event loop).
        processes: child processes, as many as the worker processes of the compared row.
        secret: the Standard Webhooks secret the requests are signed with.

    Returns:
        The run: wall time from the moment every process is ready (imported, session made)
        until the last one ends (seconds), CPU seconds of the loops summed over the processes.

    Raises:
        RuntimeError: a child process failed (its stderr is in the message).
    """
    share = [n // processes + (1 if i < n % processes else 0) for i in range(processes)]
    children = [subprocess.Popen([sys.executable, "-m", "bench.wire", "client", "--url", url, "--n", str(count),
                                  "--concurrency", str(concurrency), "--secret", secret], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for count in share]
    for child in children:  # every process imported and made its session: then all go at once
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            child.kill()
            raise RuntimeError(f"a bare client process did not start: {child.communicate()[1].strip()[-400:]}")
    began = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    figures = []
    for child in children:
        out, err = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"a bare client process failed (exit code {child.returncode}): {err.strip()[-400:]}")
        figures.append(json.loads(out))
    seconds = time.perf_counter() - began
    return BareRun(requests=sum(int(f["requests"]) for f in figures), seconds=seconds,
                   cpu_seconds=sum(f["cpu_seconds"] for f in figures), errors=sum(int(f["errors"]) for f in figures))


def _median(values: list[float]) -> float:
    return sorted(values)[(len(values) - 1) // 2]


def bare_result(backend: str, workers: int, processes: int, runs: list[BareRun], n: int) -> Result:
    """The ``client.bare`` row beside a ``drain.wire`` row: requests/s over ``runs`` (median,
    min, max), and the median CPU µs per call in ``extra``."""
    return Result(name="client.bare", backend=backend, workers=workers,
                  stats=Stats.of([run.requests / run.seconds for run in runs]), unit="requests/s", n=n,
                  note=f"aiohttp, {BARE_CONCURRENCY} calls at once per process on one event loop, nginx 200 {{}}: "
                       "the ceiling of drain.wire",
                  extra={"processes": processes, "cpu_us_per_call": round(_median([r.cpu_us_per_call for r in runs])),
                         "errors": sum(run.errors for run in runs)})


def judge_wire(result: Result, instant: list[float], runs: list[BareRun]) -> None:
    """Set a ``drain.wire`` row's ratios and verdict (issue 30): ``ratio`` against the samples of
    ``drain`` of the same shape (``instant``, ops/s), and in ``extra`` against ``client.bare``
    (``runs``) in rate and in client CPU per call (the workers' CPU µs per operation)."""
    result.ratio = result.stats.median / Stats.of(instant).median if instant else None
    result.baseline = "drain" if instant else None
    bare_rate = _median([run.requests / run.seconds for run in runs]) if runs else None
    bare_cpu = _median([run.cpu_us_per_call for run in runs]) if runs else None
    workers_cpu = result.extra.get("cpu_us_per_op", {}).get("workers")
    result.extra["vs_client_bare"] = round(result.stats.median / bare_rate, 3) if bare_rate else None
    result.extra["cpu_vs_client_bare"] = round(workers_cpu / bare_cpu, 3) if workers_cpu and bare_cpu else None
    result.target = (f"≥ {WIRE_DRAIN_TARGET}x drain and ≥ {WIRE_BARE_TARGET}x client.bare; "
                     f"client CPU per call ≤ {WIRE_CPU_LIMIT}x client.bare's")
    result.met = ((result.ratio or 0) >= WIRE_DRAIN_TARGET and (result.extra["vs_client_bare"] or 0) >= WIRE_BARE_TARGET
                  and (result.extra["cpu_vs_client_bare"] or float("inf")) <= WIRE_CPU_LIMIT)
    result.note = "webhook adapter against nginx answering 200 {} on loopback (bench.wire)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wire", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("nginx", help="run nginx answering 200 {} until interrupted")
    client = commands.add_parser("client", help="one bare client process; prints its figures as JSON")
    client.add_argument("--url", required=True)
    client.add_argument("--n", type=int, default=5000)
    client.add_argument("--concurrency", type=int, default=128)
    client.add_argument("--secret", default="whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    args = parser.parse_args(argv)
    if args.command == "client":
        print(json.dumps(_client_loop(args.url, args.n, args.concurrency, args.secret)), flush=True)
        return 0
    with nginx_partner() as url:
        if url is None:
            print("nginx is not installed (apt-get install nginx)", file=sys.stderr)
            return 1
        print(url, flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
