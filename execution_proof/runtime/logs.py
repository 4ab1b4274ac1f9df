"""Logs: one JSON object per line (``LOG_FORMAT=json``) or readable text, always on stderr.

stdout is left to what commands print for people and scripts (the demo key, the JSON of
``keys create``); every log record, including the one line per HTTP request, goes to stderr.
A request line carries ids, the route, status and timing, and the authenticated plan and
project. It never carries a header, a query string, a body, an API key or any other secret
(docs/observability.md); a path segment shaped like one of this service's API keys is masked.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import re
import sys
import time
from typing import Any

import orjson

from execution_proof.receipts.model import format_created_at
from execution_proof.receipts.shapes import JSONObject

request_log = logging.getLogger("eps.request")
LOG_LEVEL = logging.INFO
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
SANIC_LOGGERS = ("sanic.root", "sanic.error", "sanic.access", "sanic.server", "sanic.websockets")
QUIET_LOGGERS = ("httpx", "httpcore")
"""Libraries that log every outgoing call at INFO: kept to warnings."""
_state = {"json": False}


class _Direct:
    """JSON mode's fast lane for request lines (see ``log_request``)."""

    handler: logging.Handler | None = None
    flush_scheduled = False
    pending: list[bytes] = []  # noqa: RUF012 - one list for the process, on purpose
    """Request lines of this event-loop turn, written together by ``flush_request_lines``."""
    target: Any = None
    """The byte stream the pending lines go to (stderr's buffer)."""
    pid = os.getpid()
    """This process's id (a system call each time otherwise), renewed in a forked child."""


def _renew_pid() -> None:
    _Direct.pid = os.getpid()


os.register_at_fork(after_in_child=_renew_pid)


def format_ts(created: float) -> str:
    """ISO 8601 UTC with milliseconds, e.g. ``2026-01-31T12:00:00.123Z``."""
    return format_created_at(int(created * 1000))


def json_entry(
    created: float, level: str, logger: str, msg: str, pid: int | None, fields: JSONObject | None
) -> JSONObject:
    """The object of one JSON line: ``ts``, ``level``, ``logger``, ``msg``, ``pid``, then ``fields``
    (a value that is not JSON is written as its ``str``)."""
    entry: JSONObject = {"ts": format_ts(created), "level": level, "logger": logger, "msg": msg, "pid": pid}
    if fields:
        entry.update(fields)
    return entry


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``msg``, ``pid``, then the record's
    ``fields`` (a dict passed as ``extra={"fields": ...}``), then ``exc`` for a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        entry = json_entry(
            record.created,
            record.levelname.lower(),
            record.name,
            record.getMessage(),
            record.process,
            fields if isinstance(fields, dict) else None,
        )
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    """Readable lines for the demo: the message, then the record's ``fields`` as key=value."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items() if v is not None and k != "event")
        return line


class _OurHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``configure_logging`` installs (recognised so a second call replaces it)."""

    def emit(self, record: logging.LogRecord) -> None:
        flush_request_lines()  # request lines of this turn first: the lines stay in order
        super().emit(record)


def configure_logging(log_format: str) -> None:
    """Send every log record of the process to stderr in ``log_format`` (``json`` or ``text``).

    json: the root logger's one handler; Sanic's loggers lose their own handlers and
    propagate to it, so Sanic's start-up and shutdown lines are JSON too. text: the root
    logger gets a readable handler and Sanic keeps its own console output (no duplicates).
    Safe to call again (the previous handler is replaced).
    """
    json_mode = log_format == "json"
    handler = _OurHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_mode else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LOG_LEVEL)
    for name in SANIC_LOGGERS:
        sanic_logger = logging.getLogger(name)
        if json_mode:
            for own in list(sanic_logger.handlers):
                sanic_logger.removeHandler(own)
        sanic_logger.propagate = json_mode
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # Thread and process names appear in no line: skip looking them up for every record
    # (the logging HOWTO's own optimisation). The pid is kept.
    logging.logThreads = False
    logging.logMultiprocessing = False
    _state["json"] = json_mode
    _Direct.handler = handler if json_mode else None


class _ClientRefusalFilter(logging.Filter):
    """Sanic's static-file handler writes an error record ("File not found: path=...") when it
    refuses a path that leaves the folder (``/static/..%2fweb%2fconfig.py``); anyone could fill
    the error log that way. It is a client's bad request, answered with the JSON 404 and
    recorded by the request line: the record is lowered to debug (kept only when debug is on)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and str(record.msg).startswith("File not found: path="):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.exc_info = record.exc_text = None  # Sanic logs it with an empty traceback
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


_CLIENT_REFUSALS = _ClientRefusalFilter()

_QUERY = re.compile(r"\?[^\s'\"]*")


class _QueryRedactionFilter(logging.Filter):
    """Sanic names a request's full URL in a few records of its own ("Request: GET
    http://host/claim/success?session_id=cs_... stopped. Transport is closed.", the error
    handler's "for uri: ..."), and a query string can hold a credential: the checkout session
    id of the claim page is enough to reveal a paid key. Every query in such a record is
    replaced by ``?[query removed]``; our request line already logs the path alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "?" in message:
            record.msg, record.args = _QUERY.sub("?[query removed]", message), None
        return True


_QUERY_REDACTION = _QueryRedactionFilter()


def install_sanic_log_filters() -> None:
    """Keep a client's bad request out of the error level (``_ClientRefusalFilter``) and query
    strings out of Sanic's own records (``_QueryRedactionFilter``); idempotent."""
    logging.getLogger("sanic.error").addFilter(_CLIENT_REFUSALS)
    for name in SANIC_LOGGERS:
        logging.getLogger(name).addFilter(_QUERY_REDACTION)


def json_logging() -> bool:
    """Whether ``configure_logging("json")`` is in force in this process."""
    return _state["json"]


def write_request_line(fields: JSONObject) -> None:
    """Write one request's log line (``fields`` built by the HTTP server, ``web.access_log``).

    In JSON mode, when our handler alone receives ``eps.request`` records, the line skips the
    logging machinery (``_direct_buffer``) and is written with the rest of its event-loop turn.
    """
    buffer = _direct_buffer()
    if buffer is not None:
        line = json_entry(time.time(), "info", request_log.name, "request", _Direct.pid, fields)
        if _Direct.target is not buffer:
            flush_request_lines()
            _Direct.target = buffer
        _Direct.pending.append(orjson.dumps(line, default=str) + b"\n")
        _flush_soon()
        return
    # makeRecord + handle is logger.info without its stack walk for the caller's line (which
    # is always this one): half the cost of the line, paid on every request.
    request_log.handle(
        request_log.makeRecord(request_log.name, LOG_LEVEL, __file__, 0, "request", (), None, extra={"fields": fields})
    )


def _direct_buffer() -> Any:
    """stderr's byte buffer when a request line may skip the logging machinery: JSON mode,
    and our handler alone receives ``eps.request`` records (no filter, no other handler, as
    a test's log capture would add). The line is byte for byte what ``JsonFormatter`` writes
    (about 4 us instead of 15 us)."""
    handler = _Direct.handler
    if handler is None:
        return None
    root = logging.root
    handlers = root.handlers
    if len(handlers) != 1 or handlers[0] is not handler or request_log.handlers or request_log.filters:
        return None
    if root.filters or handler.filters or handler.level > LOG_LEVEL:
        return None
    return getattr(getattr(handler, "stream", None), "buffer", None)


def _flush_soon() -> None:
    """Write once per event-loop turn (every line of the turn in one write), or now outside a loop."""
    if _Direct.flush_scheduled:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        flush_request_lines()
        return
    _Direct.flush_scheduled = True
    loop.call_soon(flush_request_lines)


def flush_request_lines() -> None:
    """Write the pending request lines in one write and flush the stream.

    The lines are kept here, not in the stream's own buffer: under ``PYTHONUNBUFFERED=1`` (the
    Dockerfile's setting) stderr has no buffer, and each line would cost a system call of its
    own (bench/PROFILE.md). Called at the end of each event-loop turn that logged a request,
    before any other record is written, and at exit."""
    _Direct.flush_scheduled = False
    pending = _Direct.pending
    if not pending:
        return
    data = b"".join(pending)
    pending.clear()
    target = _Direct.target
    try:
        target.write(data)
        target.flush()
    except (OSError, ValueError):  # stderr closed or gone (shutdown): the lines cannot be written
        pass


atexit.register(flush_request_lines)
