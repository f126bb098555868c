"""The in-memory vector cache (engine/index.py) across forgets and Dedup merges: a forget or a
merge removes its rows from the cache in place, so the next write or recall does not reload the
tenant's vectors from the file, and the answers are the same as those of a freshly opened
server. A real engine on real files, in this process, so the cache itself can be looked at."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import numpy as np

from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.index import VectorIndex, cached_vectors, drop_vectors
from mnemosyne.engine.types import RecallMode, RetainItem, ThreadRef
from tests.support import forget_untold, wait_until

TENANT = "vectors"
QUERIES = ["customer order shipped", "city day note", "order O-17 city", "near duplicate about the lighthouse keeper"]


def _cache(engine: Engine) -> VectorIndex:
    with engine.pool.tenant(TENANT, create=False) as store:
        assert store is not None
        index = cached_vectors(store)
    assert isinstance(index, VectorIndex)
    return index


def _assert_cache_holds_the_file(engine: Engine, cache: VectorIndex) -> None:
    """Every vector in the file is in the cache, as it is there; any other row is all zeros."""
    with engine.pool.tenant(TENANT, create=False) as store:
        assert store is not None
        with store.read() as txn:
            ids, matrix = cache.sync(txn)
            stored = {i: np.frombuffer(v, dtype="<f4") for i, _, v in txn.embeddings_after(0, txn.index_state()[0])}
    assert set(stored) <= set(ids.tolist())
    for row, memory_id in enumerate(ids.tolist()):
        expected = stored.get(memory_id, np.zeros(matrix.shape[1], dtype=np.float32))
        assert np.array_equal(matrix[row], expected), memory_id


def _answers(engine: Engine) -> list[list[tuple[int, float]]]:
    return [[(h.memory.id, round(h.score, 5)) for h in engine.recall(TENANT, q, k=10).hits] for q in QUERIES]


def test_forgets_and_merges_update_the_vector_cache_in_place(tmp_path: Path) -> None:
    engine = Engine(EngineConfig(data_dir=tmp_path / "data"))
    try:
        texts = [f"note {i}: customer C-{i % 37} asked about order O-{i} shipped to city {i % 13}" for i in range(300)]
        ids = [o.memory_id for o in engine.retain_batch(TENANT, [RetainItem(t) for t in texts])]
        twins = [
            engine.retain(TENANT, RetainItem(f"a near duplicate about the lighthouse keeper{'!' * n}")).memory_id
            for n in range(3)
        ]
        engine.recall(TENANT, QUERIES[0])
        cache = _cache(engine)
        assert cache.reloads == 1
        for n in range(12):
            assert engine.memories.forget(TENANT, ids[n * 11])
            engine.retain(TENANT, RetainItem(f"an extra note {n} about order O-{n} shipped"))
            hits = engine.recall(TENANT, f"order O-{n * 11} customer", k=50).hits
            assert ids[n * 11] not in {h.memory.id for h in hits}
        report = engine.dedup(TENANT, merge=True)
        merged = {d for g in report.groups for d in g.duplicates}
        assert report.merged and merged & set(twins), report
        _assert_cache_holds_the_file(engine, cache)
        # Past a quarter of the rows dropped, the cache squeezes them out (still no reload).
        for memory_id in ids[200:290]:
            engine.memories.forget(TENANT, memory_id)
        with engine.pool.tenant(TENANT, create=False) as store:
            assert store is not None
            with store.read() as txn:
                # Fewer rows than the 315 vectors it was given: the dropped ones went.
                assert len(cache.sync(txn)[0]) < len(ids) + len(twins) + 12
        _assert_cache_holds_the_file(engine, cache)
        after = _answers(engine)
        # One load in all: every forget and the merge updated the same cache in place.
        assert _cache(engine) is cache and cache.reloads == 1
        assert not merged & {h[0] for answer in after for h in answer}
        _assert_cache_holds_the_file(engine, cache)
    finally:
        engine.close()
    reopened = Engine(EngineConfig(data_dir=tmp_path / "data"))
    try:
        assert _answers(reopened) == after  # the same ranking as a cache loaded from the file
    finally:
        reopened.close()


def test_updates_replace_their_vector_in_the_cache_in_place(tmp_path: Path) -> None:
    engine = Engine(EngineConfig(data_dir=tmp_path / "data"))
    try:
        texts = [f"note {i}: customer C-{i} asked about order O-{i} shipped to city {i % 13}" for i in range(50)]
        ids = [o.memory_id for o in engine.retain_batch(TENANT, [RetainItem(t) for t in texts])]
        engine.recall(TENANT, QUERIES[0])
        cache = _cache(engine)
        for n in range(5):
            engine.updates.update(TENANT, ids[n], text=f"the lighthouse keeper {n} logged a storm")
            hits = engine.recall(TENANT, f"lighthouse keeper {n} storm", k=3, mode=RecallMode.VECTOR).hits
            assert hits[0].memory.id == ids[n]
        _assert_cache_holds_the_file(engine, cache)
        after = _answers(engine)
        assert _cache(engine) is cache and cache.reloads == 1  # no update reloaded the vectors
    finally:
        engine.close()
    reopened = Engine(EngineConfig(data_dir=tmp_path / "data"))
    try:
        assert _answers(reopened) == after
    finally:
        reopened.close()


def test_thread_neighbours_from_the_cache_are_the_files(tmp_path: Path) -> None:
    """Recall takes each candidate's thread neighbours from the cache's arrays; they are the ones
    the file's thread index gives (``thread_neighbours``: the live memories just before and after
    in thread order) through turns appended in order (linked one by one), turns arriving out of
    order (linked at their place), memories without a thread, forgets (skipped) and a restart."""
    rng = random.Random(24)
    data = tmp_path / "data"

    def check(engine: Engine) -> int:
        compared = 0
        with engine.pool.tenant(TENANT, create=False) as store:
            assert store is not None
            cache = cached_vectors(store)
            assert isinstance(cache, VectorIndex)
            with store.read() as txn:
                ids, _ = cache.sync(txn)
                live = sorted(txn.live_ids(ids.tolist()))
                for _ in range(5):
                    asked = rng.sample(live, min(20, len(live)))
                    rng.shuffle(asked)
                    from_cache = sorted(map(tuple, cache.thread_neighbours(np.array(asked)).tolist()))
                    assert from_cache == sorted(txn.thread_neighbours(asked))
                    compared += len(from_cache)
        return compared

    compared = 0
    engine = Engine(EngineConfig(data))
    try:
        turns = {f"t{n}": 0 for n in range(6)}
        for step in range(30):
            items = []
            for i in range(rng.randint(1, 20)):
                thread = rng.choice([*turns, None])
                if thread is None:
                    items.append(RetainItem(f"note {step} {i} word{rng.randint(0, 40)}"))
                    continue
                # Mostly the thread's next turn; now and then a turn from earlier in it.
                turns[thread] += 1
                position = turns[thread] if rng.random() < 0.8 else rng.randint(0, turns[thread])
                items.append(
                    RetainItem(f"turn {step} {i} word{rng.randint(0, 40)}", thread=ThreadRef(thread, position))
                )
            engine.retain_batch(TENANT, items)
            engine.recall(TENANT, "word turn note")
            compared += check(engine)
            if step % 4 == 3:
                with engine.pool.tenant(TENANT, create=False) as store:
                    assert store is not None
                    with store.read() as txn:
                        live = sorted(txn.live_ids(list(range(1, txn.index_state()[0] + 1))))
                for memory_id in rng.sample(live, 4):
                    assert engine.memories.forget(TENANT, memory_id)
                compared += check(engine)
        cache = _cache(engine)
        assert cache.reloads == 1  # forgets were applied in place, not by reloading
        # Out-of-order turns were linked at their place: a sort of every row only after rows moved.
        assert cache.relinks <= cache.reloads + cache.reallocations
    finally:
        engine.close()
    engine = Engine(EngineConfig(data))
    try:
        engine.recall(TENANT, "word turn note")
        compared += check(engine)
    finally:
        engine.close()
    assert compared > 500


def test_a_recall_between_a_forget_s_commit_and_its_word_to_the_cache_does_not_reload_it(tmp_path: Path) -> None:
    """A forget tells the cache its rows right after its commit (``drop_vectors``): a recall in
    between found the file's epoch ahead and loaded every vector again inside its read
    transaction, which the forget's truncation of the WAL then waits for. It scores the rows as
    they are now (its transaction drops the forgotten memory) and reloads only a change it was
    never told, once that is overdue."""
    engine = Engine(EngineConfig(data_dir=tmp_path / "data"))
    try:
        texts = [f"note {i}: customer C-{i % 37} asked about order O-{i} shipped to city {i % 13}" for i in range(300)]
        ids = [o.memory_id for o in engine.retain_batch(TENANT, [RetainItem(t) for t in texts])]
        engine.recall(TENANT, QUERIES[0])
        cache = _cache(engine)
        with engine.pool.tenant(TENANT, create=False) as store:
            assert store is not None
            for told in (True, False):
                forgotten = ids.pop()
                before, after = forget_untold(store, forgotten)
                # Committed, not told yet: the forgotten memory is not recalled, and nothing reloads.
                hits = engine.recall(TENANT, texts[forgotten - ids[0]], k=10, mode=RecallMode.VECTOR).hits
                assert hits and forgotten not in {h.memory.id for h in hits}
                assert cache.reloads == 1
                if told:
                    drop_vectors(store, [forgotten], from_epoch=before, to_epoch=after)
                else:  # never told: reloaded once it is overdue
                    wait_until(lambda: bool(engine.recall(TENANT, QUERIES[0]).hits) and cache.reloads == 2)
                store.erase_traces()
                _assert_cache_holds_the_file(engine, cache)
                assert cache.reloads == (1 if told else 2)
    finally:
        engine.close()


def test_recalls_beside_forgets_never_return_a_memory_whose_forget_returned_and_never_reload(tmp_path: Path) -> None:
    """Vector recalls back to back on three threads while memories are forgotten one by one: a
    recall that began after a forget returned never has its memory, and the forgets, told to the
    cache as each commits, never make it load the vectors again."""
    engine = Engine(EngineConfig(data_dir=tmp_path / "data"))
    try:
        texts = [f"note {i}: customer C-{i % 37} asked about order O-{i} shipped to city {i % 13}" for i in range(300)]
        ids = [o.memory_id for o in engine.retain_batch(TENANT, [RetainItem(t) for t in texts])]
        engine.recall(TENANT, QUERIES[0])
        cache = _cache(engine)
        doomed = ids[::15]
        acknowledged: set[int] = set()
        seen_after: list[int] = []
        stop = threading.Event()

        def recall(seed: int) -> None:
            rng = random.Random(seed)
            while not stop.is_set():
                memory_id = rng.choice(doomed)
                done = set(acknowledged)
                hits = engine.recall(TENANT, texts[memory_id - ids[0]], k=10, mode=RecallMode.VECTOR).hits
                seen_after.extend(h.memory.id for h in hits if h.memory.id in done)

        threads = [threading.Thread(target=recall, args=(seed,)) for seed in range(3)]
        for thread in threads:
            thread.start()
        try:
            for memory_id in doomed:
                assert engine.memories.forget(TENANT, memory_id)
                acknowledged.add(memory_id)
                hits = engine.recall(TENANT, texts[memory_id - ids[0]], k=10, mode=RecallMode.VECTOR).hits
                assert memory_id not in {h.memory.id for h in hits}
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert seen_after == []
        assert _cache(engine) is cache and cache.reloads == 1
        _assert_cache_holds_the_file(engine, cache)
    finally:
        engine.close()
