"""Server logs: text or JSON lines on stderr, each carrying the request id of the call it
belongs to.

What is never logged: memory text, queries, metadata values, tokens or their hashes. Log calls
pass identifiers and sizes only; the RPC access line names the method, status code, duration and
request id. ``MNEMOSYNE_LOG_FORMAT=json`` gives one JSON object per line (for log shippers).
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
import uuid

_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("mnemosyne_request_id", default="")
_CLIENT_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# LogRecord attributes that are not "extra" fields given by the caller.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "request_id"}


def request_id_from(value: str | None) -> str:
    """The client's ``x-request-id`` when it is a sane token, else a fresh one (a hostile value
    never reaches the logs)."""
    if value and _CLIENT_REQUEST_ID.fullmatch(value):
        return value
    return uuid.uuid4().hex


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
            entry["request_id"] = record.request_id  # type: ignore[attr-defined]
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


def configure(log_format: str = "text", level: str = "INFO") -> None:
    """Send the ``mnemosyne`` loggers' records (and grpc's) to stderr in the chosen format."""
    if log_format not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', not {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(_RequestIdFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
