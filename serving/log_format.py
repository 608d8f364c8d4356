"""How both servers write their log lines: one JSON object per line, or text for a person at a terminal.

Shared by the proxy (``proxy/observability/logs.py``) and the embedded engine's own command (``engine/cli.py``), so
that the engine's lines come out in the proxy's format when it runs inside the proxy process (its loggers propagate
to the one root handler installed here) and in the same format when it runs alone.

- ``json``: python-json-logger's formatter, never a hand-built string. Every line has ``level``, ``logger``,
  ``message`` and ``timestamp`` (RFC 3339, UTC), plus every field the call gave with ``extra=`` and the ones a
  handler filter added (the proxy's ``request_id`` and ``session_id``). The orjson flavour of the formatter: the
  project already depends on orjson, and it formats an access line in about half the time of the json-module
  flavour (timeit of both on the same record: 1.5-2x), which counts since every request writes one.
- ``text``: ``time LEVEL logger: message``, with the record's ``request_id`` / ``session_id`` appended when it has
  them (the other ``extra=`` fields are in the message already: messages stay readable on their own).
- ``auto``: text when the stream is a terminal, JSON otherwise (a file, a pipe, a container's log collector).

Levels: the named loggers (the program's own namespaces) get the chosen level; the root logger, which every
library's logger reaches, never goes below ``warning``, so a library's per-request info lines (httpx logs each
request it sends) never reach the output.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import TextIO

from pythonjsonlogger.orjson import OrjsonFormatter

LOG_FORMATS = ("auto", "text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
#: record attributes a text line shows after the message when a record has them
TEXT_CONTEXT_FIELDS = ("request_id", "session_id")


def resolve_format(log_format: str, stream: TextIO) -> str:
    """``text`` or ``json``: ``auto`` is text on a terminal, JSON otherwise."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"unknown log format {log_format!r} (one of {', '.join(LOG_FORMATS)})")
    if log_format != "auto":
        return log_format
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


class TextFormatter(logging.Formatter):
    """``2026-01-02 03:04:05,678 INFO dressage_proxy.requests: message [request_id=... session_id=...]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = [f"{name}={value}" for name in TEXT_CONTEXT_FIELDS if (value := record.__dict__.get(name))]
        if not context:
            return line
        # After the traceback, if any, would split it from its line: the context goes on the first line.
        first, newline, rest = line.partition("\n")
        return f"{first} [{' '.join(context)}]{newline}{rest}"


def json_formatter() -> logging.Formatter:
    """The JSON lines' formatter: the record's level, logger name and message under short names, a UTC
    timestamp, and every extra attribute of the record as a field of its own."""
    return OrjsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp=True,
    )


def formatter_for(log_format: str) -> logging.Formatter:
    """The formatter of a resolved format (``text`` or ``json``)."""
    return json_formatter() if log_format == "json" else TextFormatter()


#: the :mod:`logging` switches that make every record look up its caller's file and line, thread, process and
#: multiprocessing names: neither format shows them, and they are a sixth of an access line's cost (47 -> 40 us a
#: line, timeit on this machine), paid on every request at info
RECORD_LOOKUPS = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing")


def skip_unused_record_lookups() -> dict[str, object]:
    """Turn off the per-record lookups no format of ours prints; returns the previous values (for tests that
    restore them)."""
    previous = {name: getattr(logging, name) for name in RECORD_LOOKUPS}
    logging._srcfile = None  # the documented way to skip findCaller (logging/__init__.py)
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    return previous


class _ProcessHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure_logging` installs (a class of its own, so a second call finds the first's)."""


def configure_logging(
    log_format: str, level: str, namespaces: Iterable[str], *,
    filters: Iterable[logging.Filter] = (), stream: TextIO | None = None,
) -> logging.Handler:
    """Write every log line of the process to ``stream`` (default: stderr) in ``log_format``: one handler on the
    root logger, replacing the one an earlier call installed (a host's own handlers, pytest's, stay). ``namespaces`` (e.g. ``("engine",)``) log at ``level``; everything else at
    ``warning`` or above. ``filters`` run on every record the handler writes, propagated ones included (a logger's
    own filters would only see the records logged on that logger). Returns the handler."""
    if level not in LOG_LEVELS:
        raise ValueError(f"unknown log level {level!r} (one of {', '.join(LOG_LEVELS)})")
    stream = stream if stream is not None else sys.stderr
    skip_unused_record_lookups()
    handler = _ProcessHandler(stream)
    handler.setFormatter(formatter_for(resolve_format(log_format, stream)))
    for log_filter in filters:
        handler.addFilter(log_filter)
    numeric = logging.getLevelName(level.upper())
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _ProcessHandler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(numeric, logging.WARNING))
    for namespace in namespaces:
        logging.getLogger(namespace).setLevel(numeric)
    return handler


__all__ = [
    "LOG_FORMATS", "LOG_LEVELS", "RECORD_LOOKUPS", "TextFormatter", "configure_logging", "formatter_for",
    "json_formatter", "resolve_format", "skip_unused_record_lookups",
]
