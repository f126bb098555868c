"""The statements that write memories: a retain's rows (body, facts, triples, embedding, full-text
row, key, ledger entry) for a batch at once, an update in place that keeps the earlier version,
a Dedup merge, and the supersessions of conflicting facts. Each runs inside the caller's write
transaction and appends its ledger entry in it."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from mnemosyne.store import ledger
from mnemosyne.store.memory_rows import NewMemory, indexed_text
from mnemosyne.store.revisions import MERGED, RETAINED, SUPERSEDED, UPDATED, RevisionWrites

# What an update replaces of a memory (its thread too: the consolidation proposals that go with it).
_REPLACED_SQL = (
    "SELECT body, metadata, coalesce(updated_at, created_at), index_words, thread_id FROM memories WHERE id = ?"
)


class Rival(NamedTuple):
    """A triple conflicting with a new one (``MemoryWrites.rival_triples``)."""

    memory_id: int
    obj: str
    acceptance: int  # its memory's position (0: before every position)
    superseded_by: int  # the memory that superseded this fact of it (0: current)
    superseder_acceptance: int


class MemoryWrites(RevisionWrites):
    """Memories written; valid only inside ``TenantStore.write()``."""

    def insert_memories(self, memories: Sequence[NewMemory]) -> list[int]:
        """Body, facts, triples, embedding, full-text row and ledger entry of each memory, in
        order, with one statement per table (not per memory): the same ids (the AUTOINCREMENT ones
        SQLite would give), rows and ledger entries (one ``retain`` entry per memory, chained in
        order) as inserting them one by one. All or nothing with the enclosing transaction; the
        caller isolates a failure with a savepoint (a failure leaves a partial insert behind).
        Raises ``apsw.ConstraintError`` on a duplicate fingerprint."""
        if not memories:
            return []
        # The ids SQLite would assign one by one: past the largest ever used (AUTOINCREMENT).
        first_id = 1 + self._one(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memories'), 0), "
            "coalesce((SELECT max(id) FROM memories), 0))"
        )
        ids = list(range(first_id, first_id + len(memories)))
        head_seq, head_hash = self.ledger_head()
        self._insert_rows(ids, memories, first_seq=head_seq + 1)
        self._insert_facts(ids, memories)
        self._fault_points("after_facts", memories)
        self._insert_triples(ids, memories)
        self._fault_points("after_triples", memories)
        self.connection.executemany(
            "INSERT INTO embeddings(memory_id, vector) VALUES(?, ?)", [(i, m.embedding) for i, m in zip(ids, memories)]
        )
        self._fault_points("after_embedding", memories)
        self.connection.executemany(
            "INSERT INTO memories_fts(rowid, body) VALUES(?, ?)",
            [(i, indexed_text(m.fts_text, m.index_words)) for i, m in zip(ids, memories)],
        )
        self._fault_points("after_fts", memories)
        keys = [os.urandom(ledger.MEMORY_KEY_BYTES) for _ in ids]
        self.connection.executemany("INSERT INTO memory_keys(memory_id, key) VALUES(?, ?)", list(zip(ids, keys)))
        self._append_retains(ids, memories, keys, head_seq, head_hash)
        self.add_memory_revisions(
            [(memory_id, head_seq + 1 + i) for i, memory_id in enumerate(ids)],
            kind=RETAINED,
            changers=[m.changer for m in memories],
        )
        self._fault_points("after_ledger", memories)
        return ids

    def _insert_rows(self, ids: Sequence[int], memories: Sequence[NewMemory], *, first_seq: int) -> None:
        """The memories' rows. Each names its ledger entry, whose sequence number is known before
        either exists (entries are appended in this order, from ``first_seq``), so no UPDATE
        afterwards."""
        self.connection.executemany(
            "INSERT INTO memories(id, scope, body, metadata, fingerprint, created_at, ledger_seq, occurred_at, "
            "thread_id, thread_position, index_words, speaker, acceptance, expires_at) "
            "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    memory_id,
                    m.scope,
                    m.body,
                    m.metadata_json,
                    m.fingerprint,
                    m.created_at,
                    first_seq + i,
                    m.occurred_at,
                    m.thread_id,
                    m.thread_position,
                    m.index_words or None,
                    m.speaker,
                    m.acceptance,
                    m.expires_at,
                )
                for i, (memory_id, m) in enumerate(zip(ids, memories))
            ],
        )
        self._fault_points("after_body", memories)

    def _insert_facts(self, ids: Sequence[int], memories: Sequence[NewMemory]) -> None:
        self.connection.executemany(
            "INSERT INTO facts(memory_id, ord, kind, value, normalized) VALUES(?, ?, ?, ?, ?)",
            [(memory_id, i, *fact) for memory_id, m in zip(ids, memories) for i, fact in enumerate(m.facts)],
        )

    def _insert_triples(self, ids: Sequence[int], memories: Sequence[NewMemory]) -> None:
        self.connection.executemany(
            "INSERT INTO triples(memory_id, ord, subject, predicate, object) VALUES(?, ?, ?, ?, ?)",
            [(memory_id, i, *triple) for memory_id, m in zip(ids, memories) for i, triple in enumerate(m.triples)],
        )

    def _append_retains(
        self, ids: Sequence[int], memories: Sequence[NewMemory], keys: Sequence[bytes], head_seq: int, head_hash: str
    ) -> None:
        """One ``retain`` ledger entry per memory, chained in order after the head (``head_seq``,
        ``head_hash``), each with the digests of its content keyed with its key."""
        now = time.time()
        rows = []
        for i, (memory_id, m) in enumerate(zip(ids, memories)):
            digest = m.digest(keys[i])
            seq = head_seq + 1 + i
            entry_json = ledger.canonical_json(
                {
                    "op": "retain",
                    "memory_id": memory_id,
                    **digest.as_entry_fields(),
                    ledger.KEYED_FIELD: ledger.KEYED_VALUE,
                    "seq": seq,
                }
            )
            head_hash = ledger.chain_hash(head_hash, entry_json)
            rows.append((seq, now, entry_json, head_hash))
        self.connection.executemany("INSERT INTO ledger(seq, at, entry, hash) VALUES(?, ?, ?, ?)", rows)

    def _fault_points(self, name: str, memories: Sequence[NewMemory]) -> None:
        if self._faults:  # test seams only; nothing to check in production
            for m in memories:
                self._fault_point(name, m.body)

    def update_memory(
        self, memory_id: int, new: NewMemory, *, kind: str = UPDATED, changed: Sequence[str] = (), reverted_to: int = 0
    ) -> None:
        """Replace a live, unmerged memory's content under its id: the current body and metadata
        become its next ``memory_versions`` row, then body, metadata, fingerprint, facts, triples,
        embedding and full-text row are replaced and one ``update`` ledger entry (the new content's
        digests, keyed with the memory's own key) is appended. The facts it had that newer
        memories superseded went with the old content (its ``supersessions`` rows and mark); what
        its old content superseded in others stays recorded. The forget epoch advances (the
        vector cache takes the new vector in place, engine/index.py ``replace_vector``, or
        reloads); its expires_at becomes ``new.expires_at``; one revision of ``kind`` is added; its
        thread's consolidation proposals, which may quote the old content, go. All or nothing.
        ``apsw.ConstraintError``: another memory holds the new fingerprint."""
        c = self.connection
        row = c.execute(_REPLACED_SQL, (memory_id,)).fetchone()
        assert row is not None
        c.execute("DELETE FROM consolidation_journal WHERE thread_id = ?", (row[4],))  # none when NULL
        version = self.current_version(memory_id)  # the content it replaces becomes that version
        c.execute(
            "INSERT INTO memory_versions(memory_id, version, body, metadata, at) VALUES(?, ?, ?, ?, ?)",
            (memory_id, version, row[0], row[1], row[2]),
        )
        self._delete_fulltext([(memory_id, indexed_text(row[0], row[3]))])
        c.execute(
            "UPDATE memories SET body = ?, metadata = ?, fingerprint = ?, updated_at = ?, index_words = ?, "
            "superseded_by = NULL, superseded_at = NULL, acceptance = coalesce(?, acceptance), expires_at = ? WHERE id = ?",
            (
                new.body,
                new.metadata_json,
                new.fingerprint,
                new.created_at,
                new.index_words or None,
                new.acceptance,
                new.expires_at,
                memory_id,
            ),
        )
        self._fault_points("update_after_body", [new])
        c.execute("DELETE FROM facts WHERE memory_id = ?", (memory_id,))
        c.execute("DELETE FROM triples WHERE memory_id = ?", (memory_id,))
        c.execute("DELETE FROM supersessions WHERE memory_id = ?", (memory_id,))
        self._insert_facts([memory_id], [new])
        self._insert_triples([memory_id], [new])
        c.execute("UPDATE embeddings SET vector = ? WHERE memory_id = ?", (new.embedding, memory_id))
        c.execute(
            "INSERT INTO memories_fts(rowid, body) VALUES(?, ?)",
            (memory_id, indexed_text(new.fts_text, new.index_words)),
        )
        self._fault_points("update_after_fts", [new])
        key = self._one("SELECT key FROM memory_keys WHERE memory_id = ?", (memory_id,))
        digest = new.digest(key)
        fields: dict[str, Any] = {"op": "update", "memory_id": memory_id, **digest.as_entry_fields()}
        if key is not None:
            fields[ledger.KEYED_FIELD] = ledger.KEYED_VALUE
        seq = self.append_ledger(fields)
        self.add_memory_revisions(
            [(memory_id, seq)], kind=kind, changed=changed, version=version + 1, reverted_to=reverted_to
        )
        self._fault_points("update_after_ledger", [new])
        self.advance_forget_epoch()

    def set_expiry(self, memory_id: int, expires_at: float | None) -> None:
        """Give a live memory a new ``expires_at`` (None: never) with one ``expiry`` ledger entry
        and one revision; nothing else of it changes."""
        self.connection.execute("UPDATE memories SET expires_at = ? WHERE id = ?", (expires_at, memory_id))
        seq = self.append_ledger({"op": "expiry", "memory_id": memory_id, "expires_at": expires_at})
        self.add_memory_revisions([(memory_id, seq)], kind=UPDATED, changed=["expires_at"])

    def _delete_fulltext(self, rows: Sequence[tuple[int, str]]) -> None:
        """Remove (memory id, body) rows from the full-text index. The index is contentless with
        FTS5's 'secure-delete' on (schema.py, version 7): told the text it indexed, it rewrites
        the leaf pages holding that row's entries without them, and drops a term no other row
        holds, so the memory's terms leave the file now, at a cost in proportion to the memory,
        not to the index. The text must be the indexed one (``indexed_text``: the body and its index words):
        any other would corrupt the index's counts."""
        self.connection.executemany(
            "INSERT INTO memories_fts(memories_fts, rowid, body) VALUES('delete', ?, ?)", list(rows)
        )

    def merged_into_ids(self, memory_id: int) -> list[int]:
        """Memories Dedup merged into ``memory_id`` and not yet forgotten."""
        return [
            r[0]
            for r in self.connection.execute(
                "SELECT id FROM memories WHERE merged_into = ? AND forgotten_at IS NULL ORDER BY id", (memory_id,)
            )
        ]

    def merge_memories(self, keep_id: int, merged_ids: Sequence[int], *, at: float) -> None:
        """Retire ``merged_ids`` into ``keep_id``: keep their rows, bodies, facts and fingerprints
        (so their text is still known as a duplicate of the kept one), drop their embeddings and
        full-text rows (so no recall path finds them), append ONE ledger entry for the whole merge.
        The caller checked that every id is live and unmerged inside this transaction."""
        c = self.connection
        ids = list(merged_ids)
        marks = ",".join("?" * len(ids))
        self._delete_fulltext(
            [
                (int(i), indexed_text(str(b), w))
                for i, b, w in c.execute(f"SELECT id, body, index_words FROM memories WHERE id IN ({marks})", ids)
            ]
        )
        c.execute(f"DELETE FROM embeddings WHERE memory_id IN ({marks})", ids)
        c.execute(f"DELETE FROM reembed_vectors WHERE memory_id IN ({marks})", ids)
        c.execute(f"UPDATE memories SET merged_into = ?, merged_at = ? WHERE id IN ({marks})", [keep_id, at, *ids])
        # Memories merged earlier into one of these now point at the kept one, so a duplicate of
        # their text is reported against a live memory.
        c.execute(f"UPDATE memories SET merged_into = ? WHERE merged_into IN ({marks})", [keep_id, *ids])
        seq = self.append_ledger({"op": "merge", "memory_id": keep_id, "merged": ids})
        self.add_memory_revisions(
            [(i, seq) for i in ids], kind=MERGED, changed=["merged_into"], related_memory_id=keep_id
        )
        self.advance_forget_epoch()  # the vector cache reloads on a new epoch, dropping the merged rows

    def rival_triples(self, *, scope: str, memory_id: int, subject: str, predicate: str, obj: str) -> list[Rival]:
        """The triples of OTHER live memories in ``scope`` with the same subject and predicate but
        another object, each with its memory's acceptance position and, when that memory's
        (subject, predicate) is superseded already, the memory that superseded it and its
        position: what conflict adjudication compares (engine/conflicts.py)."""
        return [
            Rival(*row)
            for row in self.connection.execute(
                "SELECT t.memory_id, t.object, coalesce(m.acceptance, 0), coalesce(s.superseded_by, 0), "
                "coalesce(b.acceptance, 0) FROM triples t JOIN memories m ON m.id = t.memory_id "
                "LEFT JOIN supersessions s ON s.memory_id = t.memory_id AND s.subject = t.subject "
                "AND s.predicate = t.predicate LEFT JOIN memories b ON b.id = s.superseded_by "
                "WHERE t.subject = ? AND t.predicate = ? AND t.object <> ? AND t.memory_id <> ? "
                "AND m.scope = ? AND m.forgotten_at IS NULL AND m.merged_into IS NULL ORDER BY t.memory_id, t.ord",
                (subject, predicate, obj, memory_id, scope),
            )
        ]

    def repoint_supersession(
        self, *, memory_id: int, subject: str, predicate: str, by: int, new_obj: str, at: float
    ) -> None:
        """An earlier-accepted memory applied late replaces the later one that had superseded this
        fact: in acceptance order it came first."""
        self.connection.execute(
            "UPDATE supersessions SET superseded_by = ?, new_object = ?, at = ? "
            "WHERE memory_id = ? AND subject = ? AND predicate = ?",
            (by, new_obj, at, memory_id, subject, predicate),
        )

    def superseders(self, memory_id: int) -> dict[tuple[str, str], tuple[int, int]]:
        """{(subject, predicate): (the memory that superseded it, that memory's acceptance)} of a
        memory's superseded facts."""
        return {
            (r[0], r[1]): (r[2], r[3])
            for r in self.connection.execute(
                "SELECT s.subject, s.predicate, s.superseded_by, coalesce(b.acceptance, 0) FROM supersessions s "
                "LEFT JOIN memories b ON b.id = s.superseded_by WHERE s.memory_id = ?",
                (memory_id,),
            )
        }

    def record_supersession(
        self, *, memory_id: int, subject: str, predicate: str, obj: str, by: int, new_obj: str, at: float
    ) -> None:
        self.connection.execute(
            "INSERT OR IGNORE INTO supersessions(memory_id, subject, predicate, object, superseded_by, new_object, at) "
            "VALUES(?, ?, ?, ?, ?, ?, ?)",
            (memory_id, subject, predicate, obj, by, new_obj, at),
        )

    def mark_superseded(self, memory_id: int, *, by: int, at: float) -> None:
        """Mark a whole memory superseded (kept, never erased) with its own ledger entry."""
        self.connection.execute(
            "UPDATE memories SET superseded_by = ?, superseded_at = ? WHERE id = ?", (by, at, memory_id)
        )
        seq = self.append_ledger({"op": "supersede", "memory_id": memory_id, "by": by})
        self.add_memory_revisions([(memory_id, seq)], kind=SUPERSEDED, changed=["superseded_by"], related_memory_id=by)
