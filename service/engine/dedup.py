"""Near duplicates: similar embeddings AND the same atoms.

Exact duplicates (same scope, same normalised text) are refused by the store's unique fingerprint.
A *near* duplicate is a memory of the same scope whose embedding cosine with another's is at least
a threshold and whose **atoms** are identical. Atoms are what two texts must agree on to say the
same thing however they are worded: numbers, dates, identifiers and e-mail addresses. They are read
from the text itself by regular expressions (never by the extractor, so finding them costs no model
call and works on stored bodies): "refund in 5 days" and "refund in 15 days" are close in vector
space but their atoms ({5} vs {15}) differ, so they are never near duplicates. The words the
tenant's embedder cannot read (``Embedder.unread``: for MiniLM an emoji, a script its vocabulary
lacks, or a whole text of control characters) are atoms too: the model gives "🍰" and "🍮", or two
sentences in Amharic, the same vector, so only their letters can tell them apart.

At write time near duplicates are only named (``RetainOutcome.near_duplicate_of``); the Dedup admin
call reports groups and merges them only when asked. Similarity is computed with the tenant's
in-memory vector matrix (one matrix product per batch of vectors, never a Python loop over stored
memories); atoms are computed only for the few candidates above the threshold.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from mnemosyne.engine import limits as check
from mnemosyne.engine.embedder import Embedder, check_tenant_embedder
from mnemosyne.engine.embedders import TenantEmbedders
from mnemosyne.engine.extractor import (
    _ANY_DIGIT,
    _DAY_MONTH_YEAR,
    _EMAIL,
    _IDENTIFIER,
    _ISO_DATE,
    _MONTH_DAY_YEAR,
    _MONTHS,
)
from mnemosyne.engine.index import drop_vectors, vector_index
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.postings import drop_texts
from mnemosyne.engine.quotas import keep_requests_within_quota
from mnemosyne.engine.requests import (
    RequestKey,
    keyed_write,
    replayed_anywhere,
    replayed_result,
    replayed_without_file,
    result_without_file,
)
from mnemosyne.engine.types import DedupGroup, DedupReport
from mnemosyne.errors import InvalidArgument
from mnemosyne.runtime import read_priority
from mnemosyne.store import ledger
from mnemosyne.store.memory_rows import MemoryRow
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import ReadTxn, TenantStore
from mnemosyne.store.tenantless_requests import TenantlessRequests

DEFAULT_THRESHOLD = 0.85
# A merge's result kept among the calls that found its tenant without a file: (request id, method,
# payload hash) -> its JSON, or None (engine/requests.py ``replayed_without_file``).
WithoutFile = Callable[[str, str, str], str | None]
# Candidates kept per new memory at write time; more would only lengthen the result.
MAX_NAMED = 8
# The all-pairs product in Dedup runs in blocks of rows holding at most this many scores (64 MB of
# float32), so its memory stays bounded however large the tenant.
_BLOCK_SCORES = 1 << 24
# Dedup's reads of the vectors: one, and another should a re-embedding's switch come between the
# embedder taken and the read (the last is refused EMBEDDER_MISMATCH if one came again).
_ATTEMPTS = 2
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def atoms(text: str) -> frozenset[str]:
    """Numbers, dates, identifiers and e-mail addresses in ``text``, normalised.

    Dates are normalised to ISO form ("8 May 2023" = "2023-05-08") and their digits are not counted
    again as numbers; identifiers are upper-cased ("rf-88213" = "RF-88213"); numbers lose thousands
    separators ("1,000" = "1000") and are compared whole, so 5 never equals 15.
    """
    found: set[str] = set()
    spans: list[tuple[int, int]] = []

    def claim(match: re.Match[str], atom: str) -> None:
        found.add(atom)
        spans.append(match.span())

    if "@" in text:
        for m in _EMAIL.finditer(text):
            claim(m, "email:" + m.group(0).lower())
    if not _ANY_DIGIT.search(text):  # every other kind holds a digit
        return frozenset(found)
    # Each pass below reads the whole text (~1 ms for 32 KB): a read running beside a batch of
    # long texts goes first between them (read_priority).
    read_priority.give_way()
    for m in _ISO_DATE.finditer(text):
        claim(m, "date:" + m.group(0))
    for m in _DAY_MONTH_YEAR.finditer(text):
        day, month, year = m.groups()
        claim(m, f"date:{int(year):04d}-{_MONTHS[month.lower().rstrip('.')]:02d}-{int(day):02d}")
    read_priority.give_way()
    for m in _MONTH_DAY_YEAR.finditer(text):
        month, day, year = m.groups()
        claim(m, f"date:{int(year):04d}-{_MONTHS[month.lower().rstrip('.')]:02d}-{int(day):02d}")
    read_priority.give_way()
    for m in _IDENTIFIER.finditer(text):
        if not _inside(m.span(), spans):
            claim(m, "id:" + m.group(0).upper())
    for m in _NUMBER.finditer(text):
        if not _inside(m.span(), spans):
            found.add("num:" + m.group(0).replace(",", ""))
    return frozenset(found)


def _inside(span: tuple[int, int], spans: Sequence[tuple[int, int]]) -> bool:
    return any(start <= span[0] and span[1] <= end for start, end in spans)


def similar_rows(
    vectors: np.ndarray, ids: np.ndarray, matrix: np.ndarray, threshold: float, *, limit: int = MAX_NAMED
) -> list[list[tuple[int, float]]]:
    """For each row of ``vectors``: (memory id, cosine) of stored rows with cosine >= threshold,
    best first, at most ``limit``. One matrix product for all of them."""
    if len(ids) == 0 or len(vectors) == 0:
        return [[] for _ in range(len(vectors))]
    # (stored, new) then transposed: one pass over the stored matrix in its row-major order, the
    # same product Recall makes, for every new vector at once.
    scores = (matrix @ vectors.T).T
    out: list[list[tuple[int, float]]] = [[] for _ in range(len(vectors))]
    # One comparison and one nonzero for the whole (new, stored) block; Python work only for the
    # few rows that have a hit (most new memories have none). ``cols`` ascend within each row, as
    # a per-row flatnonzero would give them.
    rows, cols = np.nonzero(scores >= threshold)
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]) if len(rows) else rows
    for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(rows)]):
        r = int(rows[start])
        row, hits = scores[r], cols[start:end]
        if len(hits) > limit:
            hits = hits[np.argpartition(-row[hits], limit - 1)[:limit]]
        hits = hits[np.argsort(-row[hits], kind="stable")]
        out[r] = [(int(ids[i]), float(row[i])) for i in hits]
    return out


def similar_earlier(
    vectors: np.ndarray, threshold: float, *, block: int = 128, limit: int = MAX_NAMED
) -> list[list[int]]:
    """For each row j of ``vectors``: the rows i < j with cosine >= threshold, best first (equal
    cosines: lower i first), at most ``limit``, as ``similar_rows(vectors, arange, vectors,
    threshold)`` filtered to i < j would give them, computing only the lower triangle (blocks of
    rows against the rows before their end: about half the products) and touching in Python only
    the pairs found."""
    n = len(vectors)
    out: list[list[int]] = [[] for _ in range(n)]
    for start in range(0, n, block):
        end = min(n, start + block)
        scores = vectors[start:end] @ vectors[:end].T  # (rows of this block, every row up to its end)
        rows, cols = np.nonzero(scores >= threshold)
        keep = cols < rows + start  # earlier rows only: never itself, never a later one
        rows, cols = rows[keep], cols[keep]
        if len(rows) == 0:
            continue
        order = np.lexsort((cols, -scores[rows, cols], rows))  # by row, then best first, then i
        for r, c in zip(rows[order].tolist(), cols[order].tolist()):
            if len(out[start + r]) < limit:
                out[start + r].append(c)
    return out


def similar_pairs(ids: np.ndarray, matrix: np.ndarray, threshold: float) -> list[tuple[int, int, float]]:
    """Every pair (lower id, higher id, cosine) of stored rows with cosine >= threshold.

    Computed in blocks of rows against the rest of the matrix, so memory stays bounded
    (``_BLOCK_SCORES``); the cost is n^2/2 dot products, which is why this runs only on an
    explicit Dedup call.
    """
    pairs: list[tuple[int, int, float]] = []
    n = len(ids)
    step = max(1, min(1024, _BLOCK_SCORES // max(n, 1)))
    for start in range(0, n, step):
        # Only the rows from ``start`` on: the pairs with earlier rows were found by earlier blocks.
        block = matrix[start : start + step] @ matrix[start:].T  # (step, n - start)
        rows, cols = np.nonzero(block >= threshold)
        keep = cols > rows  # each unordered pair once, never a row with itself
        rows, cols = rows[keep], cols[keep]
        first, second = ids[start + rows], ids[start + cols]
        scores = block[rows, cols]
        pairs.extend(zip(np.minimum(first, second).tolist(), np.maximum(first, second).tolist(), scores.tolist()))
    return pairs


@dataclass
class Candidate:
    """What the atoms rule needs to know of a memory (stored, or an item being written). Its
    atoms are computed on first use and kept, so comparing one item with many others, or many
    with one, reads each text once: a batch of n look-alikes costs n atom scans, not n^2. (Not a
    ``functools.cached_property``: before Python 3.12 it holds one lock for every instance while
    it computes, and a scan gives way to reads and other writes between its passes.)"""

    scope: str
    body: str
    # The tenant's embedder: the words its vector cannot read are atoms too ("unread:" + word).
    embedder: Embedder | None = field(default=None, repr=False, compare=False)
    _atoms: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def atoms(self) -> frozenset[str]:
        if self._atoms is None:
            found = atoms(self.body)
            if self.embedder is not None:
                found |= {"unread:" + word for word in self.embedder.unread(self.body)}
            self._atoms = found
        return self._atoms


def same_atoms_filter(item: Candidate, candidates: Iterable[int], known: Mapping[int, Candidate]) -> list[int]:
    """The candidates in ``item``'s scope whose atoms equal its atoms (order kept)."""
    in_scope = [c for c in candidates if c in known and known[c].scope == item.scope]
    if not in_scope:  # the common case: no similar memory at all, so no regex work
        return []
    return [c for c in in_scope if known[c].atoms == item.atoms]


def group_pairs(pairs: Sequence[tuple[int, int, float]], known: Mapping[int, Candidate]) -> list[DedupGroup]:
    """Star groups: the oldest memory of a cluster is kept and every memory merged into it is
    itself a near duplicate of it (same scope, cosine >= threshold, same atoms). Similarity is not
    transitive, so a memory only close to another duplicate is left for a later Dedup run rather
    than merged into something it does not resemble."""
    neighbours: dict[int, list[int]] = {}
    for a, b, _score in pairs:
        if a not in known or b not in known or known[a].scope != known[b].scope:
            continue
        if known[a].atoms != known[b].atoms:
            continue
        neighbours.setdefault(a, []).append(b)
        neighbours.setdefault(b, []).append(a)
    assigned: set[int] = set()
    groups: list[DedupGroup] = []
    for memory_id in sorted(neighbours):
        if memory_id in assigned:
            continue
        members = sorted(n for n in neighbours[memory_id] if n not in assigned and n > memory_id)
        if not members:
            continue
        assigned.add(memory_id)
        assigned.update(members)
        groups.append(DedupGroup(memory_id, tuple(members)))
    return groups


class InFlight:
    """In-process single flight of identical content, so racing writers of the same text in one
    server make ONE extraction call: the first claims the (tenant, fingerprint) and the others wait
    for it, then find an exact duplicate without extracting. Across processes correctness still
    rests on the store's unique fingerprint; this only saves model calls.

    Claims are taken in sorted order, so two batches sharing fingerprints cannot deadlock.
    """

    WAIT_SECONDS = 60.0  # a stuck owner never blocks the others forever; they go on unclaimed

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owners: dict[tuple[str, str], threading.Event] = {}

    @contextmanager
    def claim(self, tenant: str, fingerprints: Iterable[str]) -> Iterator[None]:
        mine: list[tuple[str, str]] = []
        # One event for all of this claim's keys (they are released together): a batch of 500
        # costs one Event, not 500.
        released = threading.Event()
        try:
            for key in sorted({(tenant, f) for f in fingerprints}):
                while True:
                    with self._lock:
                        owner = self._owners.get(key)
                        if owner is None:
                            self._owners[key] = released
                            mine.append(key)
                            break
                    if not owner.wait(self.WAIT_SECONDS):
                        break
            yield
        finally:
            with self._lock:
                for key in mine:
                    del self._owners[key]
            released.set()


class Deduplicator:
    """The Dedup operation over a tenant's stored memories (AdminService.Dedup)."""

    def __init__(
        self,
        *,
        pool: TenantPool,
        embedders: TenantEmbedders,
        default_threshold: float,
        tenantless: TenantlessRequests,
        limits: Limits,
    ) -> None:
        self._pool = pool
        self._limits = limits  # a merge's request ids past the byte quota are bounded (engine/quotas.py)
        self._tenantless = tenantless  # the results of keyed calls that found no tenant file
        self._embedders = embedders
        self._default_threshold = default_threshold

    def __call__(
        self, tenant: str, *, merge: bool = False, threshold: float = 0.0, request_id: str | None = None
    ) -> DedupReport:
        """Report near-duplicate groups (same scope, cosine >= threshold, same atoms: the module's
        docstring) and, with ``merge``, retire each group's duplicates into its kept (oldest)
        memory: one ``merge`` ledger entry per group, in one write transaction that re-checks every
        member is still live. Similarity is computed before that transaction, never inside it.
        A request id makes a retried merge return the first call's groups."""
        request_id = check.validate_request_id(request_id)
        threshold = float(threshold or self._default_threshold)
        if not 0.0 < threshold <= 1.0:
            raise InvalidArgument(
                f"threshold {threshold} is out of range; give a cosine similarity in (0, 1], or 0 for the "
                f"server default ({self._default_threshold})",
                reason="THRESHOLD_INVALID",
            )
        payload_hash = ledger.sha256_hex(ledger.canonical_json(["dedup", merge, threshold]))
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:  # nothing to merge: a retry after the tenant's first write merges nothing too
                if not (merge and request_id):
                    return DedupReport([], merge, threshold)
                key = RequestKey(request_id, "dedup", payload_hash)
                return _report(result_without_file(self._tenantless, tenant, key, "[]"), threshold)
            without_file = partial(replayed_without_file, self._tenantless, tenant)
            if merge and request_id:
                with store.read() as txn:
                    prior = _prior_dedup(txn, request_id, payload_hash, threshold, without_file)
                if prior is not None:
                    return prior
            groups, texts = self._groups(store, threshold)
            if not merge:
                return DedupReport(groups, False, threshold)
            return _merge(store, groups, texts, threshold, request_id, payload_hash, without_file, self._limits)

    def _groups(self, store: TenantStore, threshold: float) -> tuple[list[DedupGroup], dict[int, str]]:
        """The tenant's near-duplicate groups, from one read snapshot of its vectors, and the text
        each member of a group had in it."""
        for attempt in range(_ATTEMPTS):
            embedder = self._embedders.of(store)
            index = vector_index(store, embedder.dim)
            with store.read() as txn:
                # A re-embedding's switch since the embedder was taken: again, by the new one.
                if attempt < _ATTEMPTS - 1 and self._embedders.switched(store, txn, embedder):
                    continue
                check_tenant_embedder(txn, embedder, write=False)
                ids, matrix = index.sync(txn)
                pairs = similar_pairs(ids, matrix, threshold)
                involved = sorted({a for a, _, _ in pairs} | {b for _, b, _ in pairs})
                rows = txn.memories_by_ids(involved, with_details=False) if involved else {}
                break
        # Superseded memories are history, never a merge target nor merged into a current one.
        known = {
            i: Candidate(r.scope, r.body, embedder)
            for i, r in rows.items()
            if not r.forgotten and not r.merged_into and not r.superseded_by
        }
        groups = [_lasting(g, rows) for g in group_pairs(pairs, known)]
        return [g for g in groups if g.duplicates], {i: c.body for i, c in known.items()}


def _merge(
    store: TenantStore,
    groups: list[DedupGroup],
    texts: Mapping[int, str],
    threshold: float,
    request_id: str | None,
    payload_hash: str,
    without_file: WithoutFile,
    limits: Limits,
) -> DedupReport:
    """Merge each group's members that are still live and hold the text they were found similar
    by (``texts``: an update since may have made one unlike the others), in one write transaction
    (a request id seen before answers its first result instead); the caches then drop the merged
    rows."""
    with keyed_write(store, request_id) as txn:
        if request_id:
            prior = _prior_dedup(txn, request_id, payload_hash, threshold, without_file, store)
            if prior is not None:
                return prior
        applied: list[DedupGroup] = []
        now = time.time()
        _, epoch_before = txn.index_state()
        for group in groups:
            rows = txn.memories_by_ids([group.keep, *group.duplicates], with_details=False)
            as_found = {
                i
                for i, r in rows.items()
                if not (r.forgotten or r.merged_into or r.superseded_by) and r.body == texts[i]
            }
            if group.keep not in as_found:
                continue  # a forget, an update or another merge got there first
            members = tuple(d for d in _lasting(group, rows).duplicates if d in as_found)
            if not members:
                continue
            txn.merge_memories(group.keep, members, at=now)
            applied.append(DedupGroup(group.keep, members))
        txn.add_counters({"merged": sum(len(g.duplicates) for g in applied)})
        report = DedupReport(applied, True, threshold)
        if request_id:
            result = [[g.keep, list(g.duplicates)] for g in applied]
            txn.save_request(request_id, "dedup", payload_hash, json.dumps(result))
            keep_requests_within_quota(txn, limits)
        _, epoch_after = txn.index_state()
    if applied:  # the caches drop the merged rows rather than reloading the tenant's vectors and postings
        merged = [d for g in applied for d in g.duplicates]
        drop_vectors(store, merged, from_epoch=epoch_before, to_epoch=epoch_after)
        drop_texts(store, merged, from_epoch=epoch_before, to_epoch=epoch_after)
    return report


def _lasting(group: DedupGroup, rows: Mapping[int, MemoryRow]) -> DedupGroup:
    """The group without the duplicates that would outlive its kept memory: the kept one's expiry
    erases what was merged into it (docs/expiry.md), so one expiring later, or never, stays."""
    ends = rows[group.keep].expires_at
    if ends is None:
        return group
    lasting = {i for i, r in rows.items() if r.expires_at is not None and r.expires_at <= ends}
    return DedupGroup(group.keep, tuple(d for d in group.duplicates if d in lasting))


def _prior_dedup(
    txn: ReadTxn,
    request_id: str,
    payload_hash: str,
    threshold: float,
    without_file: WithoutFile,
    store: TenantStore | None = None,
) -> DedupReport | None:
    """A merge's first result for ``request_id``: in the tenant file, with ``store`` (in a
    ``keyed_write``) in its inbox too, then among the calls that found the tenant without a file."""
    if store is None:
        prior = replayed_result(txn, request_id, "dedup", payload_hash)
    else:
        prior = replayed_anywhere(store, txn, request_id, "dedup", payload_hash)
    prior = prior or without_file(request_id, "dedup", payload_hash)
    return None if prior is None else _report(prior, threshold)


def _report(result_json: str, threshold: float) -> DedupReport:
    """The report of a merge kept with its request id."""
    groups = [DedupGroup(int(keep), tuple(int(d) for d in dups)) for keep, dups in json.loads(result_json)]
    return DedupReport(groups, True, threshold)
