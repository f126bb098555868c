"""Consistency tokens on every surface (engine/consistency.py has what they are; docs/hot-path.md
"Read your own writes").

* A write answers its token in its response's ``consistency_token`` and in the trailing metadata
  ``mnemosyne-consistency-token`` (over HTTP, mem0 and MCP: the response header of that name; the
  MCP tools put it in their result). A write may carry the session's newest token in the request
  metadata of that name (an HTTP header): the token it answers covers that one's open writes too.
* A read (and Flush) takes a token from its request's ``consistency_token`` or, without one, the
  same request metadata (for fixed schemas: mem0, and any client that cannot set the field).
  Before it reads it asks where the token's writes stand: all applied, it reads at once, counting
  nothing; some open, the engine raises ``WritesOpen`` and the edge waits for them here
  (``wait``) on the event loop, holding no thread, counted as a waiting call
  (transport/admission.py), the workers taking them first, then runs the read again. The answer
  names the failed writes (``ConsistencyReport``, and the trailing metadata
  ``mnemosyne-consistency-failed``: their event ids, comma-separated).
* A write whose request metadata ``mnemosyne-consistency-level`` says ``replicated`` answers a
  token at REPLICATED: a read (or Flush) given it waits for its writes to be visible, then for a
  sync of the tenant to object storage (``wait``; engine/consistency.py).
* The wait ends just before the call's deadline (so that its answer arrives in time):
  DEADLINE_EXCEEDED with reason CONSISTENCY_DEADLINE_EXCEEDED and the writes still open
  (``open_event_ids``). A call without a deadline (HTTP, mem0, MCP) waits at most
  ``WAIT_SECONDS``, or the ``Mnemosyne-Timeout-Seconds`` header's seconds when it gives fewer.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from mnemosyne.engine.consistency import REPLICATED, Consistency, WritesOpen, level_of
from mnemosyne.engine.engine import Engine
from mnemosyne.errors import InvalidArgument
from mnemosyne.host.protocol import CONSISTENCY_TOKEN_KEY
from mnemosyne.transport import waits
from mnemosyne.transport.call import Call
from mnemosyne.v1 import types_pb2

TOKEN_KEY = CONSISTENCY_TOKEN_KEY
LEVEL_KEY = "mnemosyne-consistency-level"
FAILED_KEY = "mnemosyne-consistency-failed"
TIMEOUT_KEY = "mnemosyne-timeout-seconds"
# How long a read without a deadline waits for its token's writes (as a Flush without a timeout).
WAIT_SECONDS = 30.0


def carried(call: Call, field: str = "") -> str:
    """The call's token: the request field's, else its metadata's (empty: none). Taken as given,
    like the field's: a token padded or made of white space (U+2028, a no-break space) is refused
    (engine/consistency.py), never read as none. The metadata holds one token at most: of two,
    which the caller meant is its to say (the second, perhaps another tenant's, was ignored
    without a word), so two are refused, TOKEN_INVALID, whether or not the field is given."""
    values = call.metadata_values(TOKEN_KEY)
    if len(values) > 1:
        raise InvalidArgument(
            f"{TOKEN_KEY} is given {len(values)} times: give one token (the newest a session's writes "
            "returned covers its earlier ones)",
            reason="TOKEN_INVALID",
        )
    if field:
        return field
    return values[0] if values else ""


def carries(request: Any, call: Call) -> bool:
    """Whether a call gives a token (a read given one runs on a reader thread, never on the loop:
    where its writes stand is read under the inbox lock)."""
    return bool(getattr(request, "consistency_token", "") or call.metadata_values(TOKEN_KEY))


def asks_replicated(call: Call, tokens: Consistency) -> bool:
    """Whether the call's metadata asks for REPLICATED (a Flush: once its token's writes, or its
    whole queue, are applied, a sync of the tenant in object storage); a level that is no level
    (CONSISTENCY_LEVEL_INVALID), or REPLICATED on a server that does not replicate
    (REPLICATION_OFF), is refused here, before the call waits for anything."""
    level = level_of(call.metadata_values(LEVEL_KEY))
    tokens.check_level(level)
    return level == REPLICATED


class _Writer(Protocol):
    _tokens: Consistency


W = TypeVar("W", bound=_Writer)
R = TypeVar("R")


def writing(method: Callable[[W, Any, Call], R]) -> Callable[[W, Any, Call], R]:
    """A servicer's write that answers a token (``for_write``): the token it carries and the level
    it asks are checked before it writes (``Consistency.check_write``), so one refused writes
    nothing."""

    @functools.wraps(method)
    def checked(servicer: W, request: Any, call: Call) -> R:
        servicer._tokens.check_write(
            request.tenant, carried=carried(call), level=level_of(call.metadata_values(LEVEL_KEY))
        )
        return method(servicer, request, call)

    return checked


def for_write(tokens: Consistency, call: Call, tenant: str, event_ids: Sequence[int] = ()) -> str:
    """The token of a write that was just made (its queued operations' ``event_ids``, none when
    it is synchronous), also as trailing metadata."""
    token = tokens.issue(tenant, event_ids, carried=carried(call), level=level_of(call.metadata_values(LEVEL_KEY)))
    if token:
        call.set_trailing_metadata(((TOKEN_KEY, token),))
    return token


def for_read(tokens: Consistency, call: Call, tenant: str, field: str) -> types_pb2.ConsistencyReport | None:
    """Before a read: None without a token; with one, ``WritesOpen`` while its writes are open
    (the edge waits and runs the read again), else what the read waited for."""
    token = carried(call, field)
    if not token:
        return None
    timeout_header(call)  # refused whether or not the read waits: a mistake that shows only under load hides
    failed = tokens.check(tenant, token, replicated=call.replicated)
    if failed:
        call.set_trailing_metadata(((FAILED_KEY, ",".join(str(i) for i in failed)),))
    return types_pb2.ConsistencyReport(failed_event_ids=failed, waited_ms=call.consistency_waited * 1000.0)


def headers(call: Call) -> dict[str, str]:
    """What a surface of fixed schemas (mem0) answers of a call's consistency as HTTP headers: the
    write's token, the read's failed writes."""
    return {k: v for k, v in call.trailing_metadata if k in (TOKEN_KEY, FAILED_KEY)}


def timeout_header(call: Call) -> float | None:
    """The seconds the ``Mnemosyne-Timeout-Seconds`` header gives (the least, when given twice;
    None: not given); INVALID_ARGUMENT / TIMEOUT_INVALID for anything but a positive number."""
    header = None
    for value in call.metadata_values(TIMEOUT_KEY):
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not 0 < seconds < math.inf:
            raise InvalidArgument(
                f"{TIMEOUT_KEY} must be a positive number of seconds, not {value[:32]!r}", reason="TIMEOUT_INVALID"
            )
        header = seconds if header is None else min(header, seconds)
    return header


def deadline(call: Call) -> float:
    """When a wait for a token's writes ends (time.monotonic()): just before the call's deadline,
    so that its answer (CONSISTENCY_DEADLINE_EXCEEDED, naming the writes still open) reaches the
    client before the client's own deadline does (``Call.seconds_to_answer``); without one,
    WAIT_SECONDS from now; sooner when the timeout header says so (never later)."""
    header = timeout_header(call)
    wanted = WAIT_SECONDS if call.deadline is None else math.inf
    return time.monotonic() + call.seconds_to_answer(wanted if header is None else min(wanted, header))


async def wait(engine: Engine, call: Call, pending: WritesOpen) -> None:
    """The edge's wait for a read's token: until none of ``pending``'s writes is open, or
    DEADLINE_EXCEEDED at the deadline (transport/waits.py)."""
    started = time.monotonic()
    ends = deadline(call)
    try:
        await waits.token_writes(engine.hot_path, call, pending.spans, pending.open_ids, ends)
        if pending.replicate:
            await waits.replicated(engine.hot_path, engine.consistency, call, ends)
            call.replicated = True
    finally:
        call.consistency_waited += time.monotonic() - started
