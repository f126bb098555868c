"""A re-embedding's rows (engine/reembed.py): the tenant's next vectors in ``reembed_vectors``,
beside its current ones in ``embeddings``, until one transaction switches them over. The rows
themselves are the progress: a memory with a row there is done, so a rerun after a crash goes on
from what was committed."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from mnemosyne.store import ledger
from mnemosyne.store.bookkeeping import BookkeepingReads, BookkeepingWrites

# The ``meta`` key naming the embedder ("<name>/<dim>") a re-embedding in progress moves to.
REEMBED_META = "reembed_to"


def text_crc(text: str) -> int:
    """What a next vector records of the text it was made from: an update since makes it stale."""
    return zlib.crc32(text.encode("utf-8"))


class ReembedReads(BookkeepingReads):
    def reembed_todo(self, limit: int) -> list[tuple[int, str]]:
        """(id, text) of up to ``limit`` memories with a current vector and no next one yet, by id."""
        return [
            (int(i), str(b))
            for i, b in self.connection.execute(
                "SELECT m.id, m.body FROM embeddings e JOIN memories m ON m.id = e.memory_id "
                "WHERE NOT EXISTS (SELECT 1 FROM reembed_vectors r WHERE r.memory_id = e.memory_id) "
                "ORDER BY e.memory_id LIMIT ?",
                (limit,),
            )
        ]

    def reembed_counts(self) -> tuple[int, int]:
        """(memories with a next vector, memories with a current vector)."""
        done, total = self._row(
            "SELECT (SELECT count(*) FROM reembed_vectors r JOIN embeddings e USING (memory_id)), "
            "(SELECT count(*) FROM embeddings)"
        )
        return int(done), int(total)


class ReembedWrites(ReembedReads, BookkeepingWrites):
    def put_reembedded(self, to: str, rows: Sequence[tuple[int, bytes, int]], *, newer: bool) -> int:
        """(memory id, next vector, CRC of its text) of one chunk, and ONE ledger entry naming each
        one's digest (keyed as its retain's were), which counts from the switch on. A memory
        forgotten or merged since its text was read is left out; so is, unless ``newer`` (made
        from the memory's text as this transaction sees it: a write's own, or the switch's), one
        that has a next vector: a write made it since its text was read (engine/reembed.py), from
        the text as it is now. Returns how many were stored."""
        c = self.connection
        live = [
            row
            for row in rows
            if self._one("SELECT 1 FROM embeddings WHERE memory_id = ?", (row[0],))
            and (newer or not self._one("SELECT 1 FROM reembed_vectors WHERE memory_id = ?", (row[0],)))
        ]
        c.executemany("INSERT OR REPLACE INTO reembed_vectors(memory_id, vector, body_crc) VALUES(?, ?, ?)", live)
        digests = {}
        for memory_id, vector, _crc in live:
            key = self._one("SELECT key FROM memory_keys WHERE memory_id = ?", (memory_id,))
            digests[str(memory_id)] = ledger.sha256_hex(vector) if key is None else ledger.keyed_hex(key, vector)
        if digests:
            self.append_ledger({"op": "reembed", "to": to, "embeddings": digests})
        return len(live)

    def drop_stale_reembedded(self) -> int:
        """Delete the next vectors whose memory's text changed since (an update): they are made
        again. Returns how many."""
        stale = [
            (int(i),)
            for i, body, crc in self.connection.execute(
                "SELECT r.memory_id, m.body, r.body_crc FROM reembed_vectors r JOIN memories m ON m.id = r.memory_id"
            )
            if text_crc(str(body)) != crc
        ]
        self.connection.executemany("DELETE FROM reembed_vectors WHERE memory_id = ?", stale)
        return len(stale)

    def switch_reembedded(self, *, from_: str, to: str) -> int:
        """Every current vector replaced by its next one (the caller checked that each has one),
        the next ones deleted, and the ledger's entry of the switch. The hot path's queued writes
        drop the vectors they were given (the old embedder's): they are embedded again. Returns
        how many vectors changed."""
        c = self.connection
        c.execute(
            "UPDATE embeddings SET vector = "
            "(SELECT r.vector FROM reembed_vectors r WHERE r.memory_id = embeddings.memory_id)"
        )
        moved = int(c.changes())
        c.execute("DELETE FROM reembed_vectors")
        c.execute("UPDATE oplog SET embedding = NULL WHERE status IN ('pending', 'running') AND embedding IS NOT NULL")
        self.append_ledger({"op": "reembed_switch", "from": from_, "to": to, "memories": moved})
        return moved

    def reset_reembedding(self, to: str) -> None:
        """Start a re-embedding to ``to`` afresh: an earlier one's next vectors (another embedder's)
        deleted, and the ledger told so."""
        if self._one("SELECT 1 FROM reembed_vectors LIMIT 1"):
            self.connection.execute("DELETE FROM reembed_vectors")
            self.append_ledger({"op": "reembed_reset", "to": to})
        self.set_meta(REEMBED_META, to)
