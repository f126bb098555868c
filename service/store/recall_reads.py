"""The queries recall and the engine's caches of a tenant file read: full-text search with FTS5's
own lengths, the rows past what a cache holds (vectors, indexed text, thread places), the file's
state a cache compares itself with, and the dates and thread neighbours of candidates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mnemosyne.store.bookkeeping import FORGET_EPOCH_META, BookkeepingReads
from mnemosyne.store.fts_stats import TextHits, fts5_average_length, fts5_row_lengths
from mnemosyne.store.memory_reads import live_filter
from mnemosyne.store.memory_rows import indexed_text
from mnemosyne.store.metadata_index import holding


class RecallReads(BookkeepingReads):
    """What ranking reads; valid inside one transaction (read or write)."""

    def dates(self, ids: Sequence[int]) -> tuple[list[tuple[int, str]], list[tuple[int, int]]]:
        """Of ``ids``, in one statement: (memory id, normalized date) of their ``date`` facts, and
        (memory id, occurred_at in unix microseconds) of those that have one."""
        if not ids:
            return [], []
        marks = ",".join("?" * len(ids))
        facts: list[tuple[int, str]] = []
        occurred: list[tuple[int, int]] = []
        for memory_id, normalized, occurred_at in self.connection.execute(
            f"SELECT memory_id, normalized, NULL FROM facts WHERE memory_id IN ({marks}) AND kind = 'date' "
            f"UNION ALL SELECT id, NULL, occurred_at FROM memories WHERE id IN ({marks}) AND occurred_at IS NOT NULL",
            (*ids, *ids),
        ):
            if occurred_at is None:
                facts.append((memory_id, normalized))
            else:
                occurred.append((memory_id, occurred_at))
        return facts, occurred

    def thread_neighbours(self, ids: Sequence[int]) -> list[tuple[int, int]]:
        """(memory id, neighbour id) for each of ``ids`` that has a thread: the live memories just
        before and just after it in thread order (position, then id). Two index seeks per memory
        (memories_thread), whatever the thread's length."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        live = "n.thread_id = c.thread_id AND n.forgotten_at IS NULL AND n.merged_into IS NULL"
        rows = self.connection.execute(
            "SELECT c.id, "
            f"(SELECT n.id FROM memories n WHERE {live} AND (n.thread_position, n.id) < (c.thread_position, c.id) "
            "ORDER BY n.thread_position DESC, n.id DESC LIMIT 1), "
            f"(SELECT n.id FROM memories n WHERE {live} AND (n.thread_position, n.id) > (c.thread_position, c.id) "
            "ORDER BY n.thread_position, n.id LIMIT 1) "
            f"FROM memories c WHERE c.id IN ({marks}) AND c.thread_id IS NOT NULL",
            tuple(ids),
        )
        return [(memory_id, n) for memory_id, before, after in rows for n in (before, after) if n is not None]

    def filter_ids(self, scopes: Sequence[str], metadata_equals: dict[str, str]) -> np.ndarray:
        """The ids (ascending) a filtered recall may return: memories in any of ``scopes`` (all
        when empty) whose metadata holds every pair, one statement each: a scope's and an
        indexed key's read that index's entries only (memories_scope, the key's expression index),
        no memory's row, so a forgotten memory may be among them by its scope (a forget keeps it):
        recall's candidates come from the vector cache and the postings, which hold none."""
        parts = [holding(key, value) for key, value in sorted(metadata_equals.items())]
        if scopes:
            parts.append((f"SELECT id FROM memories WHERE scope IN ({', '.join('?' * len(scopes))})", tuple(scopes)))
        ids: np.ndarray | None = None
        for select, params in parts:
            # One string of ids, parsed by numpy: a row per id costs several times as much.
            joined = self._one(f"SELECT group_concat(id) FROM ({select})", params)
            found = np.sort(np.fromstring(joined or "", dtype=np.int64, sep=","))
            ids = found if ids is None else np.intersect1d(ids, found, assume_unique=True)
        return np.zeros(0, dtype=np.int64) if ids is None else ids

    def fts_search(self, match: str, *, limit: int, scopes: Sequence[str], metadata_equals: dict[str, str]) -> TextHits:
        """The best ``limit`` rows by FTS5's bm25 for an already-safe FTS5 expression, with each
        row's length and the index's mean length (FTS5's own token counts, read in the same
        statement from its ``docsize`` table and averages record), so recall can re-weigh length."""
        if scopes or metadata_equals:
            where, params = live_filter("m", scopes, metadata_equals)
            best = (
                "SELECT f.rowid AS id, bm25(memories_fts) AS r FROM memories_fts f JOIN memories m ON m.id = f.rowid "
                f"WHERE memories_fts MATCH ? AND {where} ORDER BY r LIMIT ?"
            )
            args: list[Any] = [match, *params, limit]
        else:
            best = "SELECT rowid AS id, bm25(memories_fts) AS r FROM memories_fts WHERE memories_fts MATCH ? ORDER BY r LIMIT ?"
            args = [match, limit]
        # Lengths are looked up for the ``limit`` best rows only (primary-key lookups); the
        # averages record (rowid 1 of %_data) by an uncorrelated subquery, once per statement.
        rows = self.connection.execute(
            "SELECT h.id, -h.r, d.sz, (SELECT block FROM memories_fts_data WHERE id = 1) "
            f"FROM ({best}) h LEFT JOIN memories_fts_docsize d ON d.id = h.id ORDER BY h.r",
            args,
        ).fetchall()
        if not rows:
            return TextHits([], [], [], 0.0)
        ids, relevance, sizes, averages = zip(*rows)
        return TextHits(list(ids), list(relevance), fts5_row_lengths(list(sizes)), fts5_average_length(averages[0]))

    def index_state(self) -> tuple[int, int]:
        """(highest memory id, forget epoch): what the vector cache compares itself with."""
        high = self._one("SELECT seq FROM sqlite_sequence WHERE name = 'memories'") or 0
        epoch = int(self.meta(FORGET_EPOCH_META, "0") or 0)
        return high, epoch

    def embeddings_after(self, after_id: int, up_to_id: int) -> list[tuple[int, str, bytes]]:
        """(id, scope, vector) of live memories with after_id < id <= up_to_id, in id order."""
        return list(
            self.connection.execute(
                "SELECT e.memory_id, m.scope, e.vector FROM embeddings e JOIN memories m ON m.id = e.memory_id "
                "WHERE e.memory_id > ? AND e.memory_id <= ? AND m.forgotten_at IS NULL ORDER BY e.memory_id",
                (after_id, up_to_id),
            )
        )

    def fulltext_rows_after(self, after_id: int, up_to_id: int, *, limit: int) -> list[tuple[int, str]]:
        """(id, indexed text) of the first ``limit`` rows of the full-text index with
        after_id < id <= up_to_id (the live, unmerged memories), in id order."""
        return [
            (memory_id, indexed_text(body, index_words))
            for memory_id, body, index_words in self.connection.execute(
                "SELECT id, body, index_words FROM memories WHERE id > ? AND id <= ? AND forgotten_at IS NULL "
                "AND merged_into IS NULL ORDER BY id LIMIT ?",
                (after_id, up_to_id, limit),
            )
        ]

    def bodies(self, memory_ids: Sequence[int]) -> dict[int, str]:
        """The text of each of ``memory_ids`` that is live and unmerged, by id."""
        marks = ",".join("?" * len(memory_ids))
        query = f"SELECT id, body FROM memories WHERE id IN ({marks}) AND forgotten_at IS NULL AND merged_into IS NULL"
        return {memory_id: body for memory_id, body in self.connection.execute(query, tuple(memory_ids))}

    def indexed_texts(self, memory_ids: Sequence[int]) -> dict[int, str]:
        """The indexed text of each of ``memory_ids`` that is live and unmerged, by id."""
        marks = ",".join("?" * len(memory_ids))
        return {
            memory_id: indexed_text(body, index_words)
            for memory_id, body, index_words in self.connection.execute(
                f"SELECT id, body, index_words FROM memories WHERE id IN ({marks}) AND forgotten_at IS NULL "
                "AND merged_into IS NULL",
                tuple(memory_ids),
            )
        }

    def thread_places_after(self, after_id: int, up_to_id: int) -> list[tuple[int, str | None, int, str | None]]:
        """(id, thread id, thread position, speaker) of the rows ``embeddings_after`` returns, alike."""
        return list(
            self.connection.execute(
                "SELECT m.id, m.thread_id, coalesce(m.thread_position, 0), m.speaker FROM embeddings e "
                "JOIN memories m ON m.id = e.memory_id "
                "WHERE e.memory_id > ? AND e.memory_id <= ? AND m.forgotten_at IS NULL ORDER BY e.memory_id",
                (after_id, up_to_id),
            )
        )
