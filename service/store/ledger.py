"""The audit ledger: an append-only SHA-256 chain, one per tenant file.

Entry ``n`` stores ``hash_n = SHA-256(hash_{n-1} ‖ canonical_entry_n)`` with ``hash_0`` 64 zeros.
Entries hold hashes of content, never the text, so forgetting a memory erases its text while the
chain stays verifiable. Every mutation appends its entry in the same transaction as the mutation,
so a chain and the data it describes can only be torn by editing the file.

A memory's hashes are keyed (HMAC-SHA256) with a random key of its own, kept in the tenant file
(``memory_keys``) while the memory lives and destroyed when it is forgotten: a plain SHA-256 of a
short text confirms a guess of it for ever, a keyed one only while the text itself is still there.
Entries of memories retained before keys existed (schema version 5 and older) say nothing of a
key and hold plain SHA-256 hashes; they stay as they are (rewriting them would break the chain).

The chain is unkeyed and lives in the same file: it catches torn writes and stray edits, not
someone able to rewrite the whole file. ``head_hash`` exists so an operator can record it elsewhere.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GENESIS_HASH = "0" * 64
# The field of a retain entry whose hashes are keyed with the memory's own key.
KEYED_FIELD = "digests"
KEYED_VALUE = "hmac-sha256"
MEMORY_KEY_BYTES = 32


# What ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` builds on
# every call, built once (the same bytes; several calls per retained memory).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """One byte-exact JSON form for hashing: sorted keys, no spaces, UTF-8 text kept as is."""
    if not value and type(value) in (dict, list):  # most metadata, facts and triples are empty
        return "{}" if type(value) is dict else "[]"
    return _CANONICAL.encode(value)


def sha256_hex(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def chain_hash(previous_hash: str, entry_json: str) -> str:
    return sha256_hex(previous_hash.encode("ascii") + entry_json.encode("utf-8"))


_EMPTY_LIST_SHA = sha256_hex("[]")
_EMPTY_OBJECT_SHA = sha256_hex("{}")


def keyed_hex(key: bytes, data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _digester(key: bytes | None) -> Callable[[str | bytes], str]:
    return sha256_hex if key is None else lambda data: keyed_hex(key, data)


def facts_digest(facts: Sequence[tuple[str, str, str]], key: bytes | None = None) -> str:
    # Tuples encode as JSON arrays, like lists; most memories have no facts.
    if key is not None:
        return keyed_hex(key, canonical_json(list(facts)))
    return sha256_hex(canonical_json(list(facts))) if facts else _EMPTY_LIST_SHA


def triples_digest(triples: Sequence[tuple[str, str, str]], key: bytes | None = None) -> str:
    if key is not None:
        return keyed_hex(key, canonical_json(list(triples)))
    return sha256_hex(canonical_json(list(triples))) if triples else _EMPTY_LIST_SHA


@dataclass(frozen=True)
class MemoryDigest:
    """What the ledger remembers of one retained memory: hashes of every stored part (keyed with
    the memory's own key when it has one). The scope stays plain: it is not erased by a forget."""

    scope: str
    body: str
    metadata: str
    facts: str
    triples: str
    embedding: str
    fingerprint: str

    @classmethod
    def of(
        cls,
        *,
        scope: str,
        body: str,
        metadata_json: str,
        facts: Sequence[tuple[str, str, str]],
        triples: Sequence[tuple[str, str, str]],
        embedding: bytes,
        fingerprint: str,
        key: bytes | None = None,
    ) -> MemoryDigest:
        digest = _digester(key)
        if key is None:
            metadata = _EMPTY_OBJECT_SHA if metadata_json == "{}" else sha256_hex(metadata_json)
        else:
            metadata = digest(metadata_json)
        return cls(
            scope=scope,
            body=digest(body),
            metadata=metadata,
            facts=facts_digest(facts, key),
            triples=triples_digest(triples, key),
            embedding=digest(embedding),
            # The fingerprint is itself a hash of the text: kept plain, it would confirm a guess.
            fingerprint=fingerprint if key is None else digest(fingerprint),
        )

    def as_entry_fields(self) -> dict[str, str]:
        return {
            "scope": self.scope,
            "body": self.body,
            "metadata": self.metadata,
            "facts": self.facts,
            "triples": self.triples,
            "embedding": self.embedding,
            "fingerprint": self.fingerprint,
        }

    def differences(self, other: MemoryDigest) -> list[str]:
        """Names of the parts that differ, e.g. ["body", "facts"]."""
        mine, theirs = self.as_entry_fields(), other.as_entry_fields()
        return [name for name in mine if mine[name] != theirs[name]]


@dataclass(frozen=True)
class LedgerRow:
    seq: int
    entry: str
    hash: str


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
    """
    problems: list[Problem] = []
    expected: dict[int, _Expected] = {}
    retain_seqs: list[tuple[int, int]] = []  # (memory_id, seq) in chain order
    replay = _RecordReplay()
    previous = GENESIS_HASH
    checked = 0
    last_seq = 0
    for row in ledger:
        checked += 1
        if row.seq != last_seq + 1:
            problems.append(
                Problem(last_seq + 1, 0, "CHAIN_GAP", f"ledger entries {last_seq + 1}..{row.seq - 1} are missing")
            )
        last_seq = row.seq
        if chain_hash(previous, row.entry) != row.hash:
            problems.append(Problem(row.seq, 0, "CHAIN_BROKEN", f"entry {row.seq} does not hash to its stored hash"))
        previous = row.hash
        try:
            entry = json.loads(row.entry)
        except ValueError:
            problems.append(Problem(row.seq, 0, "ENTRY_UNREADABLE", f"entry {row.seq} is not JSON"))
            continue
        op = entry.get("op")
        if op == "records":
            problems.extend(replay.apply(row.seq, entry))
            continue
        memory_id = int(entry.get("memory_id") or 0)
        if op == "retain":
            fields = {k: str(entry.get(k, "")) for k in MemoryDigest.__dataclass_fields__}
            expected[memory_id] = _Expected(
                retain_seq=row.seq, digest=MemoryDigest(**fields), keyed=entry.get(KEYED_FIELD) == KEYED_VALUE
            )
            retain_seqs.append((memory_id, row.seq))
        elif op == "update":
            # UpdateMemory replaced the memory's content: from here on it must match these digests.
            want = expected.get(memory_id)
            if want is None or want.forget_seq or want.merge_seq:
                problems.append(
                    Problem(
                        row.seq,
                        memory_id,
                        "UPDATE_UNKNOWN",
                        f"entry {row.seq} updates memory {memory_id}, which was not live then",
                    )
                )
                continue
            fields = {k: str(entry.get(k, "")) for k in MemoryDigest.__dataclass_fields__}
            want.retain_seq, want.digest = row.seq, MemoryDigest(**fields)
            want.keyed = entry.get(KEYED_FIELD) == KEYED_VALUE
            want.supersede_seq = want.superseded_by = 0  # its superseded facts went with the old content
        elif op == "forget":
            if memory_id in expected:
                expected[memory_id].forget_seq = row.seq
            else:
                problems.append(
                    Problem(
                        row.seq,
                        memory_id,
                        "FORGET_UNKNOWN",
                        f"entry {row.seq} forgets memory {memory_id}, which was never retained",
                    )
                )
        elif op == "merge":
            for merged_id in entry.get("merged") or []:
                want = expected.get(int(merged_id))
                if want is None:
                    problems.append(
                        Problem(
                            row.seq,
                            int(merged_id),
                            "MERGE_UNKNOWN",
                            f"entry {row.seq} merges memory {merged_id}, which was never retained",
                        )
                    )
                    continue
                want.merge_seq, want.merged_into = row.seq, memory_id
        elif op == "supersede":
            if memory_id in expected:
                expected[memory_id].supersede_seq = row.seq
                expected[memory_id].superseded_by = int(entry.get("by") or 0)
            else:
                problems.append(
                    Problem(
                        row.seq,
                        memory_id,
                        "SUPERSEDE_UNKNOWN",
                        f"entry {row.seq} supersedes memory {memory_id}, which was never retained",
                    )
                )

    # A later merge of the kept memory re-points the earlier ones (see merge_memories): follow the
    # chain to the memory that was never merged itself (a merged memory is never a merge target).
    for want in expected.values():
        hops = 0
        while want.merged_into and hops < len(expected):
            nxt = expected.get(want.merged_into)
            if nxt is None or not nxt.merged_into:
                break
            want.merged_into = nxt.merged_into
            hops += 1
    retain_seqs.sort()
    seen: set[int] = set()
    for memory in memories:
        seen.add(memory.memory_id)
        want = expected.get(memory.memory_id)
        if want is None:
            seq = next((s for mid, s in retain_seqs if mid > memory.memory_id), last_seq + 1)
            problems.append(
                Problem(seq, memory.memory_id, "UNRECORDED_MEMORY", f"memory {memory.memory_id} has no ledger entry")
            )
            continue
        if want.forget_seq:
            if not memory.forgotten or memory.leftovers:
                problems.append(
                    Problem(
                        want.forget_seq,
                        memory.memory_id,
                        "FORGET_NOT_APPLIED",
                        f"memory {memory.memory_id} was forgotten at entry {want.forget_seq} but still holds content",
                    )
                )
            continue
        if memory.forgotten:
            problems.append(
                Problem(
                    want.retain_seq,
                    memory.memory_id,
                    "FORGET_UNRECORDED",
                    f"memory {memory.memory_id} is erased but the ledger never forgot it",
                )
            )
            continue
        if memory.superseded_by != want.superseded_by:
            problems.append(
                Problem(
                    want.supersede_seq or want.retain_seq,
                    memory.memory_id,
                    "SUPERSEDE_MISMATCH",
                    f"memory {memory.memory_id} is superseded by {memory.superseded_by or 'nothing'} but the "
                    f"ledger says {want.superseded_by or 'nothing'}",
                )
            )
        if memory.merged_into != want.merged_into:
            problems.append(
                Problem(
                    want.merge_seq or want.retain_seq,
                    memory.memory_id,
                    "MERGE_NOT_APPLIED" if want.merge_seq else "MERGE_UNRECORDED",
                    f"memory {memory.memory_id} is merged into {memory.merged_into or 'nothing'} but the "
                    f"ledger says {want.merged_into or 'nothing'}",
                )
            )
            continue
        if want.keyed and not memory.keyed:
            problems.append(
                Problem(
                    want.retain_seq,
                    memory.memory_id,
                    "KEY_MISSING",
                    f"memory {memory.memory_id} is not forgotten but its key is gone, so its content cannot be checked",
                )
            )
            continue
        differing = want.digest.differences(memory.digest)
        if want.merge_seq:
            # A merged memory keeps every part except its embedding.
            differing = [name for name in differing if name != "embedding"]
            if not memory.embedding_absent:
                differing.append("embedding")
        if differing:
            problems.append(
                Problem(
                    want.retain_seq,
                    memory.memory_id,
                    "CONTENT_MISMATCH",
                    f"memory {memory.memory_id} differs from its ledger entry in: {', '.join(differing)}",
                )
            )
    for memory_id, want in expected.items():
        if memory_id not in seen:
            problems.append(
                Problem(
                    want.retain_seq,
                    memory_id,
                    "MEMORY_MISSING",
                    f"memory {memory_id} is in the ledger but not in the file",
                )
            )

    problems.extend(replay.compare(records, generations or {}, last_seq))
    problems.sort(key=lambda p: (p.ledger_seq, p.memory_id))
    first = problems[0].ledger_seq if problems else 0
    return Verdict(
        valid=not problems,
        first_broken_at=first,
        checked=checked,
        head_hash=previous,
        problems=problems[:max_problems],
    )


class _RecordReplay:
    """The record state and scope generations that the ledger's "records" entries describe."""

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

    def compare(self, stored: Iterable[StoredRecord], generations: Mapping[str, int], last_seq: int) -> list[Problem]:
        problems = []
        seen: set[tuple[str, str]] = set()
        for record in stored:
            where = (record.scope, record.key)
            seen.add(where)
            want = self.records.get(where)
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
        for where, (_digest, seq) in self.records.items():
            if where not in seen:
                problems.append(
                    Problem(
                        seq,
                        0,
                        "RECORD_MISSING",
                        f"record {where[1]!r} of {where[0]} is in the ledger but not in the file",
                    )
                )
        for scope in sorted(set(generations) | set(self.generations)):
            want_generation = self.generations.get(scope)
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
