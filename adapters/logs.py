"""structlog configuration: JSON in production, readable console output otherwise (DESIGN §9)."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(fmt: str = "console", level: int = logging.INFO) -> None:
    """Configure structlog for this process.

    Args:
        fmt: ``json`` (one object per line, for production) or ``console``.
        level: the minimum level.
    """
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
