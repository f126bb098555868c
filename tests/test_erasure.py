"""Erasure that leaves no trace: after ForgetMemory returns, no byte of the forgotten text, its
facts or its embedding is left in any file under the data directory, whichever way it was written;
the audit chain still verifies and the ledger's hashes of it are keyed with a key that is gone."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import apsw
import pytest

from mnemosyne.client import MemoryClient, NotFoundError, PermissionDeniedError, RetainItem, UnavailableError
from mnemosyne.store import ledger
from mnemosyne.store.schema import SCHEMA_VERSION
from tests.support import tokens_json

# One long token that the full-text tokenizer keeps whole (letters and digits, no stem to strip).
SECRET = "Qv7Kx9LmVt4RwB2nYp8Hs3Jd6"
OLD_CODE = "plainoldvalue1"


def _windows(data: bytes, width: int = 8) -> set[bytes]:
    return {data[i : i + width] for i in range(len(data) - width + 1)}


def _needles(vectors: list[bytes]) -> set[bytes]:
    """Every 8-byte window of the secret, lower-cased too, and in UTF-16; each vector whole, and
    each of its 16-byte aligned windows holding at least three non-zero floats."""
    needles: set[bytes] = set()
    for text in (SECRET, SECRET.lower()):
        needles |= _windows(text.encode())
        needles |= _windows(text.encode("utf-16-le"))
        needles |= _windows(text.encode("utf-16-be"))
    for vector in vectors:
        needles.add(vector)
        for start in range(0, len(vector) - 15, 16):
            window = vector[start : start + 16]
            if sum(window[i : i + 4] != b"\0\0\0\0" for i in range(0, 16, 4)) >= 3:
                needles.add(window)
    return needles


def _traces(data_dir: Path, needles: set[bytes]) -> list[str]:
    found = []
    for path in sorted(p for p in data_dir.rglob("*") if p.is_file()):
        data = path.read_bytes()
        hits = [n for n in needles if n in data]
        if hits:
            found.append(f"{path.relative_to(data_dir)}: {len(hits)} windows, e.g. {hits[0]!r}")
    return found


def _vocabulary_terms(tenant_file: Path, tmp: Path) -> list[str]:
    """Terms of the full-text index (fts5vocab) holding an 8-character window of the secret, read
    from a copy of the file (the vocabulary table is made in the copy's temp schema)."""
    copy = tmp / "vocab-copy.sqlite"
    shutil.copyfile(tenant_file, copy)
    connection = apsw.Connection(str(copy))
    try:
        connection.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, memories_fts, row)")
        terms = [row[0] for row in connection.execute("SELECT term FROM temp.vocab")]
    finally:
        connection.close()
    lowered = SECRET.lower()
    windows = {lowered[i : i + 8] for i in range(len(lowered) - 7)}
    return [t for t in terms if any(w in t for w in windows)]


def _vectors(tenant_file: Path, ids: list[int]) -> list[bytes]:
    connection = apsw.Connection(str(tenant_file), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        marks = ",".join("?" * len(ids))
        return [r[0] for r in connection.execute(f"SELECT vector FROM embeddings WHERE memory_id IN ({marks})", ids)]
    finally:
        connection.close()


def _write_the_secret_every_way(client: MemoryClient, tenant: str) -> None:
    # Synchronously.
    client.retain(tenant, f"The vault code is {SECRET} for the north door", scope="workspace/sync")
    # In a batch.
    client.retain_batch(
        tenant,
        [
            RetainItem(text=f"Batch note: the archive key reads {SECRET}", scope="workspace/batch"),
            RetainItem(text="Batch note: lunch is at noon", scope="workspace/batch"),
        ],
    )
    # As a conversation.
    client.retain_conversation(
        tenant,
        [("user", "What is the backup passphrase?"), ("assistant", f"It is {SECRET}, keep it safe.")],
        scope="workspace/chat",
    )
    # A fact that supersedes an older one: the older holds another value, the newer the secret.
    client.retain(tenant, f"ticket RF-1 status: {OLD_CODE}", scope="workspace/facts")
    newer = client.retain(tenant, f"ticket RF-1 status: {SECRET}", scope="workspace/facts")
    assert newer.supersedes, "the newer status must supersede the older one"
    # A near duplicate that Dedup merges into an older memory.
    client.retain(tenant, f"Dana wrote down the locker combination {SECRET} yesterday", scope="workspace/dup")
    client.retain(tenant, f"Dana wrote down the locker combination {SECRET} yesterday evening", scope="workspace/dup")
    merged = client.dedup(tenant, merge=True, threshold=0.8)
    assert merged.merged and any(g.duplicates for g in merged.groups), merged
    # Through the hot path: accepted into the inbox, then applied by a worker.
    client.hot_path(tenant, "enable")
    client.retain(tenant, f"Fast note: the safe opens with {SECRET}", scope="workspace/fast", fast=True)
    client.hot_path(tenant, "flush")


def test_forget_leaves_no_trace_in_any_file(server_factory, tenant: str, tmp_path: Path) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        _write_the_secret_every_way(client, tenant)
        every = client.list_memories(tenant, page_size=100).memories
        holding = [m.id for m in every if SECRET in m.text]
        assert len(holding) == 7, [m.text for m in every]
        vectors = _vectors(server.tenant_file(tenant), holding)
        assert vectors, "the merged memory lost its vector; the others must still have theirs"
        needles = _needles(vectors)
        assert _traces(server.data_dir, needles), "the search must find the secret before the forget"

        for memory_id in holding:
            client.forget(tenant, memory_id)

        assert _traces(server.data_dir, needles) == []
        assert _vocabulary_terms(server.tenant_file(tenant), tmp_path) == []
        report = client.verify_integrity(tenant)
        assert report.valid, report.problems
        # What is not forgotten is still there: the older status and the unrelated batch note.
        texts = {m.text for m in client.list_memories(tenant, page_size=100).memories}
        assert f"ticket RF-1 status: {OLD_CODE}" in texts and "Batch note: lunch is at noon" in texts
        assert all(SECRET not in h.memory.text for h in client.recall(tenant, SECRET, k=5))


def test_an_erasure_cut_short_by_a_kill_is_finished_when_the_tenant_opens(server_factory, tenant: str) -> None:
    """SIGKILL after the forget committed, before the WAL was emptied: the earlier pages are still
    in the WAL then; the restarted server empties it as it opens the tenant, before any call."""
    process = server_factory(env={"MNEMOSYNE_TEST_CRASH_AFTER_COMMIT": "forget"}).start()
    with MemoryClient(process.target, retries=0) as client:
        memory_id = client.retain(tenant, f"The vault code is {SECRET}").memory_id
        needles = _needles([])
        try:
            client.forget(tenant, memory_id)
        except UnavailableError:
            pass
    process.process.wait(timeout=10)
    assert _traces(process.data_dir, needles), "the kill must leave the erased pages in the WAL"
    process.env.pop("MNEMOSYNE_TEST_CRASH_AFTER_COMMIT")
    process.start()
    with MemoryClient(process.target) as client:
        assert client.get_memory(tenant, memory_id).forgotten
        assert _traces(process.data_dir, needles) == []
        assert client.verify_integrity(tenant).valid


def test_the_ledger_keeps_no_hash_that_confirms_a_guess(server_factory, tenant: str) -> None:
    """A retain entry's hashes are keyed with the memory's own key; once it is forgotten the key
    is gone, so neither a plain SHA-256 nor any hash of a guessed text matches the entry."""
    server = server_factory().start()
    text = f"The vault code is {SECRET}"
    with MemoryClient(server.target) as client:
        memory_id = client.retain(tenant, text).memory_id
        connection = apsw.Connection(str(server.tenant_file(tenant)), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            (key,) = connection.execute("SELECT key FROM memory_keys WHERE memory_id = ?", (memory_id,)).fetchone()
            (entry_json,) = connection.execute(
                "SELECT entry FROM ledger WHERE json_extract(entry, '$.memory_id') = ? AND "
                "json_extract(entry, '$.op') = 'retain'",
                (memory_id,),
            ).fetchone()
        finally:
            connection.close()
        entry = json.loads(entry_json)
        assert entry[ledger.KEYED_FIELD] == ledger.KEYED_VALUE
        assert entry["body"] == ledger.keyed_hex(key, text) and entry["body"] != ledger.sha256_hex(text)
        assert ledger.sha256_hex(text) not in entry_json

        assert client.forget(tenant, memory_id)
        connection = apsw.Connection(str(server.tenant_file(tenant)), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            keys = connection.execute("SELECT count(*) FROM memory_keys WHERE memory_id = ?", (memory_id,)).fetchone()
        finally:
            connection.close()
        assert keys == (0,)
        assert key not in b"".join(p.read_bytes() for p in server.data_dir.rglob("*") if p.is_file())
        assert client.verify_integrity(tenant).valid


def test_a_live_memory_without_its_key_is_reported(server_factory, tenant: str) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        memory_id = client.retain(tenant, "Erin's locker is number 12").memory_id
        connection = apsw.Connection(str(server.tenant_file(tenant)))
        connection.set_busy_timeout(5000)
        connection.execute("DELETE FROM memory_keys WHERE memory_id = ?", (memory_id,))
        connection.close()
        report = client.verify_integrity(tenant)
        assert not report.valid and report.problems[0].kind == "KEY_MISSING"
        assert report.problems[0].memory_id == memory_id


ADMIN = "admin-token-erasure"
USER = "user-token-erasure"


def test_erase_tenant_removes_every_file_and_leaves_a_receipt(server_factory, tenant: str) -> None:
    other = f"{tenant}-kept"
    server = server_factory(env={"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"], USER: [tenant]})}).start()
    with MemoryClient(server.target, ADMIN, retries=0) as admin, MemoryClient(server.target, USER, retries=0) as user:
        admin.hot_path(tenant, "enable")
        admin.retain(tenant, f"Tenant secret {SECRET}")
        admin.retain(tenant, "another fast note of the tenant", fast=True)
        admin.hot_path(tenant, "flush")
        admin.retain(other, "a memory of another tenant")
        head = admin.verify_integrity(tenant).head_hash
        assert any(tenant in p.name for p in server.data_dir.rglob("*")), "the tenant must have files first"

        with pytest.raises(PermissionDeniedError):  # the tenant's own token may not erase it
            user.erase_tenant(tenant)
        receipt = admin.erase_tenant(tenant)
        assert (receipt.tenant, receipt.head_hash, receipt.token_name) == (tenant, head, "tok0")
        assert abs(receipt.erased_at - time.time()) < 60

        assert [p for p in server.data_dir.rglob("*") if tenant in p.name and other not in p.name] == []
        assert _traces(server.data_dir, _needles([])) == []
        assert tenant not in admin.list_tenants().tenants and other in admin.list_tenants().tenants
        log = [json.loads(line) for line in (server.data_dir / "erasures.jsonl").read_text().splitlines()]
        assert log == [{"tenant": tenant, "erased_at": receipt.erased_at, "token_name": "tok0", "head_hash": head}]
        with pytest.raises(NotFoundError) as again:
            admin.erase_tenant(tenant)
        assert again.value.reason == "TENANT_NOT_FOUND"

        # A new tenant of that name starts empty, its chain from the beginning.
        assert user.list_memories(tenant).memories == []
        fresh = user.retain(tenant, "a first memory of the new tenant")
        assert fresh.memory_id == 1 and user.verify_integrity(tenant).checked == 1
        assert user.hot_path(tenant, "status").enabled is False
        assert admin.list_memories(other).memories[0].text == "a memory of another tenant"
    server.stop()
    server.start()  # the recovery index no longer names the erased tenant's old work
    with MemoryClient(server.target, ADMIN) as admin:
        assert [m.text for m in admin.list_memories(tenant).memories] == ["a first memory of the new tenant"]


def _token(i: int) -> str:
    """A long token of letters the tokenizer keeps whole and the stemmer leaves alone, unique per i."""
    letters = "bcdfghjkmnpqrstvwxz"
    word = ""
    n = i * 7919 + 104729
    for _ in range(16):
        n, r = divmod(n * 31 + 17, len(letters))
        word += letters[r]
    return f"{word}{letters[i % 19]}q"


def test_a_forget_erases_its_terms_from_a_large_index_at_once(server_factory, tenant: str) -> None:
    """3,000 memories of unique tokens fill the full-text index's segments over many leaf pages
    (so some forgotten terms are the first of their page, named in the segment's b-tree too);
    each forget removes its own terms from them, with no index-wide rewrite."""
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        ids: list[int] = []
        for start in range(0, 3000, 500):
            texts = [f"entry {i} holds {_token(i)} and {_token(i + 100_000)}" for i in range(start, start + 500)]
            ids.extend(r.memory_id for r in client.retain_batch(tenant, texts))
        victims = list(range(7, 3000, 61))  # 50 memories spread over every segment
        needles = {w for i in victims for t in (_token(i), _token(i + 100_000)) for w in _windows(t.encode())}
        assert _traces(server.data_dir, needles), "the search must find the tokens before the forgets"
        for i in victims:
            client.forget(tenant, ids[i])
        assert _traces(server.data_dir, needles) == []
        # The rest of the index still answers: a neighbour of a forgotten memory is found by its token.
        assert [h.memory.id for h in client.recall(tenant, _token(8), k=1)] == [ids[8]]
        assert client.verify_integrity(tenant).valid


def test_a_tenant_file_of_schema_6_gets_the_index_that_erases(server_factory, tenant: str) -> None:
    """A file whose full-text index is the schema-6 one (contentless_delete: a forget left the
    terms behind until a rewrite of the index) is rebuilt as it opens: same answers, and a
    forget then leaves no trace."""
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        memory_id = client.retain(tenant, f"The vault code is {SECRET} for the north door").memory_id
        other = client.retain(tenant, "The south door opens with the brass key").memory_id
    server.stop()
    connection = apsw.Connection(str(server.tenant_file(tenant)))
    connection.execute(
        "DROP TABLE memories_fts; CREATE VIRTUAL TABLE memories_fts USING fts5(body, content='', "
        "contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2'); "
        "INSERT INTO memories_fts(rowid, body) SELECT id, body FROM memories; DROP INDEX oplog_result_memory; "
        # and without what later versions added (time and thread), so that their migrations run too
        "DROP INDEX memories_thread; ALTER TABLE memories DROP COLUMN occurred_at; "
        "ALTER TABLE memories DROP COLUMN thread_id; ALTER TABLE memories DROP COLUMN thread_position; "
        "DROP TABLE memory_versions; ALTER TABLE memories DROP COLUMN updated_at; "
        "ALTER TABLE memories DROP COLUMN index_words; "
        "DROP TABLE consolidation_journal; DROP TABLE consolidated_threads; "  # and consolidation's
        "ALTER TABLE memories DROP COLUMN speaker; "  # and the speaker's
        "PRAGMA user_version = 6"
    )
    connection.close()
    server.start()
    with MemoryClient(server.target) as client:
        assert [h.memory.id for h in client.recall(tenant, "brass key south", k=1)] == [other]
        client.forget(tenant, memory_id)
        assert _traces(server.data_dir, _needles([])) == []
        assert [h.memory.id for h in client.recall(tenant, "door", k=5)] == [other]
    connection = apsw.Connection(str(server.tenant_file(tenant)), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert connection.pragma("user_version") == SCHEMA_VERSION
        assert (
            "contentless_delete"
            not in connection.execute("SELECT sql FROM sqlite_master WHERE name = 'memories_fts'").fetchone()[0]
        )
        # The operation-log rows of a forgotten memory are found by index, not by a scan of the log.
        plan = connection.execute(
            "EXPLAIN QUERY PLAN UPDATE oplog SET payload = '' WHERE result IS NOT NULL AND json_valid(result) "
            "AND json_extract(result, '$.memory_id') = 1"
        ).fetchall()
        assert "USING INDEX oplog_result_memory" in str(plan), plan
    finally:
        connection.close()
