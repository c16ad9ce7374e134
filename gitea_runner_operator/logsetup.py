"""structlog set-up: JSON lines for log collectors, readable console output on a terminal."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(log_format: str = "auto", level: str = "info") -> None:
    use_console = log_format == "console" or (log_format == "auto" and sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # Libraries (aiohttp, kubernetes_asyncio's leader election) use stdlib logging.
    logging.basicConfig(
        stream=sys.stderr, level=max(numeric, logging.WARNING), format="%(name)s: %(message)s"
    )
