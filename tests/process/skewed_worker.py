"""A worker process whose own clock is off: ``python -m tests.process.skewed_worker SECONDS``.

The same as ``opledger worker`` (settings from ``OPLEDGER_*``), except that the clock handed to
``run_worker`` runs ``SECONDS`` ahead of the system clock (negative: behind), as on a host whose
clock has drifted. Also holds :class:`SlowCallsApp`, whose calls may take longer than a lease.
"""

from __future__ import annotations

import sys

from ledger.declarations import DeliveryMode
from tests.apps import ModesApp, declaration

CALL_TIMEOUT_SECONDS = 30.0


class SlowCallsApp(ModesApp):
    """``ModesApp`` with a request timeout longer than any test lease, in a store of its own."""

    name = "slowcalls"
    integrations = [declaration(mode, request_timeout_seconds=CALL_TIMEOUT_SECONDS) for mode in DeliveryMode]


def main(argv: list[str]) -> None:
    from adapters.logs import configure_logging
    from adapters.runtime import run_worker
    from ledger.clock import OffsetClock, SystemClock
    from ledger.config import Settings

    settings = Settings()
    configure_logging(settings.log_format)
    run_worker(settings, clock=OffsetClock(SystemClock(), float(argv[0])))


if __name__ == "__main__":
    main(sys.argv[1:])
