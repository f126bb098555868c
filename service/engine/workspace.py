"""Records of the Global and Workspace scopes under host-owned generations (the agent-memory design, docs/seed-mapping.md).

Each scope (``global``, ``workspace/<name>``) has a generation — 0 before its first record change,
+1 for each — and a set of named records (complete documents). Only record changes advance a
generation; retained memories live in the same scopes but never touch it, so background memory
work never makes an agent's observation stale.

Contracts:

* ``assemble_context`` reads the records of both scopes and both generations in ONE read
  transaction, so content and generation always belong together.
* Every write (``update_global``, ``update_workspace``, ``edit_records``, ``consolidate``) runs one
  ``BEGIN IMMEDIATE`` transaction under the tenant's write lock (which serialises every scope of
  the tenant). Inside it, in this order: a known ``request_id`` (or ``receipt_id``) returns its
  first result; the expected generation is compared with the current one — ``None`` fails with
  ``OBSERVATION_MISSING``, a difference with ``GENERATION_MISMATCH``, and the current value is
  never put in the error; the changes are applied all or nothing, the generation advances by
  exactly one, ONE ledger entry is appended, the result is stored with the request id.
* No code path falls back to the latest generation.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence

from mnemosyne.engine import limits as check
from mnemosyne.engine import page_tokens
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.observer import EngineObserver
from mnemosyne.engine.quotas import check_bytes_growth, used_before
from mnemosyne.engine.recall import Recall
from mnemosyne.engine.requests import keyed_write, replayed_anywhere
from mnemosyne.engine.types import (
    GLOBAL_SCOPE,
    AssembledContext,
    Hit,
    OmittedRecord,
    Recalled,
    RecordChange,
    RecordRevision,
    ScopeRecords,
    ScopeSummary,
    WriteResult,
)
from mnemosyne.errors import Conflict, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from mnemosyne.runtime.seams import Seams
from mnemosyne.store import ledger
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import ReadTxn, TenantStore, WriteTxn

MAIN_RECORD = "MEMORY.md"
MAX_KEY_CHARS = 256
MAX_CHANGES = 100
RECEIPT_ID_PATTERN = re.compile(r"[\x21-\x7e]{1,128}")
# Printable characters only: no NUL, no control characters (they hide in logs and file names).
_KEY_CHARS = re.compile(r"[^\x00-\x1f\x7f]+")


# -- validation ------------------------------------------------------------------------------


def workspace_scope(name: str) -> str:
    """``workspace/<name>`` for a valid workspace name."""
    if not name or "/" in name or not check.SCOPE_PATTERN.fullmatch(f"workspace/{name}"):
        raise InvalidArgument(
            f"workspace {name[:80]!r} is not valid: use 1-64 characters of letters, digits, '.', '_' and '-'",
            reason="WORKSPACE_INVALID",
        )
    return f"workspace/{name}"


def validate_record_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_CHARS or not _KEY_CHARS.fullmatch(key):
        raise InvalidArgument(
            f"record key {key[:80]!r} must be 1-{MAX_KEY_CHARS} printable characters (no NUL or control characters)",
            reason="RECORD_KEY_INVALID",
        )
    if key.startswith("/") or "\\" in key or any(part in ("", ".", "..") for part in key.split("/")):
        raise InvalidArgument(
            f"record key {key[:80]!r} must be a relative path like 'notes/plan.md': no leading '/', no '\\\\', "
            "no empty, '.' or '..' parts",
            reason="RECORD_KEY_INVALID",
        )
    return key


def validate_content(content: str, key: str, limits: Limits) -> str:
    size = len(content.encode("utf-8"))
    if size > limits.max_record_bytes:
        raise InvalidArgument(
            f"record {key[:80]!r} has {size} bytes; the limit is {limits.max_record_bytes} bytes "
            f"({check.set_by('max_record_bytes')})",
            reason="RECORD_TOO_LARGE",
        )
    if "\x00" in content:
        raise InvalidArgument(f"record {key[:80]!r} contains a NUL character", reason="RECORD_CONTENT_INVALID")
    return content


def validate_changes(changes: Sequence[RecordChange], limits: Limits) -> list[RecordChange]:
    if not changes:
        raise InvalidArgument("changes is empty; send at least one put or delete", reason="CHANGES_EMPTY")
    if len(changes) > MAX_CHANGES:
        raise InvalidArgument(
            f"{len(changes)} changes in one batch; the limit is {MAX_CHANGES}", reason="CHANGES_TOO_MANY"
        )
    seen: set[str] = set()
    for change in changes:
        if change.op not in ("put", "delete"):
            raise InvalidArgument(
                f"change op {str(change.op)[:20]!r} is not valid: use 'put' or 'delete'", reason="CHANGE_OP_INVALID"
            )
        validate_record_key(change.key)
        if change.op == "put":
            validate_content(change.content, change.key, limits)
        elif change.content:
            raise InvalidArgument(f"delete of {change.key[:80]!r} must not carry content", reason="CHANGE_OP_INVALID")
        if change.key in seen:
            raise InvalidArgument(
                f"record {change.key[:80]!r} appears twice in one batch; send one change per record",
                reason="RECORD_KEY_DUPLICATE",
            )
        seen.add(change.key)
    return list(changes)


def validate_receipt_id(receipt_id: str) -> str:
    if not receipt_id or not RECEIPT_ID_PATTERN.fullmatch(receipt_id):
        raise InvalidArgument(
            "receipt_id is required: 1-128 printable ASCII characters without spaces, the consolidation's durable id",
            reason="RECEIPT_ID_INVALID",
        )
    return receipt_id


def stale(scope: str) -> Conflict:
    # Never name the current generation: a host must re-assemble, not adopt the latest value.
    return Conflict(
        f"the {scope} records changed since the generation this request observed; nothing was written. "
        "Assemble context (or read the records) again and redo the change from what you see then",
        reason="GENERATION_MISMATCH",
        metadata={"scope": scope},
    )


def _raise_changed(scope: str, key: str) -> None:
    raise NotFound(
        f"record {key[:80]!r} of {scope} was deleted (its revisions with it) since the revert read them",
        reason="REVISION_NOT_FOUND",
    )


def _payload_hash(method: str, scope: str, expected: int, changes: Sequence[RecordChange]) -> str:
    return ledger.sha256_hex(
        ledger.canonical_json([method, scope, expected, [[c.op, c.key, c.content] for c in changes]])
    )


# -- the service -----------------------------------------------------------------------------


class Workspaces:
    """Record reads and writes of a tenant's scopes: the same tenant pool, the same recall, the
    same test seams as the memory calls."""

    def __init__(
        self, *, pool: TenantPool, recall: Recall, observer: EngineObserver, config: EngineConfig, seams: Seams
    ) -> None:
        self._pool = pool
        self._recall = recall
        self._observer = observer
        self._limits = config.limits
        self.config = config
        self._seams = seams

    def _generation(self, txn: ReadTxn, scope: str) -> int:
        generation = txn.scope_generation(scope)
        return self._seams.generation_base if generation is None else generation

    # -- reads ----------------------------------------------------------------------------------

    def assemble_context(self, tenant: str, workspace: str, *, query: str = "", k: int = 0) -> AssembledContext:
        scope = workspace_scope(workspace)
        if query:
            check.validate_query(query, self._limits)
            check.validate_k(k, self._limits)
        base = self._seams.generation_base
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                global_records, workspace_records, global_gen, workspace_gen = [], [], base, base
            else:
                with store.read() as txn:
                    # Records first, generations second, one snapshot: a commit between the two
                    # reads (see the seam) cannot pair this content with a newer generation.
                    global_records = txn.scope_records(GLOBAL_SCOPE)
                    workspace_records = txn.scope_records(scope)
                    if self._seams.commit_during_assemble:
                        self._seam_commit(store)
                    global_gen = self._generation(txn, GLOBAL_SCOPE)
                    workspace_gen = self._generation(txn, scope)
        recalled = Recalled([])
        if query:
            recalled = self._recall(tenant, query, k=k, scopes=[GLOBAL_SCOPE, scope])
        # Within the response budget: Global records first, then the workspace's, then the
        # memories, each kept if it still fits; what does not is named.
        room = check.RESPONSE_BUDGET_BYTES
        omitted: list[OmittedRecord] = []
        kept: dict[str, list[tuple[str, str]]] = {GLOBAL_SCOPE: [], scope: []}
        for record_scope, records in ((GLOBAL_SCOPE, global_records), (scope, workspace_records)):
            for key, content in records:
                size = check.record_bytes(key, content)
                if size <= room:
                    kept[record_scope].append((key, content))
                    room -= size
                else:
                    omitted.append(OmittedRecord(record_scope, key, len(content.encode("utf-8"))))
        hits: list[Hit] = []
        omitted_ids = []
        for hit in recalled.hits:
            size = check.memory_bytes(hit.memory)
            if size <= room:
                hits.append(hit)
                room -= size
            else:
                omitted_ids.append(hit.memory.id)
        return AssembledContext(
            global_records=kept[GLOBAL_SCOPE],
            workspace_records=kept[scope],
            global_generation=global_gen,
            workspace_generation=workspace_gen,
            memories=hits,
            omitted_records=omitted,
            omitted_memory_ids=(*omitted_ids, *recalled.omitted_memory_ids),
        )

    def _seam_commit(self, store: TenantStore) -> None:
        """Test seam: another writer commits a Global change while an assembly's read is open."""
        with store.write() as txn:
            generation = self._generation(txn, GLOBAL_SCOPE) + 1
            txn.apply_record_changes(
                GLOBAL_SCOPE,
                [("put", MAIN_RECORD, "written by the test seam during assembly")],
                generation,
                {"source": "test_seam"},
            )

    def list_records(self, tenant: str, scope: str, *, page_size: int = 0, page_token: str = "") -> ScopeRecords:
        """A scope's records by key, a page at a time (``page_size`` at most, fewer when their size
        would pass the response budget), each page with the scope's generation. A token names
        the generation of the listing's first page: if the records changed since, the listing
        fails with RECORDS_CHANGED (ABORTED) rather than mixing two generations."""
        scope = check.validate_scope(scope)
        page_size = check.validate_page_size(page_size, self._limits)
        query = f"records\x1f{scope}"
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                page_tokens.decode(None, tenant, query, page_token)  # any token is one we never issued
                return ScopeRecords([], self._seams.generation_base)
            with store.read() as txn:
                secret = txn.page_token_secret()
                position = page_tokens.decode(secret, tenant, query, page_token)
                generation = self._generation(txn, scope)
                after_key = None
                if position is not None:
                    listed_at, _, after_key = position.partition("\x1f")
                    if int(listed_at) != generation:
                        raise Conflict(
                            f"the {scope} records changed since this listing's first page; list them again from "
                            "the first page (no page_token)",
                            reason="RECORDS_CHANGED",
                            metadata={"scope": scope},
                        )
                records = txn.scope_records(scope, after_key=after_key, limit=page_size + 1)
        page = records[:page_size]
        page = page[: check.within_budget([check.record_bytes(key, content) for key, content in page])]
        more = len(page) < len(records)
        token = page_tokens.encode(secret, tenant, query, f"{generation}\x1f{page[-1][0]}") if more else ""
        return ScopeRecords(page, generation, token)

    def list_scopes(self, tenant: str) -> list[ScopeSummary]:
        """The Global scope always, then each workspace scope that has records, by name."""
        counts: dict[str, int] = {}
        generations: dict[str, int] = {}
        with self._pool.tenant(tenant, create=False) as store:
            if store is not None:
                with store.read() as txn:
                    counts, generations = txn.scope_record_counts(), txn.scope_generations()
        base = self._seams.generation_base
        workspaces = sorted(scope for scope in counts if scope != GLOBAL_SCOPE)
        return [
            ScopeSummary(scope, generations.get(scope, base), counts.get(scope, 0))
            for scope in (GLOBAL_SCOPE, *workspaces)
        ]

    def get_record(self, tenant: str, scope: str, key: str) -> tuple[str, int]:
        """(content, generation of the scope in the same snapshot)."""
        scope = check.validate_scope(scope)
        validate_record_key(key)
        content = None
        with self._pool.tenant(tenant, create=False) as store:
            if store is not None:
                with store.read() as txn:
                    content = txn.record(scope, key)
                    generation = self._generation(txn, scope)
        if content is None:
            raise NotFound(f"record {key[:80]!r} does not exist in {scope}", reason="RECORD_NOT_FOUND")
        return content, generation

    def record_revisions(self, tenant: str, scope: str, key: str) -> tuple[list[RecordRevision], int]:
        """A record's revisions, oldest first (a delete erased the ones before it; at most
        store/revisions.py REVISIONS_KEPT), and the scope's generation, from one snapshot."""
        scope = check.validate_scope(scope)
        validate_record_key(key)
        rows, current, generation = [], None, self._seams.generation_base
        with self._pool.tenant(tenant, create=False) as store:
            if store is not None:
                with store.read() as txn:
                    rows = txn.record_revisions(scope, key)
                    current = txn.record(scope, key)
                    generation = self._generation(txn, scope)
        if not rows and current is None:
            raise NotFound(f"record {key[:80]!r} has no revisions in {scope}", reason="RECORD_NOT_FOUND")
        revisions = [
            RecordRevision(
                r.generation,
                r.op,
                (current or "") if r.content is None else r.content,
                r.at,
                r.by.surface,
                r.by.token_name,
                r.source,
                r.ledger_seq,
            )
            for r in rows
        ]
        return revisions, generation

    # -- writes ---------------------------------------------------------------------------------

    def revert_record(
        self,
        tenant: str,
        scope: str,
        key: str,
        *,
        generation: int,
        expected_generation: int,
        request_id: str | None = None,
    ) -> WriteResult:
        """Put the content ``key`` had at ``generation`` as a new generation, if
        ``expected_generation`` is the scope's (the browser's contract: a stale one is
        GENERATION_MISMATCH and changes nothing). The content is read again inside the write, so
        a delete (which erases the record's revisions) that commits first wins."""
        scope = check.validate_scope(scope)
        validate_record_key(key)

        def content_at(txn: ReadTxn) -> str:
            row = next((r for r in txn.record_revisions(scope, key) if r.generation == generation), None)
            if row is None or row.op != "put":
                raise NotFound(
                    f"record {key[:80]!r} of {scope} has no content kept from generation {generation} "
                    "(ListRecordRevisions lists the ones kept)",
                    reason="REVISION_NOT_FOUND",
                )
            return txn.record(scope, key) or "" if row.content is None else row.content

        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise NotFound(f"record {key[:80]!r} has no revisions in {scope}", reason="RECORD_NOT_FOUND")
            with store.read() as txn:
                content = content_at(txn)
        change = RecordChange("put", key, content)
        return self._write(
            tenant,
            scope,
            [change],
            expected_generation,
            method="revert_record",
            request_id=request_id,
            verify=lambda txn: None if content_at(txn) == content else _raise_changed(scope, key),
        )

    def update_global(
        self, tenant: str, content: str, *, observed: int | None, request_id: str | None = None
    ) -> WriteResult:
        """Replace MEMORY.md (and nothing else) if ``observed`` is the Global generation."""
        validate_content(content, MAIN_RECORD, self._limits)
        return self._write(
            tenant,
            GLOBAL_SCOPE,
            [RecordChange("put", MAIN_RECORD, content)],
            observed,
            method="update_global",
            request_id=request_id,
        )

    def update_workspace(
        self,
        tenant: str,
        workspace: str,
        changes: Sequence[RecordChange],
        *,
        observed: int | None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Apply a batch of puts and deletes as ONE generation if ``observed`` is current."""
        scope = workspace_scope(workspace)
        return self._write(
            tenant,
            scope,
            validate_changes(changes, self._limits),
            observed,
            method="update_workspace",
            request_id=request_id,
        )

    def edit_records(
        self,
        tenant: str,
        scope: str,
        changes: Sequence[RecordChange],
        *,
        expected_generation: int,
        request_id: str | None = None,
    ) -> WriteResult:
        """Browser edit: the durable precondition is an explicit request field."""
        scope = check.validate_scope(scope)
        return self._write(
            tenant,
            scope,
            validate_changes(changes, self._limits),
            expected_generation,
            method="edit_records",
            request_id=request_id,
        )

    def consolidate(
        self,
        tenant: str,
        scope: str,
        changes: Sequence[RecordChange],
        *,
        expected_generation: int,
        receipt_id: str,
        journaled: bool = False,
    ) -> WriteResult:
        """Apply a session consolidation exactly once per ``receipt_id``; a receipt already
        applied returns its original result (``already_applied``) and changes nothing.
        ``journaled``: the consolidator's proposal for the receipt must still be in its journal
        (a forget or an update of a memory it quotes withdrew it: PROPOSAL_WITHDRAWN, nothing
        written)."""
        scope = check.validate_scope(scope)
        receipt_id = validate_receipt_id(receipt_id)
        changes = validate_changes(changes, self._limits)
        payload = _payload_hash("consolidate", scope, expected_generation, changes)

        def known(store: TenantStore, txn: ReadTxn) -> WriteResult | None:
            prior = txn.find_receipt(receipt_id)
            if prior is None:
                return None
            if prior[0] != scope or prior[1] != payload:
                raise Conflict(
                    f"receipt_id {receipt_id!r} was already applied with different changes; a receipt names one "
                    "consolidation",
                    reason="RECEIPT_REUSED",
                )
            return WriteResult.from_json(prior[2], already_applied=True)

        def remember(txn: WriteTxn, result: WriteResult) -> None:
            txn.save_receipt(receipt_id, scope, payload, result.to_json())
            txn.drop_proposal(receipt_id)  # the consolidator's journal row, if any (engine/consolidator.py)

        def still_proposed(txn: ReadTxn) -> None:
            if journaled and txn.journaled_proposal(receipt_id) is None:
                raise Conflict(
                    "the session's proposal was withdrawn: a memory it quotes was updated or forgotten; consolidate "
                    "the session again",
                    reason="PROPOSAL_WITHDRAWN",
                )

        return self._commit(
            tenant, scope, changes, expected_generation, "consolidate", known, remember, verify=still_proposed
        )

    def _write(
        self,
        tenant: str,
        scope: str,
        changes: list[RecordChange],
        expected: int | None,
        *,
        method: str,
        request_id: str | None,
        verify: Callable[[ReadTxn], None] | None = None,
    ) -> WriteResult:
        request_id = check.validate_request_id(request_id)
        if expected is None:
            self._observer.cas_rejected("OBSERVATION_MISSING")
            raise FailedPrecondition(
                f"no observed {scope} generation was sent; a host must assemble context before it writes, "
                "and send the generation it observed (it never uses the latest one)",
                reason="OBSERVATION_MISSING",
                metadata={"scope": scope},
            )
        payload = _payload_hash(method, scope, expected, changes)

        def known(store: TenantStore, txn: ReadTxn) -> WriteResult | None:
            prior = replayed_anywhere(store, txn, request_id, method, payload) if request_id else None
            return None if prior is None else WriteResult.from_json(prior, already_applied=True)

        def remember(txn: WriteTxn, result: WriteResult) -> None:
            if request_id:
                txn.save_request(request_id, method, payload, result.to_json())
                txn.prune_requests(time.time() - self.config.request_ttl_seconds)

        return self._commit(tenant, scope, changes, expected, method, known, remember, verify, request_id)

    def _commit(
        self,
        tenant: str,
        scope: str,
        changes: list[RecordChange],
        expected: int,
        method: str,
        known: Callable[[TenantStore, ReadTxn], WriteResult | None],
        remember: Callable[[WriteTxn, WriteResult], None],
        verify: Callable[[ReadTxn], None] | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        with self._pool.tenant(tenant, create=True) as store:
            assert store is not None
            with keyed_write(store, request_id) as txn:
                result = known(store, txn)  # a retry after a lost reply: the first result, nothing written
                if result is not None:
                    erase = txn.erasure_pending()  # and the erasure its first call could not finish
                else:
                    current = self._generation(txn, scope)
                    if expected != current:
                        self._observer.cas_rejected("GENERATION_MISMATCH")
                        raise stale(scope)
                    if verify is not None:
                        verify(txn)
                    self._check_changes(txn, scope, changes, self._limits.max_records_per_workspace)
                    result = WriteResult(current + 1, len(changes))
                    before = used_before(txn, self._limits)
                    erase = txn.apply_record_changes(
                        scope, [(c.op, c.key, c.content) for c in changes], result.generation, {"source": method}
                    )
                    remember(txn, result)
                    check_bytes_growth(txn, self._limits, before)
            if erase:  # the content a change removed leaves the WAL too (docs/operations.md)
                store.erase_traces()
        if not result.already_applied:
            self._seams.committed(method)
        return result

    @staticmethod
    def _check_changes(txn: ReadTxn, scope: str, changes: list[RecordChange], max_records: int) -> None:
        existing = set(txn.record_keys(scope))
        for change in changes:
            if change.op == "delete" and change.key not in existing:
                raise NotFound(
                    f"record {change.key[:80]!r} does not exist in {scope}; nothing of this batch was written",
                    reason="RECORD_NOT_FOUND",
                )
        after = existing | {c.key for c in changes if c.op == "put"}
        after -= {c.key for c in changes if c.op == "delete"}
        if len(after) > max_records:
            raise ResourceExhausted(
                f"{scope} would hold {len(after)} records; the limit is {max_records} records "
                f"({check.set_by('max_records_per_workspace')})",
                reason="RECORDS_LIMIT",
            )
