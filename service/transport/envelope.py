"""The one wrapper of every call, whatever its surface (gRPC unary and streams, HTTP/JSON and its
event streams, the mem0 paths, the MCP endpoint's calls in process, a relayed mem0 request):

    async with CallEnvelope(recorder, method, sent_request_id, refuse) as envelope:
        ...  # the edge's begin and answer (transport/edge.py), and the surface sending the answer

1. begin: the call's request id is set for every log record, and its trace span begins (a child of
   the caller's trace context in ``carrier``: transport/telemetry.py);
2. the body runs;
3. an error is mapped to the ``google.rpc.Status`` it answers with (transport/errors.py: the one
   table; anything not ours is INTERNAL, logged here with its traceback, and leaks nothing) and
   handed to the surface's ``refuse``, which answers with it in its own form (a gRPC abort, a JSON
   error, a raised ``ServiceError``...); a client that went away (a cancelled task, a closed
   stream, ``ClientLeft``) is CANCELLED and nobody is answered;
4. telemetry: the span's end, the latency histogram by method and code, and the access record;
5. end: the request id is reset.

How the call ended is its ``outcome`` (code and reason), which a surface may read (a relayed
request's entry member reports it as the owner's).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import grpc
from google.rpc import status_pb2

from mnemosyne.errors import MnemosyneError
from mnemosyne.runtime import tracing
from mnemosyne.transport.errors import Relayed, status_code_for, to_status_proto
from mnemosyne.transport.telemetry import Recorder

log = logging.getLogger("mnemosyne.rpc")
_INTERNAL = MnemosyneError("internal error; the server log has the details", reason="INTERNAL")


class ClientLeft(Exception):
    """The client went away while its call ran: nobody is left to answer."""


class Outcome:
    """How a call ended, for the histogram and the access record."""

    __slots__ = ("code", "reason")

    def __init__(self) -> None:
        self.code = "OK"
        self.reason = ""


# A surface's answer with an error: (the envelope, the error, its status). May raise (gRPC's abort).
Refuse = Callable[["CallEnvelope", BaseException, status_pb2.Status], Awaitable[Any]]


class CallEnvelope:
    """One call's envelope. ``method`` may be set once the surface knows it (an HTTP route);
    ``answered`` once the surface began its answer (an error can then no longer be answered in
    full: ``refuse`` decides); ``refusal`` is what ``refuse`` returned."""

    __slots__ = (
        "_gone",
        "_recorder",
        "_refuse",
        "_carrier",
        "_sent",
        "_span",
        "_started",
        "_token",
        "answered",
        "echo",
        "method",
        "outcome",
        "refusal",
    )

    def __init__(
        self,
        recorder: Recorder,
        method: str,
        sent_request_id: str | None,
        refuse: Refuse,
        carrier: tracing.Headers = (),
    ) -> None:
        self._recorder = recorder
        self._carrier = carrier  # the metadata or headers a caller's trace context may be in
        self._span: tracing.CallSpan | None = None
        self._refuse = refuse
        self._sent = sent_request_id
        self.method = method
        self.outcome = Outcome()
        self.answered = False
        self.refusal: Any = None
        self._gone = False
        self._started = 0.0
        self.echo: tuple[tuple[str, str], ...] = ()
        self._token: contextvars.Token[str] | None = None

    async def __aenter__(self) -> CallEnvelope:
        self._started = time.perf_counter()
        self.echo, self._token, self._span = self._recorder.begin(self._sent, self.method, self._carrier)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        try:
            if error is None:
                return False
            if self._gone or isinstance(error, (asyncio.CancelledError, GeneratorExit, ClientLeft)):
                self.outcome.code = "CANCELLED"  # the client went away
                return isinstance(error, ClientLeft)
            if not isinstance(error, Exception):  # SystemExit, KeyboardInterrupt
                return False
            self.refusal = await self._refuse(self, error, self.status_of(error))
            return True
        finally:
            assert self._token is not None and self._span is not None
            self._recorder.end(
                self.method, self.outcome.code, self.outcome.reason, self._started, self._token, self._span
            )

    def client_gone(self) -> None:
        """The client went away (a closed connection): the call is CANCELLED, and an error that
        follows is nobody's to answer."""
        self.outcome.code = "CANCELLED"
        self._gone = True

    def status_of(self, error: BaseException) -> status_pb2.Status:
        """The status ``error`` answers with (noted in ``outcome``): a domain error's from the one
        table, a forwarded call's as its owner gave it, anything else INTERNAL with no detail."""
        outcome = self.outcome
        if isinstance(error, Relayed):
            outcome.code = next((c.name for c in grpc.StatusCode if c.value[0] == error.status.code), "UNKNOWN")
            outcome.reason = error.reason
            return error.status
        if isinstance(error, MnemosyneError):
            outcome.code, outcome.reason = status_code_for(error).name, error.reason
            return to_status_proto(error)
        log.error("unhandled error in %s", self.method, exc_info=error)
        outcome.code = outcome.reason = "INTERNAL"
        return to_status_proto(_INTERNAL)
