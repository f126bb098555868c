"""The audit ledger's verification (``verify``): the chain recomputed, then what it describes
compared with what the tenant file holds, both ways. Each check is a function of its own: the
chain; the entries themselves (each names a memory it can apply to; records entries advance their
scope's generation by one); memories (each stored one has its entries, and every retained one is
in the file); forgotten memories (erased, and with no leftovers); supersessions; merges; content;
records; generations. The file's side is read by store/audit_reads.py."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from mnemosyne.store.ledger import GENESIS_HASH, KEYED_FIELD, KEYED_VALUE, MemoryDigest, chain_hash


@dataclass(frozen=True)
class LedgerRow:
    seq: int
    entry: object  # TEXT columns, but a file edited behind the server's back may hold any value
    hash: object


@dataclass(frozen=True)
class StoredMemory:
    """One memory row as found in the file, with digests recomputed from what is stored."""

    memory_id: int
    forgotten: bool
    digest: MemoryDigest
    leftovers: bool  # a forgotten memory that still holds content: a column a forget clears, facts, key...
    merged_into: int = 0  # the memory a Dedup merge retired this one into (0: not merged)
    superseded_by: int = 0  # the newer memory that superseded this one (0: current)
    keyed: bool = False  # its key is in the file (digest computed with it)
    embedding_absent: bool = False  # it has no embedding row (a merged or forgotten memory)


@dataclass(frozen=True)
class StoredRecord:
    """One record as found in the file: the hash of its stored content and its ledger entry."""

    scope: str
    key: str
    content: str  # SHA-256 of the stored content
    ledger_seq: int


@dataclass(frozen=True)
class Problem:
    ledger_seq: int
    memory_id: int
    kind: str
    detail: str


@dataclass(frozen=True)
class Verdict:
    valid: bool
    first_broken_at: int
    checked: int
    head_hash: str
    problems: list[Problem]


@dataclass
class _Expected:
    retain_seq: int
    digest: MemoryDigest
    keyed: bool = False
    forget_seq: int = 0
    merge_seq: int = 0
    merged_into: int = 0
    supersede_seq: int = 0
    superseded_by: int = 0


def verify(
    ledger: Iterable[LedgerRow],
    memories: Iterable[StoredMemory],
    *,
    records: Iterable[StoredRecord] = (),
    generations: Mapping[str, int] | None = None,
    max_problems: int = 100,
) -> Verdict:
    """Recompute the chain, then check completeness both ways.

    Every live memory must match its retain entry part by part; every entry's memory must exist
    (and be erased if a forget entry follows); a memory with no entry is attributed to the position
    its entry should have had: the first retain entry of a later memory id, or the head + 1.
    A ``merge`` entry retires the listed memories into ``memory_id``: each must name it as
    ``merged_into`` and have lost its embedding, its other parts unchanged. A ``supersede`` entry
    must match the memory's ``superseded_by``. ``records`` entries are replayed into the record
    state they describe: every stored record must equal (by content hash) the last entry that wrote
    it, every record the entries leave must exist, and each scope's stored generation must be the
    one its last entry published (entries of one scope advance it by exactly one).

    Each check appends its problems in the order it meets them; the verdict lists them by ledger
    position, then memory id.
    """
    problems: list[Problem] = []
    chain = _Chain(problems)
    memory_state = _MemoryReplay(problems)
    record_state = _RecordReplay()
    for row in ledger:
        entry = chain.follow(row)
        if entry is None:
            continue
        try:
            if entry.get("op") == "records":
                problems.extend(record_state.apply(row.seq, entry))
            else:
                memory_state.apply(row.seq, entry)
        except (ValueError, TypeError, AttributeError, KeyError):  # a hand-edited file holds anything
            problems.append(
                Problem(row.seq, 0, "ENTRY_UNREADABLE", f"entry {row.seq} is not an entry this server wrote")
            )
    memory_state.follow_merges()
    problems.extend(_check_memories(memories, memory_state, chain.last_seq))
    problems.extend(_check_records(records, record_state, chain.last_seq))
    problems.extend(_check_generations(generations or {}, record_state, chain.last_seq))
    problems.sort(key=lambda p: (p.ledger_seq, p.memory_id))
    first = problems[0].ledger_seq if problems else 0
    return Verdict(
        valid=not problems,
        first_broken_at=first,
        checked=chain.checked,
        head_hash=chain.head_hash,
        problems=problems[:max_problems],
    )


class _Chain:
    """The chain itself: each entry follows the one before it (no sequence number missing) and
    hashes, with the hash before it, to its stored hash."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        self.head_hash = GENESIS_HASH
        self.checked = 0
        self.last_seq = 0

    def follow(self, row: LedgerRow) -> Any:
        """Check ``row`` against the entry before it; its entry, or None when it is not JSON."""
        self.checked += 1
        if row.seq != self.last_seq + 1:
            self.problems.append(
                Problem(
                    self.last_seq + 1, 0, "CHAIN_GAP", f"ledger entries {self.last_seq + 1}..{row.seq - 1} are missing"
                )
            )
        self.last_seq = row.seq
        # SQLite keeps what a stray writer stored, whatever the column's type: text is all we hash.
        entry = row.entry if isinstance(row.entry, str) else ""
        stored_hash = row.hash if isinstance(row.hash, str) and row.hash.isascii() else ""
        if chain_hash(self.head_hash, entry) != stored_hash:
            self.problems.append(
                Problem(row.seq, 0, "CHAIN_BROKEN", f"entry {row.seq} does not hash to its stored hash")
            )
        self.head_hash = stored_hash
        try:
            parsed = json.loads(entry)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            self.problems.append(Problem(row.seq, 0, "ENTRY_UNREADABLE", f"entry {row.seq} is not a JSON object"))
            return None
        return parsed


class _MemoryReplay:
    """The memory state that the ledger's memory entries describe (retain, update, forget, merge,
    supersede), and a check of the entries themselves: each one after a retain names a memory
    that was retained (and, for an update, still live)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        self.expected: dict[int, _Expected] = {}
        self.retain_seqs: list[tuple[int, int]] = []  # (memory_id, seq) in chain order
        self.reembedded: dict[int, str] = {}  # a re-embedding's next vectors' digests, until its switch

    def apply(self, seq: int, entry: dict[str, Any]) -> None:
        memory_id = int(entry.get("memory_id") or 0)
        op = entry.get("op")
        if op == "retain":
            self.expected[memory_id] = _Expected(
                retain_seq=seq, digest=_entry_digest(entry), keyed=entry.get(KEYED_FIELD) == KEYED_VALUE
            )
            self.retain_seqs.append((memory_id, seq))
        elif op == "update":
            self._update(seq, memory_id, entry)
        elif op in ("forget", "expire"):  # an expired memory's erasure is a forget (engine/expiry.py)
            if memory_id in self.expected:
                self.expected[memory_id].forget_seq = seq
            else:
                self._unknown(seq, memory_id, "FORGET_UNKNOWN", f"forgets memory {memory_id}, which was never retained")
        elif op == "merge":
            for merged_id in entry.get("merged") or []:
                want = self.expected.get(int(merged_id))
                if want is None:
                    self._unknown(
                        seq, int(merged_id), "MERGE_UNKNOWN", f"merges memory {merged_id}, which was never retained"
                    )
                    continue
                want.merge_seq, want.merged_into = seq, memory_id
        elif op in ("reembed", "reembed_reset", "reembed_switch"):
            self._reembed(op, entry)
        elif op == "supersede":
            if memory_id in self.expected:
                self.expected[memory_id].supersede_seq = seq
                self.expected[memory_id].superseded_by = int(entry.get("by") or 0)
            else:
                self._unknown(
                    seq, memory_id, "SUPERSEDE_UNKNOWN", f"supersedes memory {memory_id}, which was never retained"
                )

    def _update(self, seq: int, memory_id: int, entry: dict[str, Any]) -> None:
        """UpdateMemory replaced the memory's content: from here on it must match these digests."""
        want = self.expected.get(memory_id)
        if want is None or want.forget_seq or want.merge_seq:
            self._unknown(seq, memory_id, "UPDATE_UNKNOWN", f"updates memory {memory_id}, which was not live then")
            return
        want.retain_seq, want.digest = seq, _entry_digest(entry)
        want.keyed = entry.get(KEYED_FIELD) == KEYED_VALUE
        want.supersede_seq = want.superseded_by = 0  # its superseded facts went with the old content

    def _reembed(self, op: str, entry: dict[str, Any]) -> None:
        """A re-embedding (engine/reembed.py): each chunk's entry names its memories' next vectors,
        which count from its switch on (a reset drops them: the move went to another embedder)."""
        if op == "reembed":
            self.reembedded.update({int(i): str(d) for i, d in (entry.get("embeddings") or {}).items()})
            return
        if op == "reembed_switch":
            for memory_id, embedding in self.reembedded.items():
                want = self.expected.get(memory_id)
                if want is not None and not want.forget_seq and not want.merge_seq:
                    want.digest = replace(want.digest, embedding=embedding)
        self.reembedded.clear()

    def _unknown(self, seq: int, memory_id: int, kind: str, what: str) -> None:
        """Entry ``seq`` names a memory it cannot apply to: ``what`` it does, and why it cannot."""
        self.problems.append(Problem(seq, memory_id, kind, f"entry {seq} {what}"))

    def follow_merges(self) -> None:
        """A later merge of the kept memory re-points the earlier ones (see merge_memories): follow
        the chain to the memory that was never merged itself (a merged memory is never a merge target)."""
        for want in self.expected.values():
            hops = 0
            while want.merged_into and hops < len(self.expected):
                nxt = self.expected.get(want.merged_into)
                if nxt is None or not nxt.merged_into:
                    break
                want.merged_into = nxt.merged_into
                hops += 1


def _entry_digest(entry: dict[str, Any]) -> MemoryDigest:
    """The digests a retain or update entry records."""
    return MemoryDigest(**{k: str(entry.get(k, "")) for k in MemoryDigest.__dataclass_fields__})


def _check_memories(memories: Iterable[StoredMemory], state: _MemoryReplay, last_seq: int) -> list[Problem]:
    """Completeness of memories, both ways: every stored memory has its retain entry (one without
    is attributed to where its entry should have been: the first retain entry of a later memory id,
    or the head + 1) and matches what its entries say; every memory the ledger retained is in the file."""
    problems: list[Problem] = []
    retain_seqs = sorted(state.retain_seqs)
    seen: set[int] = set()
    for memory in memories:
        seen.add(memory.memory_id)
        want = state.expected.get(memory.memory_id)
        if want is None:
            seq = next((s for mid, s in retain_seqs if mid > memory.memory_id), last_seq + 1)
            problems.append(
                Problem(seq, memory.memory_id, "UNRECORDED_MEMORY", f"memory {memory.memory_id} has no ledger entry")
            )
            continue
        problems.extend(_check_memory(memory, want))
    for memory_id, want in state.expected.items():
        if memory_id not in seen:
            problems.append(
                Problem(
                    want.retain_seq,
                    memory_id,
                    "MEMORY_MISSING",
                    f"memory {memory_id} is in the ledger but not in the file",
                )
            )
    return problems


def _check_memory(memory: StoredMemory, want: _Expected) -> list[Problem]:
    """One stored memory against its entries: forgotten as the ledger says, then (when live) its
    supersession, its merge and its content."""
    if want.forget_seq or memory.forgotten:
        return _check_forgotten(memory, want)
    problems = _check_supersession(memory, want)
    merge = _check_merge(memory, want)
    if merge:
        return problems + merge
    return problems + _check_content(memory, want)


def _check_forgotten(memory: StoredMemory, want: _Expected) -> list[Problem]:
    """A memory the ledger forgot is erased and holds nothing more (no leftovers: a column a forget
    clears, facts, triples, embedding, key, earlier versions); a memory erased in the file was
    forgotten by the ledger."""
    if want.forget_seq:
        if not memory.forgotten or memory.leftovers:
            return [
                Problem(
                    want.forget_seq,
                    memory.memory_id,
                    "FORGET_NOT_APPLIED",
                    f"memory {memory.memory_id} was forgotten at entry {want.forget_seq} but still holds content",
                )
            ]
        return []
    return [
        Problem(
            want.retain_seq,
            memory.memory_id,
            "FORGET_UNRECORDED",
            f"memory {memory.memory_id} is erased but the ledger never forgot it",
        )
    ]


def _check_supersession(memory: StoredMemory, want: _Expected) -> list[Problem]:
    """The memory that superseded this one is the one the ledger's last supersede entry names."""
    if memory.superseded_by == want.superseded_by:
        return []
    return [
        Problem(
            want.supersede_seq or want.retain_seq,
            memory.memory_id,
            "SUPERSEDE_MISMATCH",
            f"memory {memory.memory_id} is superseded by {memory.superseded_by or 'nothing'} but the "
            f"ledger says {want.superseded_by or 'nothing'}",
        )
    ]


def _check_merge(memory: StoredMemory, want: _Expected) -> list[Problem]:
    """The memory this one is merged into is the one the ledger's merges lead to (or none)."""
    if memory.merged_into == want.merged_into:
        return []
    return [
        Problem(
            want.merge_seq or want.retain_seq,
            memory.memory_id,
            "MERGE_NOT_APPLIED" if want.merge_seq else "MERGE_UNRECORDED",
            f"memory {memory.memory_id} is merged into {memory.merged_into or 'nothing'} but the "
            f"ledger says {want.merged_into or 'nothing'}",
        )
    ]


def _check_content(memory: StoredMemory, want: _Expected) -> list[Problem]:
    """A live memory's stored parts match, hash by hash, the digests of its last retain or update
    entry (keyed with its key, which must still be there); a merged memory has lost only its
    embedding."""
    if want.keyed and not memory.keyed:
        return [
            Problem(
                want.retain_seq,
                memory.memory_id,
                "KEY_MISSING",
                f"memory {memory.memory_id} is not forgotten but its key is gone, so its content cannot be checked",
            )
        ]
    differing = want.digest.differences(memory.digest)
    if want.merge_seq:
        # A merged memory keeps every part except its embedding.
        differing = [name for name in differing if name != "embedding"]
        if not memory.embedding_absent:
            differing.append("embedding")
    if not differing:
        return []
    return [
        Problem(
            want.retain_seq,
            memory.memory_id,
            "CONTENT_MISMATCH",
            f"memory {memory.memory_id} differs from its ledger entry in: {', '.join(differing)}",
        )
    ]


class _RecordReplay:
    """The record state and scope generations that the ledger's "records" entries describe, and a
    check of the entries themselves: readable, and each advancing its scope's generation by one."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], tuple[str, int]] = {}  # (scope, key) -> (hash, seq)
        self.generations: dict[str, tuple[int, int]] = {}  # scope -> (generation, seq)

    def apply(self, seq: int, entry: dict[str, Any]) -> list[Problem]:
        problems = []
        scope = str(entry.get("scope", ""))
        try:
            generation = int(entry["generation"])
            changes = list(entry.get("changes") or ())
        except (KeyError, TypeError, ValueError):
            return [Problem(seq, 0, "ENTRY_UNREADABLE", f"entry {seq} is not a readable records entry")]
        previous = self.generations.get(scope)
        if previous is not None and generation != previous[0] + 1:
            problems.append(
                Problem(
                    seq,
                    0,
                    "GENERATION_GAP",
                    f"entry {seq} publishes a generation of {scope} that does not follow the previous entry's by one",
                )
            )
        self.generations[scope] = (generation, seq)
        for change in changes:
            key = str(change.get("key", ""))
            if change.get("op") == "put":
                self.records[(scope, key)] = (str(change.get("content", "")), seq)
            else:
                self.records.pop((scope, key), None)
        return problems


def _check_records(stored: Iterable[StoredRecord], state: _RecordReplay, last_seq: int) -> list[Problem]:
    """Completeness of records, both ways: every stored record equals (by content hash and entry)
    the last entry that wrote it (one without is attributed to the head + 1), and every record the
    entries leave is in the file."""
    problems = []
    seen: set[tuple[str, str]] = set()
    for record in stored:
        where = (record.scope, record.key)
        seen.add(where)
        want = state.records.get(where)
        if want is None:
            problems.append(
                Problem(
                    last_seq + 1,
                    0,
                    "UNRECORDED_RECORD",
                    f"record {record.key!r} of {record.scope} has no ledger entry",
                )
            )
        elif want[0] != record.content or want[1] != record.ledger_seq:
            problems.append(
                Problem(
                    want[1],
                    0,
                    "RECORD_MISMATCH",
                    f"record {record.key!r} of {record.scope} differs from its ledger entry {want[1]}",
                )
            )
    for where, (_digest, seq) in state.records.items():
        if where not in seen:
            problems.append(
                Problem(
                    seq,
                    0,
                    "RECORD_MISSING",
                    f"record {where[1]!r} of {where[0]} is in the ledger but not in the file",
                )
            )
    return problems


def _check_generations(generations: Mapping[str, int], state: _RecordReplay, last_seq: int) -> list[Problem]:
    """Each scope's stored generation is the one its last records entry published (a scope with no
    entry has none)."""
    problems = []
    for scope in sorted(set(generations) | set(state.generations)):
        want_generation = state.generations.get(scope)
        if want_generation is None or generations.get(scope) != want_generation[0]:
            problems.append(
                Problem(
                    want_generation[1] if want_generation else last_seq + 1,
                    0,
                    "GENERATION_UNRECORDED",
                    f"the stored generation of {scope} is not the one its last ledger entry published",
                )
            )
    return problems
