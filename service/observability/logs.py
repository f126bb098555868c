"""Server logs: text or JSON lines on stderr, each carrying the request id of the call it
belongs to.

What is never logged: memory text, queries, metadata values, tokens or their hashes. Log calls
pass identifiers and sizes only; the RPC access line names the method, status code, duration and
request id. ``MNEMOSYNE_LOG_FORMAT=json`` gives one JSON object per line (for log shippers).
"""

from __future__ import annotations

import atexit
import contextvars
import itertools
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
from typing import TextIO

_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("mnemosyne_request_id", default="")
_CLIENT_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_FRESH_PREFIX = uuid.uuid4().hex[:16]
_fresh_count = itertools.count(1)
# LogRecord attributes that are not "extra" fields given by the caller.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "request_id"}


def request_id_from(value: str | None) -> str:
    """The client's ``x-request-id`` when it is a sane token, else a fresh one (a hostile value
    never reaches the logs)."""
    if value and _CLIENT_REQUEST_ID.fullmatch(value):
        return value
    # 32 hex digits: this process's random half and a count. A uuid4 per call read the kernel's
    # random source every time (~4 us, a tenth of the edge's own cost of a Ping).
    return f"{_FRESH_PREFIX}{next(_fresh_count):016x}"


def set_request_id(value: str) -> contextvars.Token[str]:
    return _request_id.set(value)


def reset_request_id(token: contextvars.Token[str]) -> None:
    try:
        _request_id.reset(token)
    except ValueError:  # a stream closed from another thread's context: nothing to restore there
        pass


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if getattr(record, "request_id", ""):
            entry["request_id"] = getattr(record, "request_id", "")
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id = getattr(record, "request_id", "")
        return f"{line} request_id={request_id}" if request_id else line


# gRPC core (C++) writes its own lines to file descriptor 2, e.g.
# "I1201 08:00:00.000000 1234 ssl_transport_security.cc:1234] Handshake failed ...".
_NATIVE_LEVELS = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}
_NATIVE_LINE = re.compile(r"([IWEF])\d{4} [\d:.]+\s+\d+ (\S+?)\] ?(.*)")


def route_native_stderr() -> TextIO:
    """Make every line on stderr a log record: file descriptor 2 becomes a pipe read by a thread
    that logs each line written to it — by gRPC core, SQLite, or Python itself (a traceback) —
    through the ``native`` logger; returns a stream on the original stderr for our handler."""
    original = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    native = logging.getLogger("mnemosyne.native")

    def pump() -> None:
        with os.fdopen(read_end, "r", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                line = line.rstrip("\n")
                if not line.strip():
                    continue
                match = _NATIVE_LINE.match(line)
                if match:
                    native.log(_NATIVE_LEVELS[match[1]], match[3], extra={"source": match[2]})
                else:
                    native.warning(line)

    pumping = threading.Thread(target=pump, name="native-stderr", daemon=True)
    pumping.start()

    def drain() -> None:  # at exit: the last lines (a final error message) are logged too
        sys.stderr.flush()
        os.dup2(original, 2)  # closes the pipe's last write end: the pump reads to its end
        pumping.join(timeout=2)

    atexit.register(drain)
    return os.fdopen(os.dup(original), "w", buffering=1, encoding="utf-8", errors="replace")


def configure(log_format: str = "text", level: str = "INFO") -> None:
    """Send the ``mnemosyne`` loggers' records (and grpc's) to stderr in the chosen format. With
    ``json`` every line on stderr is one JSON object, native code's lines included."""
    if log_format not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', not {log_format!r}")
    handler = logging.StreamHandler(route_native_stderr() if log_format == "json" else sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(_RequestIdFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
