"""The postings cache (engine/postings.py) answers exactly as FTS5 does: the same rows, the same
bm25() scores to the last bit, the same lengths and mean length, for OR and AND queries, through
retains, forgets, Dedup merges and updates (each applied in place, without a reload); it steps
aside (FTS5 answers) for a phrase, a filtered recall and a snapshot that is not its own; and a
server's recalls are the same with it and without it. A real engine on real files, in this
process, so the cache can be compared with the file's own index; the last test runs real servers."""

from __future__ import annotations

import os
import random
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import apsw
import numpy as np
import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.engine import phrase_postings, postings
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.phrase_postings import PHRASE_TOKENS
from mnemosyne.engine.postings import PostingsCache, postings_cache
from mnemosyne.engine.recall.text import match_expression, query_terms
from mnemosyne.engine.types import RecallMode, RetainItem
from mnemosyne.store import schema
from mnemosyne.store.fts_tokens import TOKENIZER_ARGS, fts5_tokens
from mnemosyne.store.tenant_store import ReadTxn, TenantStore
from tests.support import forget_untold, wait_until

TENANT = "postings"
# Words sharing stems (run / running / runs), diacritics, case, digits: what the tokenizer folds.
WORDS = (
    "run running runs runner ship shipped shipping order orders café cafe CAFÉ naïve naive lighthouse keeper "
    "keepers refund refunds ticket tickets city cities note notes 2024 v2 alpha beta gamma delta Zürich zurich "
    "the a of and to"
).split()


def _text(rng: random.Random, n: int) -> str:
    # Zipf-like: early words far more often, so some terms are in most rows (clamped IDF) and some rare.
    return " ".join(WORDS[min(int(rng.paretovariate(0.8)) - 1, len(WORDS) - 1)] for _ in range(n))


def _queries(rng: random.Random) -> list[str]:
    fixed = ["run", "shipping orders", "café naïve", "ZURICH lighthouse keeper", "refund ticket city", "the of"]
    return fixed + [" ".join(rng.sample(WORDS, rng.randint(1, 5))) for _ in range(40)]


@contextmanager
def _snapshot(engine: Engine) -> Iterator[tuple[TenantStore, PostingsCache, ReadTxn]]:
    """The tenant's open store, its postings cache, and a read transaction of it."""
    with engine.pool.tenant(TENANT, create=False) as store:
        assert store is not None
        with store.read() as txn:
            yield store, postings_cache(store), txn


def _assert_same_as_fts5(engine: Engine, queries: list[str]) -> PostingsCache:
    """For every query, OR and AND: the cache's hits are FTS5's, value for value."""
    compared = 0
    with _snapshot(engine) as (_, cache, txn):
        view = cache.sync(txn)
        assert view is not None
        for query in queries:
            terms = query_terms(query)
            phrases = phrase_postings.phrases(terms)
            assert phrases is not None, query
            found = postings.search(view, phrases, limit=20, texts=txn.indexed_texts)
            assert found is not None, query
            for operator, cached in (("OR", found.any_terms), ("AND", found.all_terms)):
                match = match_expression(terms, operator=operator)
                assert match is not None
                expected = txn.fts_search(match, limit=20, scopes=[], metadata_equals={})
                assert cached == expected, (query, operator)
                compared += len(expected.ids)
    assert compared > 100  # the queries did match rows
    return cache


def test_the_cache_answers_as_fts5_through_retains_forgets_merges_and_updates(engine: Engine) -> None:
    rng = random.Random(7)
    queries = _queries(rng)
    ids = [
        o.memory_id
        for o in engine.retain_batch(TENANT, [RetainItem(_text(rng, rng.randint(3, 30))) for _ in range(400)])
    ]
    cache = _assert_same_as_fts5(engine, queries)
    assert cache.reloads == 1
    forgotten: set[int] = set()
    for round_ in range(5):
        # New rows, some with words the cache has never seen; single retains and batches.
        engine.retain(TENANT, RetainItem(f"{_text(rng, 8)} unseenword{round_} Unseenwords{round_}"))
        engine.retain_batch(TENANT, [RetainItem(_text(rng, rng.randint(1, 12))) for _ in range(20)])
        for memory_id in rng.sample(ids, 15):
            engine.memories.forget(TENANT, memory_id)
            forgotten.add(memory_id)
        for memory_id in rng.sample(sorted(set(ids) - forgotten), 3):
            engine.updates.update(TENANT, memory_id, text=f"{_text(rng, 6)} updatedword{round_}")
        _assert_same_as_fts5(engine, [*queries, f"unseenword{round_}", f"updatedword{round_} run"])
    # Near-duplicates merged by Dedup leave the index too.
    for n in range(3):
        engine.retain(TENANT, RetainItem(f"the lighthouse keeper wrote a refund ticket note{'!' * n}"))
    report = engine.dedup(TENANT, merge=True)
    assert report.merged
    _assert_same_as_fts5(engine, queries)
    # Past a quarter of the rows dead, the postings are rewritten without them; still exact.
    for memory_id in ids[:150]:
        engine.memories.forget(TENANT, memory_id)
    same = _assert_same_as_fts5(engine, queries)
    # Every change was applied in place: one load in all, the same cache.
    assert same is cache and cache.reloads == 1


def test_identifiers_are_phrases_the_cache_matches_as_fts5_does(engine: Engine) -> None:
    """An identifier (RF-1007, v2.v2, a@b.c) is a phrase of several tokens: the cache matches it
    from the rows holding every token, their texts tokenized (each instance counted, overlapping
    ones too), with the same rows and bm25() as FTS5's, alone and beside words, through forgets
    and updates."""
    rng = random.Random(11)
    texts = [
        f"{_text(rng, rng.randint(2, 12))} RF-{rng.randint(1000, 1030)} {_text(rng, rng.randint(0, 6))}"
        for _ in range(300)
    ]
    texts += [
        "RF 1007 is not RF-1008 but 1007 RF",  # the tokens apart and reversed: no instance of RF-1007
        "v2 v2 v2 shipped, then v2.v2 again",  # the phrase "v2 v2" three times, overlapping
        "mail ops@example.com or ops at example.com",
        "the 1007th ticket and RF-10070",  # tokens that only contain the phrase's
    ]
    ids = [o.memory_id for o in engine.retain_batch(TENANT, [RetainItem(t) for t in texts])]
    queries = [
        "RF-1007",
        "RF-1007 refund",
        "ticket RF-1012 RF-1013",
        "v2.v2",
        "v2.v2 shipped",
        "ops@example.com",
        "RF-9999",  # its number in no row
        "RF-1007 RF-1007 lighthouse",
    ]
    _assert_same_as_fts5(engine, queries)
    forgotten = set(rng.sample(ids, 40))
    for memory_id in forgotten:
        engine.memories.forget(TENANT, memory_id)
    for memory_id in rng.sample(sorted(set(ids[:300]) - forgotten), 5):
        engine.updates.update(TENANT, memory_id, text=f"RF-1007 again, {_text(rng, 4)}")
    _assert_same_as_fts5(engine, queries)


def test_a_filtered_recall_s_text_leg_is_fts5_s_too(engine: Engine) -> None:
    """Scopes and metadata: the cache scores every row, as FTS5's ``bm25()`` does whatever the
    WHERE (the index's IDF and mean length), and keeps the allowed memories only: the same rows
    and scores as FTS5's filtered statement, for words and identifiers, OR and AND."""
    rng = random.Random(5)
    items = [
        RetainItem(
            f"{_text(rng, rng.randint(2, 14))} RF-{rng.randint(1000, 1020)}",
            scope=rng.choice(["global", "workspace/a", "workspace/b"]),
            metadata={"user_id": rng.choice(["ann", "bob", "cy"])} if rng.random() < 0.8 else {},
        )
        for _ in range(500)
    ]
    engine.retain_batch(TENANT, items)
    filters: list[tuple[list[str], dict[str, str]]] = [
        (["workspace/a"], {}),
        ([], {"user_id": "bob"}),
        (["workspace/a", "workspace/b"], {"user_id": "ann"}),
        (["workspace/zzz"], {}),  # no memory at all
    ]
    compared = 0
    with _snapshot(engine) as (_, cache, txn):
        view = cache.sync(txn)
        assert view is not None
        for query in [*_queries(rng)[:20], "RF-1007", "refund RF-1011", "the of"]:
            terms = query_terms(query)
            phrases = phrase_postings.phrases(terms)
            assert phrases is not None
            for scopes, metadata in filters:
                allowed = np.array(sorted(txn.filtered_ids(scopes, metadata)), dtype=np.int64)
                found = postings.search(view, phrases, limit=20, texts=txn.indexed_texts, allowed=allowed)
                assert found is not None, query
                for operator, cached in (("OR", found.any_terms), ("AND", found.all_terms)):
                    match = match_expression(terms, operator=operator)
                    assert match is not None
                    expected = txn.fts_search(match, limit=20, scopes=scopes, metadata_equals=metadata)
                    assert cached == expected, (query, operator, scopes, metadata)
                    compared += len(expected.ids)
    assert compared > 500


def test_a_common_phrase_or_another_snapshot_is_left_to_fts5(engine: Engine) -> None:
    engine.retain_batch(
        TENANT, [RetainItem(f"ticket RF-{1000 + i} about order {i}", scope="workspace/a") for i in range(80)]
    )
    # Long memories holding one identifier: few rows, but more tokens than PHRASE_TOKENS to read.
    long_tail = " ".join(["lorem"] * (PHRASE_TOKENS // 8))
    engine.retain_batch(TENANT, [RetainItem(f"RF-5555 long report {i}: {long_tail}") for i in range(9)])
    with _snapshot(engine) as (store, cache, older):
        view = cache.sync(older)
        assert view is not None
        # A phrase whose tokens are all in more than PHRASE_ROWS rows needs FTS5's positions,
        # and so does one whose rows hold more than PHRASE_TOKENS tokens together.
        assert postings.search(view, [("rf", "1007")], limit=5, texts=older.indexed_texts) is not None
        assert postings.search(view, [("ticket", "rf")], limit=5, texts=older.indexed_texts) is None
        assert postings.search(view, [("rf", "5555")], limit=5, texts=older.indexed_texts) is None
        two = [("rf", "1007"), ("rf", "1008")]  # the budget is the query's, not each phrase's
        assert postings.search(view, two, limit=5, texts=older.indexed_texts) is not None
        engine.retain(TENANT, RetainItem("a later ticket"))
        with store.read() as newer:
            assert cache.sync(newer) is not None
        # The cache is ahead of the older snapshot now: it does not answer for it.
        assert cache.sync(older) is None
    # Recall still finds the identifier, the common phrase (FTS5's) and filtered recalls (FTS5 with the filter).
    assert engine.recall(TENANT, "RF-1007", k=1).hits[0].memory.text == "ticket RF-1007 about order 7"
    found = engine.recall(TENANT, "RF-5555", k=20, mode=RecallMode.TEXT).hits  # FTS5's phrase
    assert len(found) == 9 and all(h.memory.text.startswith("RF-5555 long report") for h in found)
    assert engine.recall(TENANT, "ticket-rf order-7", k=1).hits[0].memory.text == "ticket RF-1007 about order 7"
    filtered = engine.recall(TENANT, "later ticket", k=5, scopes=["workspace/a"]).hits
    assert len(filtered) == 5 and {h.memory.scope for h in filtered} == {"workspace/a"}
    assert engine.recall(TENANT, "later ticket", k=1).hits[0].memory.text == "a later ticket"


def test_many_missing_rows_are_loaded_in_the_background_while_fts5_answers(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postings, "INLINE_ROWS", 100)
    rng = random.Random(3)
    queries = _queries(rng)
    engine.retain_batch(TENANT, [RetainItem(_text(rng, rng.randint(3, 20))) for _ in range(250)])
    for batch in range(2):  # the first load, then a batch of more rows than INLINE_ROWS
        with postings._LOADS:  # holds the load back
            with _snapshot(engine) as (_, cache, txn):
                assert cache.sync(txn) is None
            expected = engine.recall(TENANT, "refund ticket city", k=10).hits  # FTS5's answer
            assert expected
        wait_until(lambda: cache.loads == batch + 1)
        assert [h.memory.id for h in engine.recall(TENANT, "refund ticket city", k=10).hits] == [
            h.memory.id for h in expected
        ]
        _assert_same_as_fts5(engine, queries)
        engine.retain_batch(TENANT, [RetainItem(_text(rng, rng.randint(3, 20))) for _ in range(150)])
    assert cache.reloads == 1


def test_a_background_load_idles_and_takes_the_forgets_and_updates_made_during_it(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postings, "INLINE_ROWS", 100)
    rng = random.Random(5)
    ids = [o.memory_id for o in engine.retain_batch(TENANT, [RetainItem(_text(rng, 12)) for _ in range(300)])]
    monkeypatch.setattr(postings, "LOAD_CHUNK", 100)
    inside, release = threading.Event(), threading.Event()
    policies: list[int] = []
    append = PostingsCache._append

    def held(cache: PostingsCache, memory_ids: list[int], texts: list[str], *, merge: bool = True) -> None:
        # The load's first chunk is read (ids[0] and ids[1] in it), no transaction open.
        if threading.current_thread().name == "postings-load" and not inside.is_set():
            policies.append(os.sched_getscheduler(0) if sys.platform.startswith("linux") else -1)
            inside.set()
            release.wait(30)
        append(cache, memory_ids, texts, merge=merge)

    monkeypatch.setattr(PostingsCache, "_append", held)
    with _snapshot(engine) as (_, cache, txn):
        assert cache.sync(txn) is None  # the load starts
    assert inside.wait(30)
    # Committed after the load read them: it must be told.
    engine.memories.forget(TENANT, ids[0])
    engine.updates.update(TENANT, ids[1], text="the lighthouse keeper refunds the ticket")
    release.set()
    wait_until(lambda: cache.loads == 1)
    _assert_same_as_fts5(engine, [*_queries(rng), "lighthouse keeper refunds"])
    assert cache.loads == 1 and cache.reloads == 1  # taken, with the two changes, and no second load
    # The load yields the processor to request threads (mnemosyne/background.py) while it is quick.
    if sys.platform.startswith("linux"):
        assert policies == [os.SCHED_IDLE]


def test_a_sync_between_a_forget_s_commit_and_its_word_to_the_cache_leaves_it_to_fts5(engine: Engine) -> None:
    """A forget tells the cache its rows right after its commit (``drop_texts``): a recall in
    between found the file's epoch ahead and loaded every row again inside its read transaction,
    which the forget's truncation of the WAL then waited for. It lets FTS5 answer instead, and
    reloads only a change it was never told."""
    rng = random.Random(11)
    queries = _queries(rng)
    ids = [o.memory_id for o in engine.retain_batch(TENANT, [RetainItem(_text(rng, 12)) for _ in range(300)])]
    cache = _assert_same_as_fts5(engine, queries)
    with engine.pool.tenant(TENANT, create=False) as store:
        assert store is not None
        for told in (True, False):
            forgotten = ids.pop()
            before, after = forget_untold(store, forgotten)
            with store.read() as txn:
                assert cache.sync(txn) is None  # committed, not told yet: FTS5 answers
            assert cache.reloads == 1
            if told:
                postings.drop_texts(store, [forgotten], from_epoch=before, to_epoch=after)
            else:
                wait_until(lambda: _synced(store, cache))  # never told: reloaded once it is overdue
            store.erase_traces()
            _assert_same_as_fts5(engine, queries)
            assert cache.reloads == (1 if told else 2)


def _synced(store: TenantStore, cache: PostingsCache) -> bool:
    with store.read() as txn:
        return cache.sync(txn) is not None


def test_a_tenant_whose_memories_are_all_forgotten_matches_nothing(engine: Engine) -> None:
    ids = [o.memory_id for o in engine.retain_batch(TENANT, [RetainItem(f"ticket {i} of the day") for i in range(5)])]
    assert engine.recall(TENANT, "ticket", k=3, mode=RecallMode.TEXT).hits
    for memory_id in ids:
        engine.memories.forget(TENANT, memory_id)
    for mode in RecallMode:
        assert engine.recall(TENANT, "ticket of the day", k=3, mode=mode).hits == []


def test_the_tokenizer_is_the_tables_own() -> None:
    """The tokens are those FTS5 itself stores for the table's tokenizer, in order."""
    tokenize = f"porter {' '.join(TOKENIZER_ARGS)}"
    assert all(f"tokenize='{tokenize}'" in m for m in schema.MIGRATIONS if "USING fts5(" in m)
    text = "Running CAFÉS naïvely through Zürich's 2024-05 RF-12345 e-mail x_y"
    connection = apsw.Connection(":memory:")
    connection.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, tokenize='{tokenize}')")
    connection.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    connection.execute("INSERT INTO t(body) VALUES(?)", (text,))
    stored = [term for (term,) in connection.execute("SELECT term FROM v ORDER BY offset")]
    assert fts5_tokens(text) == stored and len(stored) == 14


def _answers(client: MemoryClient, queries: list[str]) -> list[list[tuple[int, float, float]]]:
    return [[(h.memory.id, h.score, h.text_score) for h in client.recall(TENANT, q, k=10)] for q in queries]


def test_a_server_recalls_the_same_with_the_cache_and_without_it(server_factory) -> None:
    rng = random.Random(11)
    queries = _queries(rng)
    with_cache = server_factory().start()
    with MemoryClient(with_cache.target) as client:
        client.retain_batch(TENANT, [_text(rng, rng.randint(3, 25)) for _ in range(300)])
        for memory_id in range(1, 40, 3):
            client.forget(TENANT, memory_id)
        cached = _answers(client, queries)
    with_cache.stop()
    without = server_factory(with_cache.data_dir, env={"MNEMOSYNE_TEST_RECALL_OFF": "postings"}).start()
    with MemoryClient(without.target) as client:
        assert _answers(client, queries) == cached


def test_a_query_s_most_common_term_is_looked_up_only_among_its_other_terms_rows(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past PRUNE_FROM postings, a query's most common term is scored only in the rows of its
    other terms when a row holding it alone cannot reach the best; the answers stay FTS5's, the
    pruned ones and those where its bound sends the search back to every row."""
    rng = random.Random(11)
    filler = [f"filler{i}" for i in range(300)]

    def words(n: int) -> str:
        return " ".join(rng.choice(filler) for _ in range(n))

    texts = [words(8) for _ in range(7_000)]
    texts += [f"common {words(7)}" for _ in range(2_900)]
    texts += ["common " * 10 + words(2) for _ in range(20)]  # the common term's largest count
    texts += [f"rarea common {words(6)}" for _ in range(20)] + [f"rarea {words(7)}" for _ in range(20)]
    texts += [f"rareb {words(100)}" for _ in range(40)]  # long rows: low scores, below the bound
    for start in range(0, len(texts), 1_000):
        engine.retain_batch(TENANT, [RetainItem(t) for t in texts[start : start + 1_000]])
    outcomes: list[bool] = []
    search_pruned = postings._search_pruned

    def spied(*args: Any, **kwargs: Any) -> postings.TextSearch | None:
        answer = search_pruned(*args, **kwargs)
        outcomes.append(answer is not None)
        return answer

    monkeypatch.setattr(postings, "_search_pruned", spied)
    _assert_same_as_fts5(engine, ["common rarea", "rarea common common", "common rarea filler3", "rarea"])
    assert outcomes == [True, True, True]
    outcomes.clear()
    _assert_same_as_fts5(engine, ["common rareb", "common filler7", "common filler8", "rareb"])
    assert outcomes[0] is False  # a row of "common" ten times outscores the 20th "rareb" row
    outcomes.clear()
    _assert_same_as_fts5(engine, ["rarea rareb", "common", "filler1 filler2", "filler3", "filler4", "rareb"])
    assert outcomes == []  # no term holds PRUNE_FROM postings and more than the others, or one term
