"""The queries that read memories: by id (with their facts and triples), by listing (id order or
thread order, filtered by scope and metadata), by content fingerprint, and their earlier versions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mnemosyne.store.bookkeeping import BookkeepingReads
from mnemosyne.store.memory_rows import MemoryRow, MemoryVersion, metadata_of
from mnemosyne.store.metadata_index import INDEXED_METADATA_KEYS, metadata_value, pair_clause

# Parameters per ``IN (...)`` list: far below SQLite's limit on bound variables.
_IN_CHUNK = 500


def metadata_clause(alias: str, key: str, value: str, params: list[Any]) -> str:
    """The clause of memories ``alias`` whose metadata holds ``key`` = ``value`` (appended to
    ``params``): by its expression index for an indexed key (``INDEXED_METADATA_KEYS``: our
    own constants in the path), else by the pairs table (``metadata_pairs``), both with bound
    parameters, so keys from clients never become JSON path syntax."""
    if key in INDEXED_METADATA_KEYS:
        params.append(value)
        return f"{metadata_value(f'{alias}.metadata', key)} = ?"
    params.extend((key, value))
    return pair_clause(f"{alias}.id")


def listing_filters(
    params: list[Any],
    scope: str | None,
    include_forgotten: bool,
    metadata_equals: dict[str, str] | None,
    unexpired_at: float | None = None,
) -> str:
    """The ``AND`` clauses of a listing of memories ``m`` (their values appended to ``params``);
    ``unexpired_at``: only memories not expired at that time (docs/expiry.md)."""
    sql = ""
    if scope:
        sql += " AND m.scope = ?"
        params.append(scope)
    if not include_forgotten:
        sql += " AND m.forgotten_at IS NULL"
    if unexpired_at is not None:
        sql += " AND (m.expires_at IS NULL OR m.expires_at > ?)"
        params.append(unexpired_at)
    for key, value in sorted((metadata_equals or {}).items()):
        sql += f" AND {metadata_clause('m', key, value, params)}"
    return sql


def live_filter(
    alias: str, scopes: Sequence[str], metadata_equals: dict[str, str], unexpired_at: float | None = None
) -> tuple[str, list[Any]]:
    """The ``WHERE`` of live memories ``alias`` in any of ``scopes`` (all when empty) with every pair of
    ``metadata_equals`` (and, with ``unexpired_at``, not expired then), and its values."""
    clauses = [f"{alias}.forgotten_at IS NULL"]
    params: list[Any] = []
    if unexpired_at is not None:
        clauses.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > ?)")
        params.append(unexpired_at)
    if scopes:
        clauses.append(f"{alias}.scope IN ({','.join('?' * len(scopes))})")
        params.extend(scopes)
    for key, value in sorted(metadata_equals.items()):
        clauses.append(metadata_clause(alias, key, value, params))
    return " AND ".join(clauses), params


class MemoryReads(BookkeepingReads):
    """Memories as stored; valid inside one transaction (read or write)."""

    def find_by_fingerprints(self, fingerprints: Sequence[str]) -> dict[str, int]:
        """{fingerprint: memory id} of the stored memories holding these contents; for a merged
        memory, the one it was merged into."""
        found: dict[str, int] = {}
        unique = list(dict.fromkeys(fingerprints))
        for start in range(0, len(unique), _IN_CHUNK):
            chunk = unique[start : start + _IN_CHUNK]
            found.update(
                self.connection.execute(
                    "SELECT fingerprint, coalesce(merged_into, id) FROM memories "
                    f"WHERE fingerprint IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
            )
        return found

    def fingerprints_of(self, ids: Sequence[int]) -> dict[str, int]:
        """{fingerprint: memory id} of these memories (those that have one: not forgotten)."""
        found: dict[str, int] = {}
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = list(ids[start : start + _IN_CHUNK])
            found.update(
                (row[0], row[1])
                for row in self.connection.execute(
                    f"SELECT fingerprint, id FROM memories WHERE id IN ({','.join('?' * len(chunk))}) "
                    "AND fingerprint IS NOT NULL",
                    chunk,
                )
            )
        return found

    def live_ids(self, ids: Sequence[int]) -> set[int]:
        """Of these memory ids, those neither forgotten nor merged into another."""
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        return {
            row[0]
            for row in self.connection.execute(
                f"SELECT id FROM memories WHERE id IN ({marks}) AND forgotten_at IS NULL AND COALESCE(merged_into, 0) = 0",
                tuple(ids),
            )
        }

    def memories_by_ids(self, ids: Sequence[int], *, with_details: bool = True) -> dict[int, MemoryRow]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows: dict[int, MemoryRow] = {}
        # The columns after forgotten_at come in MemoryRow's field order, passed by position: a
        # recall reads twenty rows, and keywords cost more than the rest of making one.
        for memory_id, scope, body, metadata, created_at, forgotten_at, *in_order in self.connection.execute(
            "SELECT id, scope, body, metadata, created_at, forgotten_at, coalesce(merged_into, 0), "
            "coalesce(superseded_by, 0), coalesce(superseded_at, 0.0), occurred_at, thread_id, thread_position, "
            "coalesce(updated_at, 0.0), speaker, coalesce(forgotten_at, 0.0), coalesce(acceptance, 0), expires_at "
            f"FROM memories WHERE id IN ({marks})",
            tuple(ids),
        ):
            forgotten = forgotten_at is not None
            rows[memory_id] = MemoryRow(
                memory_id, scope, body, metadata_of(metadata), created_at, forgotten, [], [], *in_order
            )
        if with_details:
            self.fill_details(list(rows.values()))
        return rows

    def fill_details(self, rows: Sequence[MemoryRow]) -> None:
        """Read the facts and triples of rows that ``memories_by_ids`` gave without them."""
        if not rows:
            return
        by_id = {r.id: r for r in rows}
        marks = ",".join("?" * len(by_id))
        for memory_id, kind, value, normalized in self.connection.execute(
            f"SELECT memory_id, kind, value, normalized FROM facts WHERE memory_id IN ({marks}) ORDER BY memory_id, ord",
            tuple(by_id),
        ):
            by_id[memory_id].facts.append((kind, value, normalized))
        for memory_id, subject, predicate, obj in self.connection.execute(
            f"SELECT memory_id, subject, predicate, object FROM triples WHERE memory_id IN ({marks}) ORDER BY memory_id, ord",
            tuple(by_id),
        ):
            by_id[memory_id].triples.append((subject, predicate, obj))

    def memory_versions(self, memory_id: int) -> list[MemoryVersion]:
        """The earlier versions of a memory, oldest first (none for one never updated)."""
        return [
            MemoryVersion(version, body, metadata_of(metadata), at)
            for version, body, metadata, at in self.connection.execute(
                "SELECT version, body, metadata, at FROM memory_versions WHERE memory_id = ? ORDER BY version",
                (memory_id,),
            )
        ]

    def list_memory_ids(
        self,
        *,
        scope: str | None,
        after_id: int,
        limit: int,
        include_forgotten: bool,
        newest_first: bool = False,
        metadata_equals: dict[str, str] | None = None,
        offset: int = 0,
        unexpired_at: float | None = None,
    ) -> list[int]:
        """Ids past ``after_id`` in the listing's order (ascending, or descending with
        ``newest_first``, where 0 means from the newest), with every pair of ``metadata_equals``."""
        if newest_first:
            sql = "SELECT id FROM memories m WHERE id < ?"
            params: list[Any] = [after_id or 2**63 - 1]
        else:
            sql = "SELECT id FROM memories m WHERE id > ?"
            params = [after_id]
        sql += listing_filters(params, scope, include_forgotten, metadata_equals, unexpired_at)
        sql += f" ORDER BY id {'DESC' if newest_first else 'ASC'} LIMIT ? OFFSET ?"
        params.extend((limit, offset))
        return [r[0] for r in self.connection.execute(sql, params)]

    def list_thread_ids(
        self,
        thread_id: str,
        *,
        scope: str | None,
        after: tuple[int, int] | None,
        limit: int,
        include_forgotten: bool,
        newest_first: bool = False,
        metadata_equals: dict[str, str] | None = None,
        unexpired_at: float | None = None,
    ) -> list[int]:
        """Ids of a thread's memories in thread order (position, then id; both descending with
        ``newest_first``), past the (position, id) ``after``: an index range (memories_thread);
        with every pair of ``metadata_equals``."""
        sql = "SELECT id FROM memories m WHERE thread_id = ?"
        params: list[Any] = [thread_id]
        if after is not None:
            sql += f" AND (thread_position, id) {'<' if newest_first else '>'} (?, ?)"
            params.extend(after)
        sql += listing_filters(params, scope, include_forgotten, metadata_equals, unexpired_at)
        order = "DESC" if newest_first else "ASC"
        sql += f" ORDER BY thread_position {order}, id {order} LIMIT ?"
        params.append(limit)
        return [r[0] for r in self.connection.execute(sql, params)]

    def count_filtered(self, metadata_equals: dict[str, str], unexpired_at: float | None = None) -> int:
        """How many live memories have every metadata pair (and are not expired at ``unexpired_at``)."""
        sql, params = live_filter("m", (), metadata_equals, unexpired_at)
        return int(self._one(f"SELECT count(*) FROM memories m WHERE {sql}", params) or 0)

    def filtered_ids(self, scopes: Sequence[str], metadata_equals: dict[str, str]) -> list[int]:
        """Ids of live memories in any of ``scopes`` (all when empty) with every metadata pair."""
        sql, params = live_filter("m", scopes, metadata_equals)
        return [r[0] for r in self.connection.execute(f"SELECT m.id FROM memories m WHERE {sql}", params)]

    def expiring(self, *, before: float, limit: int) -> list[int]:
        """Ids of memories not yet forgotten whose ``expires_at`` is before ``before``, soonest
        first (the partial index memories_expires)."""
        return [
            r[0]
            for r in self.connection.execute(
                "SELECT id FROM memories WHERE expires_at IS NOT NULL AND forgotten_at IS NULL AND expires_at < ? "
                "ORDER BY expires_at LIMIT ?",
                (before, limit),
            )
        ]

    def next_expiry(self) -> float | None:
        """The soonest ``expires_at`` of a memory not yet forgotten (None: none expires)."""
        value = self._one("SELECT min(expires_at) FROM memories WHERE expires_at IS NOT NULL AND forgotten_at IS NULL")
        return None if value is None else float(value)
