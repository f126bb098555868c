"""A stored memory's every column reaches its row (store/memory_reads.py) and its value
(engine/memories.py) under its own name: both are made by position, in field order, so a column
out of place would hand one field another's value. Every field is given a value no other holds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import apsw

from mnemosyne.engine.engine import Engine
from mnemosyne.engine.memories import memory_from_row
from mnemosyne.engine.types import Memory, RetainItem, ThreadRef
from mnemosyne.store.memory_rows import MemoryRow

TENANT = "fields"
# Distinct values for the columns a retain does not set, so no two fields can be swapped unseen.
SET_AFTER = {
    "merged_into": 7001,
    "superseded_by": 7002,
    "superseded_at": 7003.25,
    "updated_at": 7004.5,
    "forgotten_at": 7005.75,
    "acceptance": 7006,
    "expires_at": 7007.125,
}


def _rows(engine: Engine, ids: list[int]) -> dict[int, MemoryRow]:
    with engine.pool.tenant(TENANT, create=False) as store:
        assert store is not None
        with store.read() as txn:
            return txn.memories_by_ids(ids)


def test_every_column_reaches_its_field(engine: Engine, tmp_path: Path) -> None:
    changed, plain = (
        o.memory_id
        for o in engine.retain_batch(
            TENANT,
            [
                RetainItem(
                    "Carol adopted a dog called Rex",
                    scope="workspace/pets",
                    metadata={"source": "chat"},
                    occurred_at=1_683_554_160_500_000,
                    thread=ThreadRef("talk-1", 4),
                    speaker="Carol",
                ),
                RetainItem("A note without anything else"),
            ],
        )
    )
    connection = apsw.Connection(str(tmp_path / "data" / "tenants" / f"{TENANT}.sqlite"))
    with connection:
        columns = ", ".join(f"{name} = ?" for name in SET_AFTER)
        connection.execute(f"UPDATE memories SET {columns} WHERE id = ?", (*SET_AFTER.values(), changed))
    connection.close()

    rows = _rows(engine, [changed, plain])
    row = rows[changed]
    assert (row.id, row.scope, row.body, row.metadata) == (
        changed,
        "workspace/pets",
        "Carol adopted a dog called Rex",
        {"source": "chat"},
    )
    assert (row.occurred_at, row.thread_id, row.thread_position, row.speaker) == (
        1_683_554_160_500_000,
        "talk-1",
        4,
        "Carol",
    )
    assert {name: getattr(row, name) for name in SET_AFTER} == SET_AFTER
    assert row.forgotten is True and row.created_at > 0 and row.created_at not in SET_AFTER.values()

    untouched = rows[plain]
    assert untouched.forgotten is False and untouched.forgotten_at == 0.0
    assert (untouched.merged_into, untouched.superseded_by, untouched.superseded_at, untouched.updated_at) == (
        0,
        0,
        0.0,
        0.0,
    )
    assert (untouched.thread_id, untouched.speaker, untouched.expires_at, untouched.occurred_at) == (
        None,
        None,
        None,
        None,
    )

    row.facts.append(("kind", "value", "normalized"))
    row.triples.append(("Carol", "has", "Rex"))
    memory = memory_from_row(row)
    named = {field.name: getattr(memory, field.name) for field in dataclasses.fields(Memory)}
    assert named == {
        "id": row.id,
        "scope": row.scope,
        "text": row.body,
        "metadata": row.metadata,
        "created_at": row.created_at,
        "facts": row.facts,
        "triples": row.triples,
        "forgotten": row.forgotten,
        "superseded_by": row.superseded_by,
        "superseded_at": row.superseded_at,
        "merged_into": row.merged_into,
        "occurred_at": row.occurred_at,
        "thread": ThreadRef("talk-1", 4),
        "updated_at": row.updated_at,
        "speaker": row.speaker,
        "forgotten_at": row.forgotten_at,
        "expires_at": row.expires_at,
    }
