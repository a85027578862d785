"""structlog configuration: JSON off a terminal (production), readable console output on one
(DESIGN §9), every line about an operation carrying its context, and no secret value.

A worker remembers the operations it commits (``OPERATION_CONTEXT.remember``, fed by the
worker's commit hook), so any line a service writes with ``operation_id=`` also gets that
operation's ``integration``, ``tenant``, ``epoch``, ``attempt_id`` and ``trace_id`` (from the
intent's W3C ``traceparent``), without each service binding them. Keys that could hold a secret
(``payload``, ``authorization``, ``token``, ``secret``, ...) are replaced by ``[redacted]``.

Source: issue 13 item 4.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO

import structlog

from adapters.operator import trace_id
from ledger.operation import Operation

REDACTED_KEYS = frozenset({"payload", "authorization", "token", "secret", "password", "webhook_secret",
                           "api_tokens", "headers"})
"""Log keys whose values are never written (classified payloads, credentials)."""
CONTEXT_SIZE = 50_000  # operations remembered per process, most recently committed first


class OperationContext:
    """The log context of operations this process committed, by operation id (thread-safe,
    bounded). Also a structlog processor adding it to lines that name an ``operation_id``."""

    def __init__(self, size: int = CONTEXT_SIZE) -> None:
        self.size = size
        self._known: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, ops: Iterable[Operation]) -> None:
        """Record the context of each operation (its latest committed state)."""
        for op in ops:
            context = {"integration": op.integration_name, "tenant": op.tenant, "epoch": op.epoch,
                       "attempt_id": str(op.last_attempt_id) if op.last_attempt_id else None,
                       "trace_id": trace_id(op.traceparent)}
            with self._lock:
                self._known[str(op.id)] = context
                self._known.move_to_end(str(op.id))
                while len(self._known) > self.size:
                    self._known.popitem(last=False)

    def __call__(self, logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        op_id = event.get("operation_id")
        if op_id is not None:
            with self._lock:
                context = self._known.get(str(op_id))
            for key, value in (context or {}).items():
                if value is not None:
                    event.setdefault(key, value)
        return event


OPERATION_CONTEXT = OperationContext()
"""This process's operation context (``configure_logging`` installs it)."""


def redact_secrets(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: values under ``REDACTED_KEYS`` become ``[redacted]``."""
    for key in REDACTED_KEYS & event.keys():
        event[key] = "[redacted]"
    return event


def configure_logging(fmt: str = "auto", level: int = logging.INFO, *, file: TextIO | None = None) -> None:
    """Configure structlog for this process.

    Args:
        fmt: ``json`` (one object per line), ``console``, or ``auto``: JSON unless the output
            is a terminal.
        level: the minimum level.
        file: where lines go (standard error by default).
    """
    out = file or sys.stderr
    if fmt == "auto":
        fmt = "console" if out.isatty() else "json"
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            OPERATION_CONTEXT,
            redact_secrets,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
