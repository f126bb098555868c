"""What every transaction class of the store runs its statements with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

import apsw

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    R = TypeVar("R", bound=DataclassInstance)
else:
    R = TypeVar("R")


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

    def _records(self, record: type[R], sql: str, params: Sequence[Any] = ()) -> list[R]:
        """Rows as ``record`` values, each column given to the field of its name: ``sql`` is what
        follows ``SELECT <the record's fields>`` (``FROM ... WHERE ...``)."""
        names = [f.name for f in fields(record)]
        rows = self.connection.execute(f"SELECT {', '.join(names)} {sql}", params)
        return [record(**dict(zip(names, row))) for row in rows]

    def find_request(self, request_id: str) -> tuple[str, str, str] | None:
        """(method, payload hash, result JSON) stored for a request id, if any: the tenant file's
        ``requests`` table and the inbox's have these columns alike."""
        row = self.connection.execute(
            "SELECT method, payload_hash, result FROM requests WHERE request_id = ?", (request_id,)
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2])
