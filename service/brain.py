"""``MemoryBrain``: the specification's API (§9.2), in process or against a server, with one behaviour.

``MemoryBrain("./mem")`` runs the server's own ``Engine`` on a local directory — the same store,
write path, hot path and workers, no second implementation — and takes the directory's lock, so
a server and an in-process brain never share a directory. ``MemoryBrain("host:port",
tenant=...)`` talks to a server through ``MemoryClient``. Both return the client's plain values
and raise the client's typed errors, so code written against one runs unchanged on the other:
in process, the engine's values are converted exactly as the server converts them (the
transport's ``convert``, then the client's), so no field can differ between the two
(tests/test_memory_brain.py compares every method of both on the same inputs).

``retain(text, fast=True)`` takes the asynchronous hot path only when the tenant's hot path is
enabled (``hot_path(action="enable")``): it returns status "enqueued" with an event id. The brain
keeps the consistency token of its own queued writes (session consistency, as ``MemoryClient``
does: host/consistency.py), so its next ``recall`` or ``get_memory`` waits for them — the workers
take them ahead of the backlog — and finds them; ``consistency_token=""`` reads without waiting,
and another brain's or client's token (``consistency_token()``) waits for that one's writes.
When the hot path is disabled, ``fast`` is ignored and the write is synchronous (status
"created"/"duplicate", readable on return).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar, overload

from mnemosyne.client import MemoryClient, types
from mnemosyne.client import convert as client_convert
from mnemosyne.client.errors import MnemosyneClientError, error_class
from mnemosyne.client.unsendable import unknown_name
from mnemosyne.engine.consistency import WritesOpen
from mnemosyne.engine.types import RecallMode, RetainItem, RetainOutcome, RetainStatus
from mnemosyne.errors import DeadlineExceeded, MnemosyneError
from mnemosyne.host.consistency import SessionTokens
from mnemosyne.transport import convert, convert_history, convert_hot_path
from mnemosyne.transport.errors import status_code_for

if TYPE_CHECKING:
    from mnemosyne.engine.engine import Engine

T = TypeVar("T")
# How long a read in process waits for the writes of a token (as a server's read without a deadline).
TOKEN_WAIT_SECONDS = 30.0
_ADDRESS = re.compile(r"(?:\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}")
_HOT_PATH_ACTIONS = ("enable", "disable", "status", "flush")


def _is_address(location: str | Path) -> bool:
    return isinstance(location, str) and bool(_ADDRESS.fullmatch(location)) and not Path(location).exists()


def _translated(work: Callable[[], T]) -> T:
    """Run engine work, raising the client's error types (the same as the remote mode)."""
    try:
        return work()
    except MnemosyneError as exc:
        code = status_code_for(exc)
        raise error_class(code, exc.reason)(
            code, exc.reason, exc.message, exc.metadata, exc.retry_after_seconds
        ) from exc


class MemoryBrain:
    """The specification's memory API for one tenant, in process or against a server.

    ``location`` is a directory (``"./mem"``: the server's engine runs here, on that directory,
    which it locks) or a server's ``host:port`` (then ``token`` is the bearer token the client
    sends); ``tenant`` the tenant every call reads and writes. Both modes return the client's
    values (``mnemosyne.client.types``) and raise the client's typed errors
    (``mnemosyne.client.errors``, with the server's reasons), so code runs unchanged on either.
    ``session_consistency`` (the default): a read waits for this brain's own writes still
    queued, so ``retain(text, fast=True)`` then ``recall`` finds the text at once
    (``consistency_token=""`` on one read opts it out). In process, new tenants get the embedder
    ``MNEMOSYNE_EMBEDDER`` names (``minilm``, the default, or ``hashing``), as for ``mnemosyne
    serve``; a tenant keeps the one it was created with. Use it as a context manager, or
    ``close()`` it. Opening a directory another process serves raises
    ``FailedPreconditionError`` (DATA_DIR_LOCKED).
    """

    def __init__(
        self,
        location: str | Path,
        tenant: str = "default",
        *,
        token: str | None = None,
        session_consistency: bool = True,
    ) -> None:
        self.tenant = tenant
        self._client: MemoryClient | None = None
        self._engine: Engine | None = None
        # In process: the consistency tokens of this brain's queued writes (a client keeps its own).
        self._tokens = SessionTokens(1) if session_consistency else None
        if _is_address(location):
            self._client = MemoryClient(str(location), token, session_consistency=session_consistency)
        else:
            # The engine (numpy, SQLite) loads only for a local directory: `import mnemosyne` and a
            # MemoryBrain on a server's address stay a client, and the server's command sets the
            # interpreter up (BLAS threads) before numpy loads.
            from mnemosyne.engine.config import EngineConfig  # noqa: PLC0415 - loaded only in process
            from mnemosyne.engine.embedders import DEFAULT_EMBEDDER  # noqa: PLC0415 - loaded only in process
            from mnemosyne.engine.engine import Engine  # noqa: PLC0415 - loaded only in process

            # The embedder of new tenants: MNEMOSYNE_EMBEDDER, as for `mnemosyne serve`.
            embedder = os.environ.get("MNEMOSYNE_EMBEDDER") or DEFAULT_EMBEDDER
            self._engine = _translated(lambda: Engine(EngineConfig(data_dir=Path(location), embedder=embedder)))

    # -- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the client, or the engine and its directory's lock; the brain cannot be used after."""
        if self._client is not None:
            self._client.close()
        if self._engine is not None:
            self._engine.close()

    def __enter__(self) -> MemoryBrain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _local(self, work: Callable[[Engine], T]) -> T:
        assert self._engine is not None
        engine = self._engine
        return _translated(lambda: work(engine))

    def _wrote(self, outcomes: Sequence[RetainOutcome] = ()) -> None:
        """In process, after a write: its token (what it queued, none when synchronous) carrying
        the session's newest, kept by the session, as a server answers a client's write."""
        queued = [o.event_id for o in outcomes if o.status is RetainStatus.ENQUEUED]
        if self._tokens is None:
            return
        tokens = self._tokens
        sent = tokens.tokens(self.tenant)[-1:]
        if not sent and not queued:
            return  # visible already, and nothing earlier to cover (host/consistency.py ``queued``)
        token = self._local(lambda e: e.consistency.issue(self.tenant, queued, carried="".join(sent)))
        tokens.wrote(self.tenant, sent, token)

    def _read(self, work: Callable[[Engine], T], consistency_token: str | None) -> T:
        """In process, a read after the writes of the session's tokens (or ``consistency_token``'s;
        "": none) are visible or failed, waiting for them on this thread as a server's read waits
        on its event loop: TOKEN_WAIT_SECONDS at most."""
        tokens = self._tokens if consistency_token is None else None
        waited: Sequence[str] = tokens.tokens(self.tenant) if tokens is not None else [consistency_token or ""]
        deadline = time.monotonic() + TOKEN_WAIT_SECONDS

        def wait(engine: Engine) -> None:
            for token in filter(None, waited):
                _wait_for_token(engine, self.tenant, token, deadline)

        try:
            self._local(wait)
            result = self._local(work)
        except MnemosyneClientError as error:
            if tokens is not None:
                tokens.refused(self.tenant, waited, error.reason)
            raise
        if tokens is not None:
            tokens.read(self.tenant, waited)
        return result

    def consistency_token(self) -> str | None:
        """The consistency token of this brain's latest write still counted (None: none): another
        brain's or client's read given it waits for this brain's writes."""
        if self._client is not None:
            return self._client.consistency_token(self.tenant)
        return self._tokens.newest(self.tenant) if self._tokens is not None else None

    # -- the specification's API -------------------------------------------------------------------

    def ensure_init(self) -> None:
        """Make sure the tenant can be used: its file exists (in process; made when missing) or the
        server answers (``UnavailableError`` when none does)."""
        if self._client is not None:
            self._client.ping()
            return

        def create(engine: Engine) -> None:
            with engine.pool.tenant(self.tenant, create=True):
                pass

        self._local(create)

    def retain(
        self,
        text: str,
        *,
        fast: bool = False,
        scope: str = "",
        metadata: Mapping[str, str] | None = None,
        request_id: str | None = None,
    ) -> types.RetainResult:
        """Retain ``text`` as a memory; committed when this returns, unless ``fast`` and the
        tenant's hot path is enabled: then queued (status "enqueued" and an event id, readable
        after ``hot_path("flush")``).

        ``scope`` is "global" (when "") or "workspace/<name>"; ``metadata`` string pairs kept with
        it; ``request_id`` makes a retry return the first result. Returns the ``RetainResult``
        ("created", "duplicate" or "enqueued"). Raises what ``MemoryClient.retain`` raises:
        ``InvalidArgumentError`` (TEXT_EMPTY, TEXT_TOO_LONG, SCOPE_INVALID, METADATA_INVALID,
        ...), ``AbortedError`` (IDEMPOTENCY_KEY_REUSED), ``ResourceExhaustedError`` (QUOTA_*)."""
        if self._client is not None:
            return self._client.retain(self.tenant, text, scope, metadata, request_id, fast=fast)
        item = RetainItem(text, scope, dict(metadata or {}))
        outcome = self._local(lambda e: e.retain(self.tenant, item, request_id=request_id, fast=fast))
        self._wrote([outcome])
        return client_convert.retain_result_from_proto(convert.to_retain_result(outcome))

    def retain_batch(
        self, items: Sequence[types.RetainItem | str], *, fast: bool = False, request_id: str | None = None
    ) -> list[types.RetainResult]:
        """Retain many ``items`` (texts or ``RetainItem``s), each on its own: one result per item,
        in order, an item refused for its content "invalid" with its ``error_reason``. ``fast``
        and ``request_id`` as for ``retain``. Raises ``InvalidArgumentError`` (BATCH_EMPTY,
        BATCH_TOO_LARGE) and the batch-wide errors of ``retain``."""
        if self._client is not None:
            return self._client.retain_batch(self.tenant, items, request_id, fast=fast)
        engine_items = [convert.from_retain_item(client_convert.retain_item_to_proto(i)) for i in items]
        outcomes = self._local(lambda e: e.retain_batch(self.tenant, engine_items, request_id=request_id, fast=fast))
        self._wrote(outcomes)
        return [client_convert.retain_result_from_proto(r) for r in convert.to_retain_batch_response(outcomes).results]

    def recall(
        self,
        query: str,
        k: int = 0,
        *,
        scopes: Sequence[str] | None = None,
        filters: Mapping[str, str] | None = None,
        mode: str = "hybrid",
        consistency_token: str | None = None,
    ) -> list[types.Hit]:
        """The ``k`` memories most relevant to ``query``, best first, as ``Hit``s (memory and
        scores; ``k`` 0: the server's default, 5 or its --max-k when lower); ``scopes`` and ``filters`` (metadata pairs) narrow them, ``mode`` is "hybrid",
        "vector" or "text". ``consistency_token``: None waits for this brain's own writes
        (session consistency), ``""`` for none, a token for the writes it names (as for
        ``get_memory``). Raises ``RequestInvalidError`` (RECALL_MODE_INVALID; a ``ValueError``) for another mode; ``InvalidArgumentError``
        (QUERY_EMPTY, QUERY_INVALID, QUERY_TOO_LONG, K_OUT_OF_RANGE, SCOPE_INVALID)."""
        if self._client is not None:
            return self._client.recall(
                self.tenant, query, k, scopes, filters, mode=mode, consistency_token=consistency_token
            )
        if mode not in RecallMode._value2member_map_:
            raise unknown_name("RECALL_MODE_INVALID", "mode", RecallMode._value2member_map_, mode)
        recalled = self._read(
            lambda e: e.recall(
                self.tenant,
                query,
                k=k,
                scopes=list(scopes or ()),
                metadata_equals=dict(filters or {}),
                mode=RecallMode(mode),
            ),
            consistency_token,
        )
        return client_convert.hits_from_proto(convert.to_recall_response(recalled).hits)

    def get_memory(self, memory_id: int, *, consistency_token: str | None = None) -> types.Memory:
        """One memory by id (forgotten and merged ones as history). Raises ``NotFoundError``
        (MEMORY_NOT_FOUND)."""
        if self._client is not None:
            return self._client.get_memory(self.tenant, memory_id, consistency_token=consistency_token)
        memory = self._read(lambda e: e.memories.get(self.tenant, memory_id), consistency_token)
        return client_convert.memory_from_proto(convert.to_get_memory_response(memory).memory)

    def forget(self, memory_id: int, *, request_id: str | None = None) -> bool:
        """Erase everything a memory holds (its id, scope and times stay); False when it was
        forgotten already. Raises ``NotFoundError`` (MEMORY_NOT_FOUND)."""
        if self._client is not None:
            return self._client.forget(self.tenant, memory_id, request_id)
        forgotten = self._local(lambda e: e.memories.forget(self.tenant, memory_id, request_id=request_id))
        self._wrote()
        return forgotten

    def list_memory_revisions(self, memory_id: int) -> list[types.MemoryRevision]:
        """Every change to a memory, oldest first (docs/revisions.md): none for a forgotten one.
        Raises ``NotFoundError`` (MEMORY_NOT_FOUND)."""
        if self._client is not None:
            return self._client.list_memory_revisions(self.tenant, memory_id)
        revisions = self._read(lambda e: e.updates.revisions(self.tenant, memory_id), None)
        return client_convert.memory_revisions_from_proto(convert_history.to_memory_revisions_response(revisions))

    def revert_memory(self, memory_id: int, revision: int, *, request_id: str | None = None) -> types.UpdateResult:
        """Restore the text and metadata a memory had after ``revision``, as a new revision
        (``updated`` False when it had them already). Raises ``NotFoundError`` (MEMORY_NOT_FOUND,
        REVISION_NOT_FOUND), ``FailedPreconditionError`` (MEMORY_DUPLICATE, MEMORY_MERGED)."""
        if self._client is not None:
            return self._client.revert_memory(self.tenant, memory_id, revision, request_id)
        outcome = self._local(lambda e: e.updates.revert(self.tenant, memory_id, revision, request_id=request_id))
        self._wrote()
        return client_convert.revert_result_from_proto(convert_history.to_revert_memory_response(outcome))

    def get_expiry_policy(self) -> types.ExpiryPolicy:
        """The tenant's expiry policy (docs/expiry.md): the default one when it set none."""
        if self._client is not None:
            return self._client.get_expiry_policy(self.tenant)
        policy = self._local(lambda e: e.expiry.policy(self.tenant))
        return client_convert.expiry_policy_from_proto(convert_history.to_expiry_policy(policy))

    def set_expiry_policy(self, policy: types.ExpiryPolicy) -> types.ExpiryPolicy:
        """Replace the tenant's expiry policy; memories stored keep their expiry. Raises
        ``InvalidArgumentError`` (EXPIRY_POLICY_INVALID)."""
        if self._client is not None:
            return self._client.set_expiry_policy(self.tenant, policy)
        engine_policy = convert_history.from_expiry_policy(client_convert.expiry_policy_to_proto(policy))
        stored = self._local(lambda e: e.expiry.set_policy(self.tenant, engine_policy))
        self._wrote()
        return client_convert.expiry_policy_from_proto(convert_history.to_expiry_policy(stored))

    def dedup(self, *, merge: bool = False, threshold: float = 0.0) -> types.DedupResult:
        """Near-duplicate groups (embeddings at least ``threshold`` similar, 0: the default, and
        the same numbers, dates and identifiers); with ``merge=True`` merged into each group's
        oldest memory. Returns the ``DedupResult``. Raises ``InvalidArgumentError``
        (THRESHOLD_INVALID)."""
        if self._client is not None:
            return self._client.dedup(self.tenant, merge=merge, threshold=threshold)
        report = self._local(lambda e: e.dedup(self.tenant, merge=merge, threshold=threshold))
        if merge:
            self._wrote()
        return client_convert.dedup_from_proto(convert.to_dedup_response(report))

    @overload
    def hot_path(self, action: Literal["flush"], timeout_seconds: float = 0.0) -> types.FlushResult: ...
    @overload
    def hot_path(
        self, action: Literal["enable", "disable", "status"] = "status", timeout_seconds: float = 0.0
    ) -> types.HotPathStatus: ...
    @overload
    def hot_path(self, action: str, timeout_seconds: float = 0.0) -> types.HotPathStatus | types.FlushResult: ...
    def hot_path(self, action: str = "status", timeout_seconds: float = 0.0) -> types.HotPathStatus | types.FlushResult:
        """Act on the tenant's hot path (fast, queued writes): ``action`` "enable", "disable",
        "status" (a ``HotPathStatus``) or "flush" (wait until every fast write accepted before has
        finished: a ``FlushResult``). "flush" and "disable" wait at most ``timeout_seconds`` (0:
        30), then raise ``DeadlineExceededError`` (HOT_PATH_DEADLINE_EXCEEDED). Raises
        ``RequestInvalidError`` (HOT_PATH_ACTION_INVALID; a ``ValueError``) for another action and ``InvalidArgumentError`` (TIMEOUT_INVALID)."""
        if self._client is not None:
            return self._client.hot_path(self.tenant, action, timeout_seconds)
        if action not in _HOT_PATH_ACTIONS:
            raise unknown_name("HOT_PATH_ACTION_INVALID", "action", _HOT_PATH_ACTIONS, action)
        if action == "flush":
            outcome = self._local(lambda e: e.hot_path.flush(self.tenant, timeout_seconds))
            return client_convert.flush_from_proto(convert_hot_path.to_flush_response(outcome))
        if action == "enable":
            self._local(lambda e: e.hot_path.set_enabled(self.tenant, True))
            state = self._local(lambda e: e.hot_path.status(self.tenant))
        elif action == "disable":
            state = self._local(lambda e: e.hot_path.disable(self.tenant, timeout_seconds))
        else:
            state = self._local(lambda e: e.hot_path.status(self.tenant))
        return client_convert.hot_path_status_from_proto(convert_hot_path.to_hot_path_status(state))

    def get_event(self, event_id: int) -> types.Event:
        """One hot-path operation (the ``event_id`` of an "enqueued" result): its status and what
        it did. Raises ``NotFoundError`` (EVENT_NOT_FOUND)."""
        if self._client is not None:
            return self._client.get_event(self.tenant, event_id)
        event = self._local(lambda e: e.hot_path.get_event(self.tenant, event_id))
        return client_convert.event_from_proto(convert_hot_path.to_event(event))

    def list_events(self, *, status: str | None = None, page_size: int = 0, page_token: str = "") -> types.EventPage:
        """A page of hot-path operations in id order, only those of ``status`` ("pending",
        "running", "succeeded", "failed"; any when None); ``page_size`` 0 the server's default (100,
        or its --max-page-size when lower); ``page_token`` the previous page's
        ``next_page_token``. Raises ``InvalidArgumentError`` (EVENT_STATUS_INVALID,
        PAGE_SIZE_OUT_OF_RANGE, PAGE_TOKEN_INVALID)."""
        if self._client is not None:
            return self._client.list_events(self.tenant, status, page_size=page_size, page_token=page_token)
        page = self._local(
            lambda e: e.hot_path.list_events(self.tenant, status=status, page_size=page_size, page_token=page_token)
        )
        return client_convert.event_page_from_proto(convert_hot_path.to_list_events_response(page))

    def verify_integrity(self) -> types.IntegrityReport:
        """Recompute the tenant's audit chain and check every memory against it: the
        ``IntegrityReport`` (``valid``, the first broken entry, the head hash, the problems)."""
        if self._client is not None:
            return self._client.verify_integrity(self.tenant)
        report = self._local(lambda e: e.memories.verify_integrity(self.tenant))
        return client_convert.integrity_from_proto(convert.to_integrity(report))

    def stats(self) -> types.Stats:
        """The tenant's counters (memories, writes, model calls, duplicates, ...), a ``Stats``."""
        if self._client is not None:
            return self._client.stats(self.tenant)
        return client_convert.stats_from_proto(convert.to_stats(self._local(lambda e: e.tenants.stats(self.tenant))))


def _wait_for_token(engine: Engine, tenant: str, token: str, deadline: float) -> None:
    """Block until the writes of ``token`` are visible or failed (the workers take them first),
    or DEADLINE_EXCEEDED / CONSISTENCY_DEADLINE_EXCEEDED at ``deadline`` (time.monotonic())."""
    while True:
        try:
            engine.consistency.check(tenant, token)
            return
        except WritesOpen as pending:
            left = deadline - time.monotonic()
            if left <= 0:
                shown = ",".join(str(i) for i in pending.open_ids[:100])
                raise DeadlineExceeded(
                    f"the read waited {TOKEN_WAIT_SECONDS:g}s for {len(pending.open_ids)} writes of its consistency "
                    f"token that are not applied yet (events {shown}); read again later, or without the token",
                    reason="CONSISTENCY_DEADLINE_EXCEEDED",
                    metadata={"open_event_ids": shown},
                ) from None
            engine.hot_path.awaited.wait(tenant, pending.spans, left)
