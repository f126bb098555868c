"""The queries that feed the audit chain's verification (store/ledger_verify.py ``verify``): the chain
itself, and every memory and record with the hashes of what is actually stored."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from mnemosyne.store import ledger
from mnemosyne.store.ledger_verify import LedgerRow, StoredMemory, StoredRecord, Verdict, verify
from mnemosyne.store.record_reads import RecordReads
from mnemosyne.store.schema import forgotten_columns


@dataclass(frozen=True)
class _StoredParts:
    """What every memory of the file holds beside its row, read in one statement per table."""

    facts: dict[int, list[tuple[str, str, str]]]
    triples: dict[int, list[tuple[str, str, str]]]
    embeddings: dict[int, bytes]
    keys: dict[int, bytes]
    versioned: set[int]  # memories with earlier versions

    def memory(
        self,
        memory_id: int,
        scope: str,
        body: str,
        metadata_json: str,
        fingerprint: str | None,
        forgotten_at: float | None,
        merged_into: int | None,
        superseded_by: int | None,
        row_cleared: bool,
    ) -> StoredMemory:
        """The memory with digests recomputed from its row (``row_cleared``: the row holds nothing
        a forget clears) and these parts."""
        my_facts, my_triples = self.facts.get(memory_id, []), self.triples.get(memory_id, [])
        vector = self.embeddings.get(memory_id)
        key = self.keys.get(memory_id)
        forgotten = forgotten_at is not None
        return StoredMemory(
            memory_id=memory_id,
            forgotten=forgotten,
            digest=ledger.MemoryDigest.of(
                scope=scope,
                body=body,
                metadata_json=metadata_json,
                facts=my_facts,
                triples=my_triples,
                embedding=vector if vector is not None else b"",
                fingerprint=fingerprint or "",
                key=key,
            ),
            leftovers=forgotten
            and bool(
                not row_cleared
                or my_facts
                or my_triples
                or vector is not None
                or key is not None
                or memory_id in self.versioned
            ),
            merged_into=merged_into or 0,
            superseded_by=superseded_by or 0,
            keyed=key is not None,
            embedding_absent=vector is None,
        )


class AuditReads(RecordReads):
    """What the audit compares; valid inside one transaction (read or write)."""

    def audit(self) -> Verdict:
        """The audit chain recomputed and every memory, record and generation checked against it."""
        return verify(
            self.ledger_rows(),
            self.stored_memories(),
            records=self.stored_records(),
            generations=self.scope_generations(),
        )

    def ledger_rows(self) -> Iterator[LedgerRow]:
        for seq, entry, digest in self.connection.execute("SELECT seq, entry, hash FROM ledger ORDER BY seq"):
            yield LedgerRow(seq, entry, digest)

    def stored_memories(self) -> Iterator[StoredMemory]:
        """Every memory row with digests recomputed from what is actually stored."""
        parts = self._stored_parts()
        cleared = forgotten_columns(self.connection)  # what a forgotten memory's row must hold no more
        is_cleared = " AND ".join(f"{name} IS ?" for name, _ in cleared)
        for row in self.connection.execute(
            "SELECT id, scope, body, metadata, fingerprint, forgotten_at, merged_into, superseded_by, "
            f"{is_cleared} FROM memories ORDER BY id",
            [value for _, value in cleared],
        ):
            yield parts.memory(*row)

    def _stored_parts(self) -> _StoredParts:
        facts: dict[int, list[tuple[str, str, str]]] = {}
        for memory_id, kind, value, normalized in self.connection.execute(
            "SELECT memory_id, kind, value, normalized FROM facts ORDER BY memory_id, ord"
        ):
            facts.setdefault(memory_id, []).append((kind, value, normalized))
        triples: dict[int, list[tuple[str, str, str]]] = {}
        for memory_id, subject, predicate, obj in self.connection.execute(
            "SELECT memory_id, subject, predicate, object FROM triples ORDER BY memory_id, ord"
        ):
            triples.setdefault(memory_id, []).append((subject, predicate, obj))
        return _StoredParts(
            facts=facts,
            triples=triples,
            embeddings=dict(self.connection.execute("SELECT memory_id, vector FROM embeddings")),
            keys=dict(self.connection.execute("SELECT memory_id, key FROM memory_keys")),
            versioned={r[0] for r in self.connection.execute("SELECT DISTINCT memory_id FROM memory_versions")},
        )

    def stored_records(self) -> Iterator[StoredRecord]:
        """Every record with the hash of what is actually stored, for verification."""
        for scope, key, content, seq in self.connection.execute(
            "SELECT scope, key, content, ledger_seq FROM records ORDER BY scope, key"
        ):
            yield StoredRecord(scope, key, ledger.sha256_hex(content), seq)
