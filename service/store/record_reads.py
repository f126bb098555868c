"""The queries that read records and their generations (host-owned generations: docs/host-generations.md),
applied consolidation receipts, and the threads a session consolidation works through."""

from __future__ import annotations

from mnemosyne.store.bookkeeping import BookkeepingReads


class RecordReads(BookkeepingReads):
    """Records, scopes and consolidation state; valid inside one transaction (read or write)."""

    def scope_generation(self, scope: str) -> int | None:
        """The scope's generation, or None for a scope whose records were never written."""
        generation = self._one("SELECT generation FROM scopes WHERE scope = ?", (scope,))
        return None if generation is None else int(generation)

    def scope_records(self, scope: str, *, after_key: str | None = None, limit: int = -1) -> list[tuple[str, str]]:
        """(key, content) of a scope's records by key: every one, or ``limit`` after ``after_key``."""
        return list(
            self.connection.execute(
                "SELECT key, content FROM records WHERE scope = ? AND (? IS NULL OR key > ?) ORDER BY key LIMIT ?",
                (scope, after_key, after_key, limit),
            )
        )

    def record_keys(self, scope: str) -> list[str]:
        return [r[0] for r in self.connection.execute("SELECT key FROM records WHERE scope = ? ORDER BY key", (scope,))]

    def record(self, scope: str, key: str) -> str | None:
        content: str | None = self._one("SELECT content FROM records WHERE scope = ? AND key = ?", (scope, key))
        return content

    def find_receipt(self, receipt_id: str) -> tuple[str, str, str] | None:
        """(scope, payload_hash, result_json) of an applied consolidation receipt, if any."""
        row = self.connection.execute(
            "SELECT scope, payload_hash, result FROM receipts WHERE receipt_id = ?", (receipt_id,)
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def scope_generations(self) -> dict[str, int]:
        return dict(self.connection.execute("SELECT scope, generation FROM scopes"))

    def scope_record_counts(self) -> dict[str, int]:
        """How many records each scope that has any holds."""
        return dict(self.connection.execute("SELECT scope, COUNT(*) FROM records GROUP BY scope"))

    def threads_to_consolidate(self, *, idle_before: float, limit: int) -> list[str]:
        """Ids of threads whose newest memory was committed before ``idle_before`` and is newer
        than their last completed consolidation (``consolidated_threads``), by id. The newest
        memory of each thread comes from the thread index alone; only those newer than their mark
        are looked up."""
        return [
            r[0]
            for r in self.connection.execute(
                "SELECT t.thread_id FROM (SELECT thread_id, max(id) AS newest FROM memories "
                "WHERE thread_id IS NOT NULL GROUP BY thread_id) t "
                "LEFT JOIN consolidated_threads c ON c.thread_id = t.thread_id "
                "JOIN memories m ON m.id = t.newest "
                "WHERE t.newest > coalesce(c.newest_id, 0) AND m.created_at < ? ORDER BY t.thread_id LIMIT ?",
                (idle_before, limit),
            )
        ]

    def thread_newest_id(self, thread_id: str) -> int:
        """The id of the thread's newest memory, forgotten or not (0 for none)."""
        return int(self._one("SELECT coalesce(max(id), 0) FROM memories WHERE thread_id = ?", (thread_id,)))

    def journaled_proposal(self, receipt_id: str) -> tuple[str, str, int] | None:
        """(section, consolidator, model calls) journaled for a receipt not yet applied."""
        row = self.connection.execute(
            "SELECT section, consolidator, model_calls FROM consolidation_journal WHERE receipt_id = ?", (receipt_id,)
        ).fetchone()
        return None if row is None else (row[0], row[1], int(row[2]))
