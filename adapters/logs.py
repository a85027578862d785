"""structlog configuration: JSON off a terminal (production), readable console output on one
(DESIGN §9), every line about an operation carrying its context, and no secret value.

A worker remembers the operations it commits (``OPERATION_CONTEXT.remember``, fed by the
worker's commit hook), so any line a service writes with ``operation_id=`` also gets that
operation's ``integration``, ``tenant``, ``epoch``, ``attempt_id``, ``trace_id`` and ``span_id``
(from the intent's W3C ``traceparent``), without each service binding them; a line written
inside one of opledger's spans (an attempt, a poll, a callback, a settlement) carries that span's
``trace_id`` and ``span_id`` instead. Keys that could hold a secret
(``payload``, ``authorization``, ``token``, ``secret``, ...) are replaced by ``[redacted]``, and
every secret value this process resolved is redacted from every text, in all its encoded forms
(``ledger.redaction``).

Source: issue 13 item 4; issue 14 item 3.
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
from ledger import tracing
from ledger.operation import Operation
from ledger.redaction import KNOWN_SECRETS, redact

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
                       "trace_id": trace_id(op.traceparent), "span_id": span_id(op.traceparent)}
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


def span_id(traceparent: str | None) -> str | None:
    """The parent id of a W3C ``traceparent`` (the intent's producer span), or None."""
    context = tracing.span_context_of(traceparent)
    return f"{context.span_id:016x}" if context is not None else None


def current_span_ids(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: ``trace_id`` and ``span_id`` of the current span (an attempt's, a
    poll's, a callback's, a settlement's: ``ledger.tracing``) when there is one; before
    :data:`OPERATION_CONTEXT`, which adds the intent's own for lines written outside a span."""
    for key, value in tracing.log_ids().items():
        event.setdefault(key, value)
    return event


def redact_keys(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: values under ``REDACTED_KEYS`` become ``[redacted]``."""
    for key in REDACTED_KEYS & event.keys():
        event[key] = "[redacted]"
    return event


def redact_secrets(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: redact every secret value this process resolved
    (``ledger.redaction.KNOWN_SECRETS``) from every text in the event, in all its forms.

    Runs after ``format_exc_info``, so exception text and tracebacks are cleaned too.

    Source: DESIGN §9 ("secret values never appear" in logs); issue 14 item 3.
    """
    values = KNOWN_SECRETS.snapshot()
    if not values:
        return event_dict
    for key, value in list(event_dict.items()):
        event_dict[key] = _clean(value, values)
    return event_dict


def _clean(value: Any, values: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact(value, values)
    if isinstance(value, dict):
        return {k: _clean(v, values) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clean(v, values) for v in value)
    if isinstance(value, (int, float, bool, type(None))):
        return value
    return redact(str(value), values)


class CurrentStderr:
    """Whatever ``sys.stderr`` is when a line is written, not when logging was configured: a
    stream swapped for a while (a test runner's capture, a CLI runner) and closed afterwards
    must not take every later log line, and the request or operation logging it, down with
    ``ValueError: I/O operation on closed file``."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")
"""The standard-library loggers of the HTTP server that :func:`configure_logging` renders as its
own lines (at WARNING and above: uvicorn's access log stays off)."""


def configure_logging(fmt: str = "auto", level: int = logging.INFO, *, file: TextIO | None = None,
                      cache_loggers: bool = True) -> None:
    """Configure structlog for this process. Every chain ends with :func:`redact_secrets`
    before the renderer.

    Args:
        fmt: ``json`` (one object per line), ``console``, or ``auto``: JSON unless the output
            is a terminal.
        level: the minimum level.
        file: where lines go (standard error by default).
        cache_loggers: cache each logger on first use (fast; tests that configure logging
            temporarily pass False so ``structlog.reset_defaults()`` undoes it).
    """
    out: Any = file or CurrentStderr()
    if fmt == "auto":
        fmt = "console" if out.isatty() else "json"
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            current_span_ids,
            OPERATION_CONTEXT,
            redact_keys,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=cache_loggers,
    )
    # The HTTP server's own lines (uvicorn: a connection over the cap, a malformed request) in
    # the same format, redacted alike, instead of uvicorn's plain text beside the JSON lines.
    handler = logging.StreamHandler(out)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
                           redact_secrets],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer]))
    for name in SERVER_LOGGERS:
        server_log = logging.getLogger(name)
        server_log.handlers = [handler]
        server_log.propagate = False
        server_log.setLevel(max(level, logging.WARNING))
