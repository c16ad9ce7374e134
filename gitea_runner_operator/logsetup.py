"""structlog set-up: JSON lines for log collectors, readable console output on a terminal."""

from __future__ import annotations

import logging
import sys
import threading

import structlog

# Threads of the process log too (the webhook receiver's, the Leases'): each line is written
# whole, by one call under this lock. ``print`` wrote the line and its newline apart, and
# two threads' lines ran into one (132 of 9,005 JSON lines unreadable in a hostile run).
_WRITING = threading.Lock()


class _StderrLogger:
    """Writes each rendered line to whatever ``sys.stderr`` is at that moment (not the one at
    set-up), so loggers cached on first use keep working when stderr is swapped, as test
    runners and embedding programs do."""

    def msg(self, message: str) -> None:
        stream = sys.stderr
        with _WRITING:
            stream.write(message + "\n")
            stream.flush()

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


def _stderr_logger(*_: object) -> _StderrLogger:
    return _StderrLogger()


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
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=True,
    )
    # Libraries (aiohttp, kubernetes_asyncio's leader election) use stdlib logging.
    logging.basicConfig(
        stream=sys.stderr, level=max(numeric, logging.WARNING), format="%(name)s: %(message)s"
    )
