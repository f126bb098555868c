"""A metadata filter by one of the keys the mem0 surface keeps its entities under (its user,
agent, app and run: store/metadata_index.py) is answered by that key's
expression index, with the same memories as reading every memory's metadata: through updates,
forgets and beside other keys; a file of the schema before the indexes gets them when it opens.
Recall's own read of a filter (``filter_ids``) finds the same memories from index entries only.
A real engine on real files, in this process, so the plans and the file can be looked at."""

from __future__ import annotations

import json
import random
from pathlib import Path

import apsw

from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.types import RetainItem
from mnemosyne.store.memory_reads import live_filter
from mnemosyne.store.metadata_index import INDEXED_METADATA_KEYS, METADATA_INDEXES
from mnemosyne.store.schema import MIGRATIONS, SCHEMA_VERSION
from mnemosyne.store.tenant_store import ReadTxn
from mnemosyne.transport.http.mem0_endpoints import ENTITY_FIELDS, ENTITY_PREFIX
from tests.test_erasure import UNDO_METADATA_PAIRS

TENANT = "filters"
USERS = [f"user-{n}" for n in range(8)]


def _scanned(txn: ReadTxn, metadata: dict[str, str]) -> set[int]:
    """The live memories holding every pair, each memory's metadata read (no index)."""
    return {
        memory_id
        for memory_id, held in txn.connection.execute(
            "SELECT id, metadata FROM memories WHERE forgotten_at IS NULL", ()
        )
        if all(json.loads(held).get(k) == v for k, v in metadata.items())
    }


def _plan(txn: ReadTxn, metadata: dict[str, str]) -> str:
    where, params = live_filter("m", [], metadata)
    return " ".join(
        row[3]
        for row in txn.connection.execute(f"EXPLAIN QUERY PLAN SELECT m.id FROM memories m WHERE {where}", params)
    )


def test_the_indexed_keys_are_the_mem0_surface_s() -> None:
    assert set(INDEXED_METADATA_KEYS) == {ENTITY_PREFIX + field for field in ENTITY_FIELDS}


def test_an_entity_filter_uses_its_index_and_finds_what_a_scan_finds(engine: Engine) -> None:
    rng = random.Random(3)
    ids = []
    for batch in range(3):
        items = [
            RetainItem(
                f"note {batch}-{n} about the garden",
                metadata={
                    **({"mem0.user_id": rng.choice(USERS)} if rng.random() < 0.9 else {}),
                    **({"mem0.agent_id": rng.choice(["planner", "coder"])} if rng.random() < 0.5 else {}),
                    **({"topic": rng.choice(["a", "b"])} if rng.random() < 0.5 else {}),
                    # A key that only looks like an indexed one, and a quote in a value.
                    **({"mem0.user_id2": "user-1", "quote": 'say "hi"'} if rng.random() < 0.1 else {}),
                },
            )
            for n in range(300)
        ]
        ids += [outcome.memory_id for outcome in engine.retain_batch(TENANT, items)]
    forgotten = set(rng.sample(ids, 60))
    for memory_id in forgotten:
        engine.memories.forget(TENANT, memory_id)
    for memory_id in rng.sample(sorted(set(ids) - forgotten), 30):
        engine.updates.update(TENANT, memory_id, metadata={"mem0.user_id": "user-moved"})
    for memory_id in rng.sample(sorted(set(ids) - forgotten), 30):
        engine.updates.update(TENANT, memory_id, metadata={"topic": "c", "quote": 'say "hi"'})
    filters = [
        {"mem0.user_id": "user-1"},
        {"mem0.user_id": "user-moved"},
        {"mem0.user_id": "user-1", "mem0.agent_id": "coder"},
        {"mem0.user_id": "user-2", "topic": "a"},
        {"mem0.run_id": "never"},
        {"mem0.user_id2": "user-1"},
        {"quote": 'say "hi"'},
        {"topic": "c"},
        {"topic": "c", "quote": 'say "hi"'},
        {"topic": "never"},
    ]
    with engine.pool.tenant(TENANT, create=False) as store:
        assert store is not None
        with store.read() as txn:
            for metadata in filters:
                expected = _scanned(txn, metadata)
                assert set(txn.filtered_ids([], metadata)) == expected, metadata
                assert txn.filter_ids([], metadata).tolist() == sorted(expected), metadata  # recall's
                plan = _plan(txn, metadata)
                indexed = [key for key in metadata if key in INDEXED_METADATA_KEYS]
                if indexed:
                    assert "USING INDEX memories_metadata_" in plan, (metadata, plan)
                else:  # a key of the caller's own: its pairs' entries
                    assert "memories_metadata_" not in plan and "metadata_pairs" in plan, (metadata, plan)
            assert len(txn.filtered_ids([], {"mem0.user_id": "user-moved"})) == 30
            assert len(txn.filtered_ids([], {"topic": "c"})) == 30
    # Recall and listing answer by the same filter.
    hits = engine.recall(TENANT, "garden note", k=50, metadata_equals={"mem0.user_id": "user-moved"}).hits
    assert hits and {h.memory.metadata["mem0.user_id"] for h in hits} == {"user-moved"}
    page = engine.memories.page(TENANT, metadata_equals={"mem0.user_id": "user-3"}, page_size=1000)
    assert page.memories and {m.metadata["mem0.user_id"] for m in page.memories} == {"user-3"}


def test_a_file_from_before_the_indexes_gets_them_and_its_pairs_when_it_opens(tmp_path: Path) -> None:
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", embedder="hashing"))
    items = [RetainItem(f"note {n}", metadata={"mem0.user_id": USERS[n % 3], "topic": "xyz"[n % 3]}) for n in range(50)]
    engine.retain_batch(TENANT, items)
    path = engine.pool.path_for(TENANT)
    engine.close()
    connection = apsw.Connection(str(path))
    for key in INDEXED_METADATA_KEYS:
        connection.execute(f"DROP INDEX memories_metadata_{key.replace('.', '_')}")
    connection.execute(UNDO_METADATA_PAIRS)
    connection.pragma("user_version", MIGRATIONS.index(METADATA_INDEXES))
    connection.close()
    reopened = Engine(EngineConfig(data_dir=tmp_path / "data", embedder="hashing"))
    try:
        assert len(reopened.memories.page(TENANT, metadata_equals={"mem0.user_id": USERS[1]}).memories) == 17
        by_topic = reopened.memories.page(TENANT, metadata_equals={"topic": "y"}).memories
        assert sorted(m.text for m in by_topic) == sorted(f"note {n}" for n in range(1, 50, 3))
        with reopened.pool.tenant(TENANT, create=False) as store:
            assert store is not None
            with store.read() as txn:
                names = {row[1] for row in txn.connection.execute("PRAGMA index_list(memories)")}
                assert {f"memories_metadata_{key.replace('.', '_')}" for key in INDEXED_METADATA_KEYS} <= names
                assert txn.connection.pragma("user_version") == SCHEMA_VERSION
                # Only the caller's own keys are pairs (the indexed ones have their indexes).
                assert txn.connection.execute("SELECT DISTINCT key FROM metadata_pairs").fetchall() == [("topic",)]
    finally:
        reopened.close()


def test_metadata_that_is_not_json_is_never_an_error(tmp_path: Path) -> None:
    """A damaged row (metadata that is not a JSON object) is a finding of verify: the index takes
    it as holding no entity, so writing it, filtering by an entity and rewriting it still work;
    reads show it without metadata, and it can be forgotten."""
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", embedder="hashing"))
    try:
        ids = [
            o.memory_id
            for o in engine.retain_batch(
                TENANT, [RetainItem(f"note {n}", metadata={"mem0.user_id": "user-1"}) for n in range(3)]
            )
        ]
        with engine.pool.tenant(TENANT, create=False) as store:
            assert store is not None
            with store.write() as txn:
                txn.connection.execute("UPDATE memories SET metadata = '[1' WHERE id = ?", (ids[0],))
            with store.read() as txn:
                assert sorted(txn.filtered_ids([], {"mem0.user_id": "user-1"})) == ids[1:]
            with store.write() as txn:  # rewritten (a repair): the index takes the new value
                txn.connection.execute(
                    "UPDATE memories SET metadata = ? WHERE id = ?", ('{"mem0.user_id": "user-2"}', ids[0])
                )
        repaired = engine.memories.page(TENANT, metadata_equals={"mem0.user_id": "user-2"}).memories
        assert [m.id for m in repaired] == ids[:1]
        with engine.pool.tenant(TENANT, create=False) as store:
            assert store is not None
            with store.write() as txn:
                txn.connection.execute("UPDATE memories SET metadata = '[1' WHERE id = ?", (ids[1],))
                txn.connection.execute("UPDATE memories SET metadata = '[1]' WHERE id = ?", (ids[2],))
        # Reads show such a memory without metadata, and its forget erases it.
        assert {h.memory.id: h.memory.metadata for h in engine.recall(TENANT, "note", k=5).hits}[ids[1]] == {}
        assert engine.memories.get(TENANT, ids[2]).metadata == {}
        engine.memories.forget(TENANT, ids[1])
        assert engine.memories.get(TENANT, ids[1]).forgotten
    finally:
        engine.close()


def test_a_filtered_recall_s_ids_are_the_filter_s_live_memories_and_forgotten_ones_of_its_scopes(
    engine: Engine,
) -> None:
    """Recall's read of a filter (``filter_ids``) reads index entries only: by metadata it finds
    exactly the live memories holding every pair (a forget clears them); by scope it may also
    find forgotten memories of those scopes, which recall never returns (neither the vector cache
    nor the postings hold them)."""
    scopes = ["global", "workspace/a", "workspace/b"]
    items = [
        RetainItem(f"note {n} about the garden", scope=scopes[n % 3], metadata={"topic": "xy"[n % 2]})
        for n in range(120)
    ]
    ids = [outcome.memory_id for outcome in engine.retain_batch(TENANT, items)]
    forgotten = set(ids[::7])
    for memory_id in forgotten:
        engine.memories.forget(TENANT, memory_id)
    with engine.pool.tenant(TENANT, create=False) as store:
        assert store is not None
        with store.read() as txn:
            for wanted, metadata in (
                (["workspace/a"], {}),
                (["workspace/a", "workspace/b"], {"topic": "x"}),
                ([], {"topic": "y"}),
                (["workspace/c"], {}),
            ):
                live = sorted(txn.filtered_ids(wanted, metadata))
                found = txn.filter_ids(wanted, metadata).tolist()
                assert found == sorted(found) and set(live) <= set(found), (wanted, metadata)
                assert set(found) - set(live) <= forgotten, (wanted, metadata)
                if metadata:
                    assert found == live
    hits = engine.recall(TENANT, "garden note", k=100, scopes=["workspace/a"]).hits
    assert {h.memory.id for h in hits} == {i for n, i in enumerate(ids) if n % 3 == 1} - forgotten
