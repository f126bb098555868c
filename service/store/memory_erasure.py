"""A forget: everything a memory holds erased from the tenant file in the forget's own transaction,
its row and id kept (schema.py ``FORGET_KEEPS``, ``ERASURE``). What the WAL still holds of it goes
after the commit (``TenantStore.erase_traces``, marked by ``ERASURE_META`` until then)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from functools import cached_property

from mnemosyne.store.bookkeeping import ERASURE_META
from mnemosyne.store.memory_rows import indexed_text
from mnemosyne.store.memory_writes import MemoryWrites
from mnemosyne.store.schema import forgotten_columns

# What an operation-log row keeps of a fast write whose memory was forgotten.
ERASED_PAYLOAD = '{"erased":true}'


class MemoryErasure(MemoryWrites):
    """Memories forgotten; valid only inside ``TenantStore.write()``."""

    def forget_memory(self, memory_id: int, *, op: str = "forget") -> bool:
        """Erase everything the memory holds, keep its row and id. False if already forgotten.
        ``op``: the ledger entry's, "forget" or "expire" (the expiry sweep's erasure).

        The row keeps only the columns of ``schema.FORGET_KEEPS`` (id, scope, times, the ids of
        merges and supersessions); every other column is cleared (``forgotten_columns``). Gone too:
        its facts, triples, embedding, earlier versions, revisions, full-text entries, its key (so its ledger
        hashes confirm nothing), the operation-log rows that wrote it or were found duplicates of it
        (their payload, extraction and vector), its text in webhook deliveries, the supersession rows naming its triples, and its
        thread's consolidation proposals and, once no memory names the thread, its mark
        (schema.ERASURE says the same of every table). Deleted bytes are overwritten
        (``secure_delete``, connections.py) and the full-text index removes the memory's entries
        from its segments (``_delete_fulltext``); the WAL still holds the pages as they were until
        ``TenantStore.erase_traces``, which the caller runs (``ERASURE_META``)."""
        c = self.connection
        row = c.execute(
            "SELECT forgotten_at, merged_into, body, index_words, thread_id FROM memories WHERE id = ?", (memory_id,)
        ).fetchone()
        if row is None or row[0] is not None:
            return False
        if row[1] is None:  # a merged memory's full-text row went at its merge
            self._delete_fulltext([(memory_id, indexed_text(row[2], row[3]))])
        for table in (
            "facts",
            "triples",
            "embeddings",
            "reembed_vectors",
            "memory_keys",
            "memory_versions",
            "memory_revisions",
            "supersessions",
        ):
            c.execute(f"DELETE FROM {table} WHERE memory_id = ?", (memory_id,))
        assignments, blanks = self._forget_assignments
        c.execute(
            f"UPDATE memories SET {assignments}, forgotten_at = ? WHERE id = ?", (*blanks, time.time(), memory_id)
        )
        c.execute(  # the WHERE of the index oplog_result_memory (schema.py), or it is a scan of the log
            "UPDATE oplog SET payload = ?, extraction = NULL, embedding = NULL, fingerprint = NULL "
            "WHERE result IS NOT NULL AND json_valid(result) AND json_extract(result, '$.memory_id') = ?",
            (ERASED_PAYLOAD, memory_id),
        )
        c.execute("UPDATE supersessions SET new_object = '' WHERE superseded_by = ?", (memory_id,))
        # Its text in the webhook deliveries not yet sent (schema.py _V_WEBHOOKS; index webhook_outbox_text).
        c.execute("UPDATE webhook_outbox SET text = NULL WHERE memory_id = ? AND text IS NOT NULL", (memory_id,))
        thread_id = row[4]
        if thread_id is not None:
            # A consolidation proposed from its thread may quote it: the thread's proposals go (a
            # later consolidation proposes again from the memories left), and its mark once the
            # thread id is in no memory.
            c.execute("DELETE FROM consolidation_journal WHERE thread_id = ?", (thread_id,))
            c.execute(
                "DELETE FROM consolidated_threads WHERE thread_id = ? "
                "AND NOT EXISTS (SELECT 1 FROM memories WHERE thread_id = ?)",
                (thread_id, thread_id),
            )
        self.append_ledger({"op": op, "memory_id": memory_id})
        self.advance_forget_epoch()
        self.set_meta(ERASURE_META, "1")
        return True

    def forget_again(self, memories: Iterable[tuple[int, float]]) -> list[int]:
        """Forget, as ``forget_memory`` does, those of ``memories`` ((id, created_at) pairs kept
        outside the file: store/replicas.py ``forgotten``) that this file holds unforgotten — a
        copy of the tenant from before their forget (a restore). A memory of the same id created
        at another time is another tenant history's, and stays. Returns the ids forgotten."""
        again = []
        for memory_id, created_at in memories:
            row = self.connection.execute(
                "SELECT created_at FROM memories WHERE id = ? AND forgotten_at IS NULL", (memory_id,)
            ).fetchone()
            if row is not None and row[0] == created_at and self.forget_memory(memory_id):
                again.append(memory_id)
        return again

    @cached_property
    def _forget_assignments(self) -> tuple[str, list[str | None]]:
        """The SET clause clearing a forgotten memory's row (``forgotten_columns``), and its values:
        read once per transaction (a ForgetMemories forgets thousands in one)."""
        cleared = forgotten_columns(self.connection)
        return ", ".join(f"{name} = ?" for name, _ in cleared), [value for _, value in cleared]
