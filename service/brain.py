"""``MemoryBrain``: the seed's API (§9.2), in process or against a server, with one behaviour.

``MemoryBrain("./mem")`` runs the server's own ``Engine`` on a local directory — the same store,
write path, hot path and workers, no second implementation — and takes the directory's lock, so
a server and an in-process brain never share a directory. ``MemoryBrain("host:port",
tenant=...)`` talks to a server through ``MemoryClient``. Both return the client's plain values
and raise the client's typed errors, so code written against one runs unchanged on the other.

``retain(text, fast=True)`` takes the asynchronous hot path only when the tenant's hot path is
enabled (``hot_path(action="enable")``): it returns status "enqueued" with an event id, and the
memory is readable after ``hot_path(action="flush")``. When the hot path is disabled, ``fast`` is
ignored and the write is synchronous (status "created"/"duplicate", readable on return).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

from mnemosyne.client import MemoryClient, types
from mnemosyne.client.errors import _BY_CODE, ServerError
from mnemosyne.errors import MnemosyneError

T = TypeVar("T")
_ADDRESS = re.compile(r"(?:\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}")


def _is_address(location: str | Path) -> bool:
    return isinstance(location, str) and bool(_ADDRESS.fullmatch(location)) and not Path(location).exists()


class MemoryBrain:
    def __init__(self, location: str | Path, tenant: str = "default", *, token: str | None = None) -> None:
        self.tenant = tenant
        self._client: MemoryClient | None = None
        self._engine: Any = None
        if _is_address(location):
            self._client = MemoryClient(str(location), token)
        else:
            from mnemosyne.engine.engine import Engine, EngineConfig

            self._engine = _translated(lambda: Engine(EngineConfig(data_dir=Path(location))))

    # -- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._engine is not None:
            self._engine.close()

    def __enter__(self) -> "MemoryBrain":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _local(self, work: Callable[[], T]) -> T:
        return _translated(work)

    # -- the seed's API -----------------------------------------------------------------------------

    def ensure_init(self) -> None:
        """Make sure the tenant can be used: its file exists (in process) or the server answers."""
        if self._client is not None:
            self._client.ping()
            return

        def create() -> None:
            with self._engine.pool.tenant(self.tenant, create=True):
                pass

        self._local(create)

    def retain(
        self,
        text: str,
        *,
        fast: bool = False,
        scope: str = "global",
        metadata: Mapping[str, str] | None = None,
        request_id: str | None = None,
    ) -> types.RetainResult:
        if self._client is not None:
            return self._client.retain(self.tenant, text, scope, metadata, request_id, fast=fast)
        from mnemosyne.engine.types import RetainItem

        item = RetainItem(text, scope or "global", dict(metadata or {}))
        outcome = self._local(lambda: self._engine.retain(self.tenant, item, request_id=request_id, fast=fast))
        return _retain_result(outcome)

    def retain_batch(
        self, items: Sequence[types.RetainItem | str], *, fast: bool = False, request_id: str | None = None
    ) -> list[types.RetainResult]:
        if self._client is not None:
            return self._client.retain_batch(self.tenant, items, request_id, fast=fast)
        from mnemosyne.engine.types import RetainItem

        engine_items = [
            RetainItem(i) if isinstance(i, str) else RetainItem(i.text, i.scope or "global", dict(i.metadata)) for i in items
        ]
        outcomes = self._local(
            lambda: self._engine.retain_batch(self.tenant, engine_items, request_id=request_id, fast=fast)
        )
        return [_retain_result(o) for o in outcomes]

    def recall(
        self, query: str, k: int = 5, *, scopes: Sequence[str] | None = None, filters: Mapping[str, str] | None = None,
        mode: str = "hybrid",
    ) -> list[types.Hit]:
        if self._client is not None:
            return self._client.recall(self.tenant, query, k, scopes, filters, mode=mode)
        from mnemosyne.engine.types import RecallMode

        recalled = self._local(
            lambda: self._engine.recall(
                self.tenant, query, k=k, scopes=list(scopes or ()), metadata_equals=dict(filters or {}),
                mode=RecallMode(mode),
            )
        )
        return [types.Hit(_memory(h.memory), h.score, h.vector_score, h.text_score) for h in recalled.hits]

    def hot_path(self, action: str = "status", timeout_seconds: float = 0.0) -> types.HotPathStatus | types.FlushResult:
        """``enable`` | ``disable`` | ``status`` | ``flush`` (see ``MemoryClient.hot_path``)."""
        if self._client is not None:
            return self._client.hot_path(self.tenant, action, timeout_seconds)
        hot = self._engine.hot_path
        if action == "flush":
            f = self._local(lambda: hot.flush(self.tenant, timeout_seconds))
            return types.FlushResult(f.flushed, f.succeeded, f.failed, list(f.failed_event_ids))
        if action == "enable":
            self._local(lambda: hot.set_enabled(self.tenant, True))
            state = self._local(lambda: hot.status(self.tenant))
        elif action == "disable":
            state = self._local(lambda: hot.disable(self.tenant, timeout_seconds))
        elif action == "status":
            state = self._local(lambda: hot.status(self.tenant))
        else:
            raise ValueError(f"action must be one of enable, disable, status, flush; got {action!r}")
        return types.HotPathStatus(
            state.enabled, state.queue_depth, state.oldest_pending_seconds, state.accepted, state.succeeded,
            state.failed, state.duplicates, state.writes, state.model_calls,
        )

    def get_event(self, event_id: int) -> types.Event:
        if self._client is not None:
            return self._client.get_event(self.tenant, event_id)
        e = self._local(lambda: self._engine.hot_path.get_event(self.tenant, event_id))
        return types.Event(
            e.event_id, e.status, e.kind, e.accepted_at, e.finished_at, e.created_memory_ids,
            e.duplicate_of_memory_ids, e.merged_into_memory_ids, e.near_duplicate_of, e.error_reason,
            e.error_message, e.attempts, e.latency_ms, e.sequence, e.extracted,
        )

    def verify_integrity(self) -> types.IntegrityReport:
        if self._client is not None:
            return self._client.verify_integrity(self.tenant)
        r = self._local(lambda: self._engine.verify_integrity(self.tenant))
        return types.IntegrityReport(
            r.valid, r.first_broken_at, r.checked, r.head_hash, [types.IntegrityProblem(*p) for p in r.problems]
        )

    def stats(self) -> types.Stats:
        if self._client is not None:
            return self._client.stats(self.tenant)
        s = self._local(lambda: self._engine.stats(self.tenant))
        return types.Stats(s.memories, s.forgotten, s.writes, s.model_calls, s.embed_calls, s.duplicates,
                           s.ledger_entries, s.file_bytes)


def _translated(work: Callable[[], T]) -> T:
    """Run engine work, raising the client's error types (the same as the remote mode)."""
    try:
        return work()
    except MnemosyneError as exc:
        from mnemosyne.transport.errors import status_code_for

        code = status_code_for(exc)
        raise _BY_CODE.get(code, ServerError)(code, exc.reason, exc.message, exc.metadata) from exc


def _retain_result(outcome: Any) -> types.RetainResult:
    return types.RetainResult(
        status=outcome.status.value,
        memory_id=outcome.memory_id,
        event_id=outcome.event_id,
        error_reason=outcome.error_reason,
        error_message=outcome.error_message,
        near_duplicate_of=tuple(outcome.near_duplicate_of),
    )


def _memory(m: Any) -> types.Memory:
    return types.Memory(
        id=m.id, scope=m.scope, text=m.text, metadata=dict(m.metadata), created_at=m.created_at,
        facts=[types.Fact(*f) for f in m.facts], triples=[types.Triple(*t) for t in m.triples], forgotten=m.forgotten,
    )
