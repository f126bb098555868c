"""What every transaction class of the store runs its statements with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw


class Queries:
    """A transaction's statements on one connection (the caller opened the transaction)."""

    connection: apsw.Connection

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first column of the first row, None when there is no row."""
        row = self.connection.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _row(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
        """The one row of an aggregate (count, min, max: SQLite always returns it)."""
        row = self.connection.execute(sql, params).fetchone()
        assert row is not None, sql
        return tuple(row)
