"""The MCP sessions each tenant holds open, counted by admission (``hold_session``), so that one
tenant cannot take every session the server keeps and lock the others out of ``/mcp``.

The MCP SDK keeps the sessions and ends them itself (a client's DELETE, no request in flight for
the idle timeout, a crash) without telling anyone, so they are counted here from the HTTP
exchanges that show it: a request without a session id that is answered with one opened it; a
DELETE answered with success, or a 404 to the session's own owner, ended it; a session with no
request in flight for longer than the SDK's idle timeout has ended. The count may stay a
session too high until then (one that crashed), never too low: a 404 to another owner (the SDK
answers so for a session presented with another token, tenant or workspace) ends nothing.

Everything here runs on the event loop's thread (no locks), as admission does.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from mnemosyne.transport.admission import Admission


@dataclass(slots=True)
class _Session:
    tenant: str
    owner: str  # the token's name, the tenant and the workspace: as the SDK compares them
    in_flight: int = 0
    idle_since: float = 0.0


class TenantSessions:
    def __init__(
        self,
        admission: Admission,
        idle_seconds: float,
        on_end: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``on_end``: told each session id that ended (its state can go)."""
        self._admission = admission
        self._on_end = on_end
        # The SDK ends an idle session when its timer fires; this count lets it go a second later.
        self._idle_seconds = idle_seconds + 1.0
        self._clock = clock
        # session id -> its session, the least recently active first
        self._open: OrderedDict[str, _Session] = OrderedDict()

    def reserve(self, tenant: str) -> None:
        """A place for a session the tenant asks to open (pair with ``settle``), or the refusal
        (RESOURCE_EXHAUSTED, ``MCP_SESSIONS_PER_TENANT_REACHED`` or ``MCP_SESSIONS_REACHED``)."""
        self._end_idle()
        self._admission.hold_session(tenant)

    def settle(self, tenant: str, owner: str, session_id: str | None) -> None:
        """The reserved place taken by the session opened (``session_id``), or given back."""
        if session_id is None or session_id in self._open:
            self._admission.release_session(tenant)
            return
        self._open[session_id] = _Session(tenant, owner, idle_since=self._clock())

    def began(self, session_id: str) -> None:
        """A request of the session arrived (pair with ``ended``)."""
        session = self._open.get(session_id)
        if session is not None:
            session.in_flight += 1

    def ended(self, session_id: str, owner: str, *, gone: bool) -> None:
        """A request of the session was answered; ``gone``: the answer says the session ended
        (counted only when ``owner`` is the session's own)."""
        session = self._open.get(session_id)
        if session is None:
            return
        session.in_flight -= 1
        if gone and owner == session.owner:
            self._end(session_id, session)
            return
        session.idle_since = self._clock()
        self._open.move_to_end(session_id)

    def _end_idle(self) -> None:
        """End the sessions the SDK has ended for idleness (the least recently active first)."""
        now, idle = self._clock(), []
        for session_id, session in self._open.items():
            if now - session.idle_since <= self._idle_seconds:
                break  # every later one was active more recently
            if session.in_flight == 0:
                idle.append((session_id, session))
        for session_id, session in idle:
            self._end(session_id, session)

    def _end(self, session_id: str, session: _Session) -> None:
        del self._open[session_id]
        self._admission.release_session(session.tenant)
        self._on_end(session_id)
