"""structlog configuration: JSON in production, readable console output otherwise (DESIGN §9)."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from ledger.redaction import KNOWN_SECRETS, redact


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


def configure_logging(fmt: str = "console", level: int = logging.INFO, *, cache_loggers: bool = True) -> None:
    """Configure structlog for this process. Every chain ends with :func:`redact_secrets`
    before the renderer.

    Args:
        fmt: ``json`` (one object per line, for production) or ``console``.
        level: the minimum level.
        cache_loggers: cache each logger on first use (fast; tests that configure logging
            temporarily pass False so ``structlog.reset_defaults()`` undoes it).
    """
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=cache_loggers,
    )
