"""Erasure that leaves no trace: after a forget returns, no byte of anything the memory held (its
text, metadata, speaker, thread, versions, facts, embedding...) is left in any file under the data
directory, whichever surface wrote it and whichever way it was forgotten, and no read serves it; a
record's own delete erases it; the audit chain still verifies
and the ledger's hashes of a memory are keyed with a key that is gone."""

from __future__ import annotations

import json
import random
import re
import secrets
import shutil
import string
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import apsw
import grpc
import httpx2
import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mnemosyne.cli.server_process import ServerProcess
from mnemosyne.client import (
    DeadlineExceededError,
    FlushResult,
    Memory,
    MemoryClient,
    NotFoundError,
    PermissionDeniedError,
    RecordChange,
    RetainItem,
    ThreadRef,
    UnavailableError,
)
from mnemosyne.engine.ann import read_index_file
from mnemosyne.engine.types import WEBHOOK_KINDS
from mnemosyne.store import ledger
from mnemosyne.store.metadata_index import INDEXED_METADATA_KEYS
from mnemosyne.store.schema import (
    _V_FORGOTTEN_CLEARED,
    ERASURE,
    FORGET_KEEPS,
    MIGRATIONS,
    SCHEMA_VERSION,
    forgotten_columns,
)
from mnemosyne.store.tenant_store import TenantStore
from mnemosyne.transport.http.mem0_endpoints import ENTITY_FIELDS
from mnemosyne.transport.server import SERVICES
from mnemosyne.v1 import events_pb2, memory_pb2, types_pb2, workspace_pb2
from tests.http_support import call
from tests.http_support import request as http_request
from tests.mem0_support import Mem0Client
from tests.support import sql_row, tokens_json, wait_until

# One long token that the full-text tokenizer keeps whole (letters and digits, no stem to strip).
# What the schema's acceptance migration (_V_ACCEPTANCE) added, undone: a file of a version before it.
UNDO_ACCEPTANCE = (
    "DROP INDEX oplog_open_fingerprint; ALTER TABLE oplog DROP COLUMN fingerprint; "
    "ALTER TABLE memories DROP COLUMN acceptance; DELETE FROM meta WHERE key = 'timeline'; "
)
# What the webhooks' migration (_V_WEBHOOKS, store/webhook_schema.py) added, undone: a file before it.
UNDO_WEBHOOKS = (
    "DROP TRIGGER webhook_ledger_outbox; DROP TRIGGER webhook_oplog_outbox; DROP TABLE webhook_outbox; "
    "DROP TABLE webhook_kind_of_op; DROP TABLE webhook_kinds; DROP TABLE webhook_secrets; "
    "DROP TABLE webhook_subscriptions; "
)
# What _V_EXPIRY_AND_REVISIONS added (issue 43), undone to make a file of an earlier version.
UNDO_REEMBED = "DROP TABLE reembed_vectors; "
UNDO_METADATA_PAIRS = (
    "DROP TRIGGER metadata_pairs_added; DROP TRIGGER metadata_pairs_changed; DROP TRIGGER metadata_pairs_removed; "
    "DROP TABLE metadata_pairs; "
)
UNDO_METADATA_INDEXES = "".join(
    f"DROP INDEX memories_metadata_{key.replace('.', '_')}; " for key in INDEXED_METADATA_KEYS
)
UNDO_EXPIRY_AND_REVISIONS = (
    "DROP INDEX memories_expires; ALTER TABLE memories DROP COLUMN expires_at; "
    "DROP TABLE memory_revisions; DROP TABLE record_revisions; "
)
# What _V_EXPIRY_CHANGES_DELIVERED added, undone (before UNDO_WEBHOOKS, which drops its table).
UNDO_EXPIRY_CHANGES_DELIVERED = "DELETE FROM webhook_kind_of_op WHERE op = 'expiry'; "
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


def texts_left(data_dir: Path, texts: Iterable[str]) -> dict[str, list[str]]:
    """The files of ``data_dir`` holding any of ``texts`` (as written, or lower-cased as the
    full-text index keeps a word), each with the texts found. GNU grep's fixed-string search
    looks for all of them in one pass over each file, byte by byte (LC_ALL=C); Python's regular
    expression of hundreds of alternatives was the slowest step of the tests that scan."""
    wanted = {t.encode(): t for text in texts for t in (text, text.lower())}
    assert all(b"\n" not in w and w for w in wanted), "grep matches within a line"
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in data_dir.rglob("*") if p.is_file()):
        # -a: the files are binary; -o: each match alone; -f -: the texts from stdin; 1: none found.
        run = subprocess.run(
            ["grep", "-aoF", "-f", "-", str(path)], input=b"\n".join(wanted), capture_output=True, env={"LC_ALL": "C"}
        )
        assert run.returncode in (0, 1), run.stderr
        hits = sorted({wanted[m] for m in run.stdout.splitlines() if m in wanted})
        if hits:
            found[str(path.relative_to(data_dir))] = hits
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


def test_an_erasure_cut_short_by_a_kill_is_finished_at_the_next_start(server_factory, tenant: str) -> None:
    """SIGKILL after the forget committed, before the WAL was emptied: the earlier pages are still
    in the tenant's files then; the restarted server erases them soon after it starts, though no
    call names the tenant (they stayed until one did: a tenant nobody called kept them for good)."""
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
    wait_until(lambda: _traces(process.data_dir, needles) == [], seconds=10)  # no call names the tenant
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
            (key,) = sql_row(connection, "SELECT key FROM memory_keys WHERE memory_id = ?", (memory_id,))
            (entry_json,) = sql_row(
                connection,
                "SELECT entry FROM ledger WHERE json_extract(entry, '$.memory_id') = ? AND "
                "json_extract(entry, '$.op') = 'retain'",
                (memory_id,),
            )
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
        timeline = log[0].pop("timeline")  # what tells its consistency tokens from forged ones, later
        assert re.fullmatch("[0-9a-f]{16}", timeline), timeline
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


def test_an_erasure_killed_after_its_receipt_is_finished_at_the_next_start(
    server_factory, tenant: str, tmp_path: Path
) -> None:
    """The receipt is the erasure's commit. A process killed between the receipt and the removal
    of the files left the whole tenant, served again after the restart (listed, its memories, its
    queued fast writes) under a receipt saying it was erased; now the start finishes the erasure."""
    other = f"{tenant}-kept"
    held = tmp_path / "hold-backlog"  # the fast write stays queued: the head hash read below stays the file's
    held.touch()
    faults = {"MNEMOSYNE_TEST_FAULTS": "kill@erase_receipted", "MNEMOSYNE_TEST_HOLD_BACKLOG": str(held)}
    server = server_factory(env=faults).start()
    with MemoryClient(server.target, retries=0) as client:
        client.retain(tenant, f"Tenant secret {SECRET}")
        client.hot_path(tenant, "enable")
        client.retain(tenant, f"a queued note of the tenant {SECRET}", fast=True)
        client.retain(other, "a memory of another tenant")
        head = client.verify_integrity(tenant).head_hash
        with pytest.raises(UnavailableError):
            client.erase_tenant(tenant)  # the process dies right after the receipt is synced
    assert server.wait_exit() != 0
    log = [json.loads(line) for line in (server.data_dir / "erasures.jsonl").read_text().splitlines()]
    assert [(r["tenant"], r["head_hash"]) for r in log] == [(tenant, head)]
    for name in faults:
        server.env.pop(name)
    server.start()
    assert [p.name for p in server.data_dir.rglob("*") if tenant in p.name and other not in p.name] == []
    assert _traces(server.data_dir, _needles([])) == []
    with MemoryClient(server.target) as client:
        assert tenant not in client.list_tenants().tenants and other in client.list_tenants().tenants
        assert client.list_memories(tenant).memories == []
        assert client.retain(tenant, "a first memory of the new tenant").memory_id == 1
        assert client.hot_path(tenant, "status").enabled is False
    server.stop()
    server.start()  # the new tenant of that name is not the receipted one: it stays
    with MemoryClient(server.target) as client:
        assert [m.text for m in client.list_memories(tenant).memories] == ["a first memory of the new tenant"]
        assert len((server.data_dir / "erasures.jsonl").read_text().splitlines()) == 1


def test_tenant_erasures_through_sigkills_at_random_moments_are_whole_or_absent(server_factory, tenant: str) -> None:
    """Tenants written then erased one after another while the server is SIGKILLed at random
    moments and restarted. Afterwards an erasure acknowledged left its tenant nowhere (listed
    nowhere, no file, no trace of its text in any file) and a receipt; one whose reply the kill
    took left the tenant whole or erased with a receipt, never part of it; every other tenant is
    whole, and no file is left under a temporary name."""
    server = server_factory().start()
    stop = threading.Event()
    written: dict[str, list[str]] = {}  # tenant -> its texts, acknowledged
    erased: set[str] = set()  # erasures acknowledged
    unknown: set[str] = set()  # erasures sent whose reply the kill took

    def writer() -> None:
        for n in range(10_000):
            name, texts = f"{tenant}-{n}", [f"note {k} of {n}: {secrets.token_hex(12)}" for k in range(3)]
            if stop.is_set():
                return
            try:
                with MemoryClient(server.target, retries=0, timeout=10) as client:
                    client.retain_batch(name, texts)
                    written[name] = texts
                    if n % 3:  # every third tenant is kept
                        client.erase_tenant(name)
                        erased.add(name)
            except (UnavailableError, DeadlineExceededError):
                if name in written and n % 3:
                    unknown.add(name)
                time.sleep(0.05)

    def erasures(count: int) -> Callable[[], bool]:
        return lambda: len(erased) >= count

    thread = threading.Thread(target=writer)
    thread.start()
    rng = random.Random(20261207)
    try:
        for _ in range(2):  # after a few erasures (whatever the machine's speed), at a random moment
            wait_until(erasures(len(erased) + rng.randint(1, 3)), 30)
            time.sleep(rng.uniform(0, 0.1))
            server.kill()
            server.restart()
        wait_until(erasures(len(erased) + 1), 30)
    finally:
        stop.set()
        thread.join(timeout=60)
    receipts = {json.loads(line)["tenant"] for line in (server.data_dir / "erasures.jsonl").read_text().splitlines()}
    with MemoryClient(server.target) as client:
        listed = set(client.list_tenants().tenants)
        for name, texts in written.items():
            if name in erased or (name in unknown and name in receipts):
                assert name not in listed and name in receipts, name
                assert not [p for p in server.data_dir.rglob("*") if p.name.split(".")[0] == name], name
            else:
                assert sorted(m.text for m in client.list_memories(name).memories) == sorted(texts), name
                assert client.verify_integrity(name).valid
    server.stop()
    assert [p.name for p in (server.data_dir / "tenants").iterdir() if p.name.startswith(".")] == []
    gone = [t for name in erased | (unknown & receipts) for t in written[name]]
    assert texts_left(server.data_dir, gone) == {}


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


@pytest.mark.parametrize("key", ["mem0.user_id", "topic"])
def test_a_forget_erases_its_entity_ids_from_a_large_tenant_s_index(server_factory, tenant: str, key: str) -> None:
    """3,000 memories, each with an id of its own under a mem0 entity key (its expression index)
    or a key of the caller's own (the pairs table, store/metadata_index.py), over many pages: a
    forgotten memory's id leaves every file, whichever page held it (the forget clears the
    metadata, and the index's entry goes under secure_delete)."""
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        ids: list[int] = []
        for start in range(0, 3000, 500):
            items = [RetainItem(text=f"entry {i}", metadata={key: _token(i)}) for i in range(start, start + 500)]
            ids.extend(r.memory_id for r in client.retain_batch(tenant, items))
        victims = list(range(5, 3000, 59))  # 51 memories spread over every page
        needles = {w for i in victims for w in _windows(_token(i).encode())}
        assert _traces(server.data_dir, needles), "the search must find the ids before the forgets"
        for i in victims:
            client.forget(tenant, ids[i])
        assert _traces(server.data_dir, needles) == []
        # The others are still found by their ids.
        hits = client.recall(tenant, "entry", k=5, filters={key: _token(6)})
        assert [h.memory.id for h in hits] == [ids[6]]
        assert client.verify_integrity(tenant).valid


def test_a_forget_erases_its_thread_id_from_a_large_tenant_s_thread_index(server_factory, tenant: str) -> None:
    """3,000 memories, each in a thread of its own id, inserted out of the thread index's order:
    the index's pages split as it grows, and SQLite copies the entries that move to the new page
    without zeroing the room they leave, outside the cells secure_delete overwrites. A forgotten
    memory's thread id was found there (one of these 51) before every page written had that room
    cleared (store/page_scrub.py; tests/test_page_rooms.py)."""
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        ids: list[int] = []
        for start in range(0, 3000, 500):
            items = [RetainItem(text=f"entry {i}", thread=ThreadRef(_token(i), 0)) for i in range(start, start + 500)]
            ids.extend(r.memory_id for r in client.retain_batch(tenant, items))
        victims = list(range(5, 3000, 59))
        needles = {w for i in victims for w in _windows(_token(i).encode())}
        assert _traces(server.data_dir, needles), "the search must find the thread ids before the forgets"
        for i in victims:
            client.forget(tenant, ids[i])
        assert _traces(server.data_dir, needles) == []


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
    connection.pragma("secure_delete", True)  # the tables rewritten here leave no copy of a row behind
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
        + UNDO_METADATA_PAIRS  # and the metadata pairs
        + UNDO_METADATA_INDEXES  # and the metadata indexes
        + UNDO_REEMBED  # and a re-embedding's table
        + UNDO_EXPIRY_CHANGES_DELIVERED  # and the expiry changes' deliveries
        + UNDO_EXPIRY_AND_REVISIONS  # and expiry's and revisions'
        + UNDO_WEBHOOKS  # and the webhooks'
        + UNDO_ACCEPTANCE  # and the acceptance positions'
        + "PRAGMA user_version = 6"
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
            not in sql_row(connection, "SELECT sql FROM sqlite_master WHERE name = 'memories_fts'")[0]
        )
        # The operation-log rows of a forgotten memory are found by index, not by a scan of the log.
        plan = connection.execute(
            "EXPLAIN QUERY PLAN UPDATE oplog SET payload = '' WHERE result IS NOT NULL AND json_valid(result) "
            "AND json_extract(result, '$.memory_id') = 1"
        ).fetchall()
        assert "USING INDEX oplog_result_memory" in str(plan), plan
    finally:
        connection.close()


# -- every field a client can write, on every surface ---------------------------------------------
#
# Each string field a client can write gets a secret of its own, on every surface: gRPC and
# HTTP/JSON (the fields walked from the write RPCs' request messages, so a new field is written
# without being named here), mem0's REST API through the official client, MCP through the
# official SDK (the tool table's own argument schemas), synchronous and fast writes. The test
# then erases (records by their own delete, memories by every kind of forget) and byte-scans
# every file under the data directory, recursively, for every secret.

# What a forget keeps of what a client wrote, and why (docs/operations.md, "What a forgotten memory
# shows"): names and keys, never content. A field named here (by its name in any message, or as
# Message.field) gets no secret.
STRUCTURAL: dict[str, str] = {
    "tenant": "the tenant's name: its file's name",
    "request_id": "an idempotency key, kept for its retention so a retried write does not write again",
    "RetainRequest.scope": "a namespace, not content: it stays on the forgotten memory and in the ledger",
    "RetainItem.scope": "the same",
    "UpdateWorkspaceRequest.workspace": "a workspace's name (a scope)",
    "EditRecordsRequest.scope": "a scope",
    "ConsolidateRequest.scope": "a scope",
    "RecordChange.key": "a record's name: the audit chain names it in plain text",
    "ConsolidateRequest.receipt_id": "a receipt, kept forever so it applies once",
    "ConsolidateSessionRequest.thread": "names a thread a Retain wrote (its secret is that one's)",
}
# Every RPC: those that store what a client writes, and why each other one stores none of its
# strings. A new RPC fails the test until it is placed here.
WRITES = {
    "MemoryService.Retain",
    "MemoryService.RetainBatch",
    "MemoryService.UpdateMemory",
    "WorkspaceService.UpdateGlobal",
    "WorkspaceService.UpdateWorkspace",
    "WorkspaceService.EditRecords",
    "WorkspaceService.Consolidate",
    "WorkspaceService.ConsolidateSession",
}
_READ = "a read: nothing of the request is stored"
_ERASE = "an erasure: its strings are filters"
_CONTROL = "a control: ids, flags, numbers and an idempotency key"
STORE_NO_CONTENT = {
    **dict.fromkeys(
        [
            "MemoryService.Recall",
            "MemoryService.GetMemory",
            "MemoryService.ListMemories",
            "MemoryService.ListMemoryVersions",
            "AdminService.VerifyIntegrity",
            "AdminService.Stats",
            "AdminService.ListTenants",
            "AdminService.AggregateStats",
            "AdminService.Ping",
            "AdminService.WhoAmI",
            "AdminService.GetTenantFigures",  # counts and sizes only
            "AdminService.ListTenantFigures",
            "AdminService.Backup",
            "AdminService.ExportTenant",
            "WorkspaceService.AssembleContext",
            "WorkspaceService.GetRecord",
            "WorkspaceService.ListRecords",
            "WorkspaceService.ListScopes",
            "MemoryService.ListMemoryRevisions",
            "MemoryService.GetExpiryPolicy",
            "WorkspaceService.ListRecordRevisions",
            "HotPathService.Status",
            "EventsService.GetEvent",
            "EventsService.ListEvents",
            "EventsService.WatchEvents",
        ],
        _READ,
    ),
    **dict.fromkeys(["MemoryService.ForgetMemory", "MemoryService.ForgetMemories", "AdminService.EraseTenant"], _ERASE),
    **dict.fromkeys(
        [
            "HotPathService.Enable",
            "HotPathService.Disable",
            "HotPathService.Flush",
            "AdminService.Dedup",
            "AdminService.ReembedTenant",
            "MemoryService.RevertMemory",
            "MemoryService.SetExpiryPolicy",
        ],
        _CONTROL,
    ),
    "WorkspaceService.RevertRecord": "a revert: the content it puts is an earlier revision's; its scope and key are names",
    "AdminService.ImportTenant": "a whole tenant from its archive: the content is the exported tenant's",
    "AdminService.MoveTenant": "a tenant's file moved as it is",
    "AdminService.ActivateTenant": "a moved tenant's last step",
    "AdminService.ChangeMembers": "a change of the member list: member ids in a mark beside the tenant files",
    **dict.fromkeys(["WebhookService.ListWebhooks", "WebhookService.ListWebhookDeliveries"], _READ),
    **dict.fromkeys(["WebhookService.DeleteWebhook", "WebhookService.ResumeWebhook"], _CONTROL),
    **dict.fromkeys(
        ["WebhookService.CreateWebhook", "WebhookService.RotateWebhookSecret"],
        "a subscription: an address and secrets; a delivery's memory text goes with its memory (below)",
    ),
}
RPCS = {f"{service.name}.{rpc.name}": rpc for service in SERVICES for rpc in service.methods}
# The fields of the record writes: erased by the record's own delete, not a forget.
RECORD_FIELDS = {
    "UpdateGlobalRequest.content",
    "RecordChange.content",
    "memory_update.content",
    "update_workspace.changes[].content",
}
# mem0's add and update bodies (transport/http/mem0.py): its messages, metadata and entity ids.
MEM0_FIELDS = {
    "add.messages[].content",
    "add.messages[].name",
    "add.metadata{key}",
    "add.metadata{value}",
    *(f"add.{name}" for name in ENTITY_FIELDS),
    "update.text",
    "update.metadata{key}",
    "update.metadata{value}",
}
# The MCP tools: those that write (their string arguments get secrets) and those that only read.
MCP_WRITES = {"retain", "memory_update", "update_workspace"}
MCP_READS = {"read_memory", "recall", "get_event_status", "list_events", "flush"}
# The arguments a forget keeps (a record's name) or that hold no content (put or delete): their values.
# A tool's consistency_token is a token the server made, never stored: left unset.
MCP_STRUCTURAL = {
    "update_workspace.changes[].key": "mcp.md",
    "update_workspace.changes[].op": "put",
    "retain.consistency_token": None,
}
_TIMESTAMP = "google.protobuf.Timestamp"
_SECRET_CHARACTERS = string.ascii_letters + string.digits


class FieldSecrets:
    """A secret of its own (24 letters and digits) for each field written, by label; and the
    fields each surface wrote."""

    def __init__(self) -> None:
        self.by_label: dict[str, str] = {}
        self.fields: dict[str, set[str]] = {}

    def new(self, surface: str, field_path: str) -> str:
        value = "".join(secrets.choice(_SECRET_CHARACTERS) for _ in range(24))
        self.by_label[f"{surface} {field_path} #{len(self.by_label)}"] = value
        self.fields.setdefault(surface, set()).add(field_path)
        return value

    def of(self, kind: Callable[[str], bool]) -> dict[str, str]:
        return {label: value for label, value in self.by_label.items() if kind(label.split(" ")[1])}

    def served(self, answer: str | bytes) -> list[str]:
        """Labels of the secrets an answer holds (as written or lower-cased)."""
        text = answer.decode(errors="replace") if isinstance(answer, bytes) else answer
        return [label for label, value in self.by_label.items() if value in text or value.lower() in text]


def _structural(field_path: str) -> bool:
    return field_path in STRUCTURAL or field_path.rsplit(".", 1)[-1] in STRUCTURAL


def writable_fields(message: Descriptor) -> set[str]:
    """Every string or bytes field (map keys and values, nested and repeated messages' fields) of
    a request message that is not STRUCTURAL, as Message.field (a map's: field{key}, field{value})."""
    found: set[str] = set()
    for field in message.fields:
        field_path = f"{message.name}.{field.name}"
        if _structural(field_path):
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            assert key.type == value.type == FieldDescriptor.TYPE_STRING, field_path
            found |= {f"{field_path}{{key}}", f"{field_path}{{value}}"}
        elif field.message_type is not None and field.message_type.full_name != _TIMESTAMP:
            found |= writable_fields(field.message_type)
        elif field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
            found.add(field_path)
    return found


M = TypeVar("M", bound=Message)


def fill(message: M, surface: str, field_secrets: FieldSecrets, skip: tuple[str, ...] = ()) -> M:
    """Set every field ``writable_fields`` names (but those in ``skip``) to a secret of its own (a
    map gets one pair, a repeated message one element); returns the message."""
    for field in message.DESCRIPTOR.fields:
        field_path = f"{message.DESCRIPTOR.name}.{field.name}"
        if _structural(field_path) or field_path in skip:
            continue
        repeated = field.is_repeated
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key = field_secrets.new(surface, f"{field_path}{{key}}")
            getattr(message, field.name)[key] = field_secrets.new(surface, f"{field_path}{{value}}")
        elif field.message_type is not None and field.message_type.full_name != _TIMESTAMP:
            fill(
                getattr(message, field.name).add() if repeated else getattr(message, field.name), surface, field_secrets
            )
        elif field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
            text = field_secrets.new(surface, field_path)
            secret = text.encode() if field.type == FieldDescriptor.TYPE_BYTES else text
            if repeated:
                getattr(message, field.name).append(secret)
            else:
                setattr(message, field.name, secret)
    return message


Send = Callable[..., Any]


def _grpc_sender(client: MemoryClient) -> Send:
    """Any RPC by its name over the client's channel (the request as built, nothing added)."""

    def send(rpc: str, request: Message, headers: dict[str, str] | None = None) -> Any:
        method = RPCS[rpc]
        call: grpc.UnaryUnaryMultiCallable[Message, Message] = client.channel.unary_unary(
            f"/{method.containing_service.full_name}/{method.name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=GetMessageClass(method.output_type).FromString,
        )
        return call(request, metadata=tuple((headers or {}).items()), timeout=60)

    return send


def _http_sender(port: int) -> Send:
    """Any RPC by its name through its HTTP/JSON route (the protos' google.api.http options)."""

    def send(rpc: str, request: Message, headers: dict[str, str] | None = None) -> Any:
        reply = call(port, RPCS[rpc].name, request, headers)
        assert reply.status == 200, (rpc, reply.body)
        return json_format.Parse(reply.body, GetMessageClass(RPCS[rpc].output_type)(), ignore_unknown_fields=True)

    return send


_CREATED = (types_pb2.RetainResult.CREATED, types_pb2.RetainResult.ENQUEUED)


def _generation(client: MemoryClient, tenant: str, scope: str) -> int:
    return next((s.generation for s in client.list_scopes(tenant) if s.scope == scope), 0)


def _write_through_every_rpc(
    client: MemoryClient, send: Send, tenant: str, surface: str, s: FieldSecrets
) -> memory_pb2.RetainRequest:
    """Every write RPC (Retain as a text and as a conversation, fast and not), each field a secret
    of its own; returns the first Retain, whose thread was consolidated into its scope's MEMORY.md."""
    scope = f"workspace/{surface}"

    def retain(conversation: bool, fast: bool) -> memory_pb2.RetainRequest:
        # A conversation instead of a text (both: TEXT_AND_MESSAGES).
        skip = ("RetainRequest.text",) if conversation else ("RetainRequest.messages",)
        request = fill(memory_pb2.RetainRequest(tenant=tenant, scope=scope, fast=fast), surface, s, skip)
        request.thread.position = 1
        request.occurred_at.FromSeconds(1_700_000_000)
        result = send("MemoryService.Retain", request).result
        assert result.status in _CREATED, result
        return request

    first = retain(conversation=False, fast=False)
    retain(conversation=True, fast=False)
    batch = memory_pb2.RetainBatchRequest(tenant=tenant, request_id=f"{surface}-batch")
    fill(batch, surface, s)
    fill(batch.items.add(), surface, s)
    for item in batch.items:
        item.scope = scope
    results = send("MemoryService.RetainBatch", batch).results
    assert all(r.status == types_pb2.RetainResult.CREATED for r in results), results
    # Replaced under its id: the batch's first text and metadata become its version 1.
    update = fill(memory_pb2.UpdateMemoryRequest(tenant=tenant, memory_id=results[0].memory_id), surface, s)
    update.replace_metadata = True
    assert send("MemoryService.UpdateMemory", update).updated
    # Fast writes: through the inbox, the operation log and a worker.
    client.hot_path(tenant, "enable")
    retain(conversation=False, fast=True)
    fast_batch = fill(memory_pb2.RetainBatchRequest(tenant=tenant, fast=True), surface, s)
    fast_batch.items[0].scope = scope
    assert send("MemoryService.RetainBatch", fast_batch).results[0].status == types_pb2.RetainResult.ENQUEUED
    flushed = client.hot_path(tenant, "flush")
    assert isinstance(flushed, FlushResult) and flushed.failed == 0, flushed
    client.hot_path(tenant, "disable")
    # Records, each under the generation the writer observed.
    gen = {"mnemosyne-global-generation": str(_generation(client, tenant, "global"))}
    send("WorkspaceService.UpdateGlobal", fill(workspace_pb2.UpdateGlobalRequest(tenant=tenant), surface, s), gen)
    put = workspace_pb2.RecordChange.PUT
    changes: list[
        tuple[
            str,
            workspace_pb2.UpdateWorkspaceRequest | workspace_pb2.EditRecordsRequest | workspace_pb2.ConsolidateRequest,
        ]
    ] = [
        ("WorkspaceService.UpdateWorkspace", workspace_pb2.UpdateWorkspaceRequest(tenant=tenant, workspace=surface)),
        ("WorkspaceService.EditRecords", workspace_pb2.EditRecordsRequest(tenant=tenant, scope=scope)),
        ("WorkspaceService.Consolidate", workspace_pb2.ConsolidateRequest(tenant=tenant, scope=scope)),
    ]
    for rpc, request in changes:
        fill(request, surface, s)
        request.changes[0].op, request.changes[0].key = put, f"{rpc.rsplit('.', 1)[1].lower()}.md"
        if isinstance(request, workspace_pb2.UpdateWorkspaceRequest):
            send(rpc, request, {"mnemosyne-workspace-generation": str(_generation(client, tenant, scope))})
            continue
        request.expected_generation = _generation(client, tenant, scope)
        if isinstance(request, workspace_pb2.ConsolidateRequest):
            request.receipt_id = f"{surface}-receipt"
        send(rpc, request)
    # The first Retain's thread becomes a section of its scope's MEMORY.md.
    consolidate = workspace_pb2.ConsolidateSessionRequest(tenant=tenant, thread=first.thread.id)
    session = send("WorkspaceService.ConsolidateSession", consolidate)
    assert [o.outcome for o in session.scopes] == [workspace_pb2.SessionScopeOutcome.OUTCOME_APPLIED], session
    return first


# Where a secret of letters and digits can be in a file: in a run of them as bytes, or in UTF-16
# (either byte order). Reading the runs once and indexing their 8-character windows makes a scan
# of hundreds of secrets one pass over each file.
_RUNS = (
    (re.compile(rb"[A-Za-z0-9]{8,}"), "ascii"),
    (re.compile(rb"(?:[A-Za-z0-9]\x00){8,}"), "utf-16-le"),
    (re.compile(rb"(?:\x00[A-Za-z0-9]){8,}"), "utf-16-be"),
)


def _text_windows(data: bytes) -> set[str]:
    windows: set[str] = set()
    for pattern, encoding in _RUNS:
        for run in pattern.finditer(data):
            text = run.group().decode(encoding)
            windows.update(text[i : i + 8] for i in range(len(text) - 7))
    return windows


def _found(data_dir: Path, by_label: dict[str, str]) -> dict[str, list[str]]:
    """label -> the files under ``data_dir`` (every file, recursively) holding an 8-character
    window of its secret, as written or lower-cased, as bytes or UTF-16."""
    files = {
        p.relative_to(data_dir).as_posix(): _text_windows(p.read_bytes()) for p in data_dir.rglob("*") if p.is_file()
    }
    found: dict[str, list[str]] = {}
    for label, value in by_label.items():
        windows = {w[i : i + 8] for w in (value, value.lower()) for i in range(len(w) - 7)}
        where = [name for name, held in files.items() if windows & held]
        if where:
            found[label] = where
    return found


def _all_memories(client: MemoryClient, tenant: str, *, include_forgotten: bool = False) -> list[Memory]:
    memories: list[Memory] = []
    token = ""
    while True:
        page = client.list_memories(tenant, page_size=100, page_token=token, include_forgotten=include_forgotten)
        memories.extend(page.memories)
        token = page.next_page_token
        if not token:
            return memories


def _write_through_mem0(mem0: Mem0Client, client: MemoryClient, tenant: str, s: FieldSecrets) -> None:
    """mem0's add (one message, and a conversation: their contents and names; a role is one of
    mem0's three, no content) with metadata and every entity id, synchronous and fast, and its
    update of text and metadata."""

    def add(turns: int) -> dict[str, str]:
        name = s.new("mem0", "add.messages[].name")
        messages = [
            {"role": role, "content": s.new("mem0", "add.messages[].content"), "name": name}
            for role in ("user", "assistant")[:turns]
        ]
        entities = {entity: s.new("mem0", f"add.{entity}") for entity in ENTITY_FIELDS}
        metadata = {s.new("mem0", "add.metadata{key}"): s.new("mem0", "add.metadata{value}")}
        added = mem0.call("add", messages=messages, metadata=metadata, **entities)
        assert added["status"] in ("SUCCEEDED", "PENDING"), added
        return entities

    single = add(1)
    add(2)
    (memory,) = client.list_memories(tenant, metadata_equals={"mem0.user_id": single["user_id"]}).memories
    metadata = {s.new("mem0", "update.metadata{key}"): s.new("mem0", "update.metadata{value}")}
    mem0.call("update", memory_id=str(memory.id), text=s.new("mem0", "update.text"), metadata=metadata)
    client.hot_path(tenant, "enable")
    add(2)  # queued: the hot path's
    client.hot_path(tenant, "flush")
    client.hot_path(tenant, "disable")
    assert s.fields["mem0"] == MEM0_FIELDS


def _mcp(server: ServerProcess, tenant: str) -> Client:
    transport = streamable_http_client(
        f"{server.http_url}/mcp?tenant={tenant}", http_client=httpx2.AsyncClient(timeout=30)
    )
    return Client(transport)


def _tool_arguments(tool: str, schema: dict[str, Any], s: FieldSecrets) -> dict[str, Any]:
    """A tool's arguments from its input schema: each string a secret of its own, the structural
    ones their value; numbers and flags keep their defaults."""
    definitions = schema.get("$defs", {})

    def value(path: str, prop: dict[str, Any]) -> Any:
        if "$ref" in prop:
            prop = definitions[prop["$ref"].rsplit("/", 1)[1]]
        kinds = {option.get("type") for option in prop.get("anyOf", [prop])}
        if path in MCP_STRUCTURAL:
            return MCP_STRUCTURAL[path]
        if "string" in kinds:
            return s.new("mcp", path)
        if "array" in kinds:
            return [value(f"{path}[]", prop["items"])]
        if "object" in kinds:
            return {name: value(f"{path}.{name}", sub) for name, sub in prop["properties"].items()}
        return None

    arguments = {name: value(f"{tool}.{name}", prop) for name, prop in schema["properties"].items()}
    return {name: v for name, v in arguments.items() if v is not None}


def _tool_text(result: Any) -> str:
    assert not result.is_error, result
    return "\n".join(getattr(part, "text", "") for part in result.content)


def _write_through_mcp(server: ServerProcess, client: MemoryClient, tenant: str, s: FieldSecrets) -> None:
    """Every writing tool of the MCP server, each string argument of its schema a secret of its
    own; retain also fast."""

    async def run() -> None:
        async with _mcp(server, tenant) as c:
            tools = {tool.name: tool for tool in (await c.list_tools()).tools}
            assert set(tools) == MCP_WRITES | MCP_READS, "place the new tool in MCP_WRITES or MCP_READS"
            _tool_text(await c.call_tool("read_memory", {}))
            for name in sorted(MCP_WRITES):
                _tool_text(await c.call_tool(name, _tool_arguments(name, tools[name].input_schema, s)))
            client.hot_path(tenant, "enable")
            retain = _tool_arguments("retain", tools["retain"].input_schema, s)
            assert "Queued" in _tool_text(await c.call_tool("retain", {**retain, "fast": True}))
            _tool_text(await c.call_tool("flush", {}))
            client.hot_path(tenant, "disable")

    anyio.run(run)


def _merged_and_superseded(send: Send, client: MemoryClient, tenant: str, s: FieldSecrets) -> None:
    """A near duplicate Dedup merges into an older memory, and a fact that supersedes an older
    one: each memory with every field of its own."""

    def retain(surface: str, text: str) -> types_pb2.RetainResult:
        request = memory_pb2.RetainRequest(tenant=tenant, scope="workspace/history", text=text)
        fill(request, surface, s, skip=("RetainRequest.text", "RetainRequest.messages"))
        result: types_pb2.RetainResult = send("MemoryService.Retain", request).result
        assert result.status == types_pb2.RetainResult.CREATED, result
        return result

    code = s.new("dedup", "text")
    retain("dedup", f"Dana wrote down the locker combination {code} yesterday")
    retain("dedup", f"Dana wrote down the locker combination {code} yesterday evening")
    merged = client.dedup(tenant, merge=True, threshold=0.8)
    assert merged.merged and any(g.duplicates for g in merged.groups), merged
    retain("supersede", f"ticket RF-7 status: {s.new('supersede', 'older status')}")
    assert retain("supersede", f"ticket RF-7 status: {s.new('supersede', 'newer status')}").supersedes


def _undelivered_texts(tenant_file: Path) -> int:
    """Webhook deliveries in the tenant file that hold a memory's text."""
    connection = apsw.Connection(str(tenant_file), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        (count,) = sql_row(connection, "SELECT count(*) FROM webhook_outbox WHERE text IS NOT NULL")
    finally:
        connection.close()
    return int(count)


def _journal(tenant_file: Path) -> tuple[int, int]:
    """(consolidation proposals journaled, threads marked consolidated) in the tenant file."""
    connection = apsw.Connection(str(tenant_file), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        (journaled,) = sql_row(connection, "SELECT count(*) FROM consolidation_journal")
        (marked,) = sql_row(connection, "SELECT count(*) FROM consolidated_threads")
    finally:
        connection.close()
    return int(journaled), int(marked)


def _leave_a_journaled_proposal(client: MemoryClient, tenant: str, first: memory_pb2.RetainRequest) -> None:
    """The session of ``first``'s thread grows by a line its scope's MEMORY.md holds already: its
    proposal is journaled and not applied (nothing new), and stays, quoting the memories."""
    thread = ThreadRef(first.thread.id, 2)
    client.retain_conversation(tenant, [("user", first.text)], scope=first.scope, thread=thread)
    outcomes = client.consolidate_session(tenant, first.thread.id)
    assert [o.outcome for o in outcomes] == ["nothing_new"], outcomes


def _erase_records(client: MemoryClient, tenant: str) -> None:
    """Every record's own erasure: its delete (a replacement leaves the earlier content in the
    write-ahead log until a checkpoint: docs/operations.md#erasure)."""
    for summary in client.list_scopes(tenant):
        records = client.list_records(tenant, summary.scope)
        keys = [r.key for r in records.records]
        if keys:
            changes = [RecordChange("delete", key) for key in keys]
            client.edit_records(tenant, summary.scope, changes, expected_generation=records.generation)


def _forget_every_memory(client: MemoryClient, mem0: Mem0Client, port: int, tenant: str) -> None:
    """Every way to forget: ForgetMemory and ForgetMemories over gRPC and HTTP, mem0's delete and
    delete_all, a kept memory with what Dedup merged into it; then ForgetMemory for the rest."""
    memories = _all_memories(client, tenant)
    of = {scope: [m for m in memories if m.scope == scope and m.metadata] for scope in {m.scope for m in memories}}
    mem0s = [m for m in memories if "mem0.user_id" in m.metadata]
    mem0.call("delete", memory_id=str(mem0s[0].id))
    assert mem0.call("delete_all", user_id=mem0s[1].metadata["mem0.user_id"])["deleted_count"] == 1
    first, second = of["workspace/http"][:2]
    assert call(port, "ForgetMemory", memory_pb2.ForgetMemoryRequest(tenant=tenant, memory_id=first.id)).status == 200
    pair = dict([next(iter(second.metadata.items()))])
    reply = call(port, "ForgetMemories", memory_pb2.ForgetMemoriesRequest(tenant=tenant, metadata_equals=pair))
    assert reply.status == 200 and reply.json()["forgottenCount"] in (1, "1"), reply.body
    assert client.forget_memories(tenant, dict([next(iter(of["workspace/grpc"][0].metadata.items()))])) == 1
    merged = [m for m in memories if m.merged_into]
    assert merged
    for m in merged:
        assert client.forget(tenant, m.merged_into)
        assert client.get_memory(tenant, m.id).forgotten  # forgotten with the memory it was merged into
    for m in _all_memories(client, tenant):
        assert client.forget(tenant, m.id)
    assert all(m.forgotten for m in _all_memories(client, tenant, include_forgotten=True))


def test_every_field_written_on_every_surface_is_erased(server_factory, tmp_path: Path) -> None:
    """A secret in every string field a client can write, on every surface (gRPC, HTTP/JSON, mem0,
    MCP; synchronous and fast; records, a consolidation, a merge, a supersession), is in a file of
    the data directory when written; after each record's own erasure no record content is, and
    after every memory is forgotten none is, in any file, and no read serves one. A forgotten
    memory shows its id, scope and times only."""
    tenant = "erasure-every-field"
    s = FieldSecrets()
    written: set[str] = set()
    server = server_factory(http=True, env={"MNEMOSYNE_ANN_THRESHOLD": "10"}).start()
    with (
        MemoryClient(server.target) as client,
        Mem0Client(server.http_url, "mem0-key", tmp_path, {"mnemosyne-tenant": tenant}) as mem0,
    ):
        assert mem0.construction == {"ok": "ready"}, mem0.construction
        # Every change's delivery with its memory's text, kept while the receiver cannot be reached.
        client.create_webhook(tenant, "http://receiver.invalid/in", list(WEBHOOK_KINDS), include_text=True)

        def written_now(surface: str) -> None:
            """Positive control: each secret the surface just wrote is in a file."""
            labels = {label: v for label, v in s.by_label.items() if label.startswith(f"{surface} ")}
            missing = sorted(set(labels) - set(_found(server.data_dir, labels)))
            assert labels and not missing, f"written but in no file (the scan must find them): {missing}"
            written.update(labels)

        assert {*WRITES, *STORE_NO_CONTENT} == set(RPCS), "place the new RPC in WRITES or STORE_NO_CONTENT"
        proto_fields = set().union(*(writable_fields(RPCS[rpc].input_type) for rpc in WRITES))
        firsts = {}
        for surface, send in [("grpc", _grpc_sender(client)), ("http", _http_sender(server.http_port))]:
            firsts[surface] = _write_through_every_rpc(client, send, tenant, surface, s)
            assert s.fields[surface] == proto_fields, "a writable field no request of the test sets"
            written_now(surface)
        _write_through_mem0(mem0, client, tenant, s)
        written_now("mem0")
        _write_through_mcp(server, client, tenant, s)
        written_now("mcp")
        _merged_and_superseded(_grpc_sender(client), client, tenant, s)
        written_now("dedup")
        written_now("supersede")
        _leave_a_journaled_proposal(client, tenant, firsts["grpc"])
        assert _journal(server.tenant_file(tenant))[0] >= 1
        client.recall(tenant, "locker combination", k=5)  # the first need of the approximate index
        ann_file = server.tenant_file(tenant).with_suffix(".ann")
        wait_until(ann_file.exists)
        ids = [m.id for m in _all_memories(client, tenant)]
        vectors = _vectors(server.tenant_file(tenant), ids)
        assert len(vectors) == len(ids) - 1 and _traces(server.data_dir, set(vectors))  # the merged one has none

        # A record's content goes with the record's own erasure: its delete.
        _erase_records(client, tenant)
        record_labels = s.of(lambda field: field in RECORD_FIELDS)
        assert record_labels and _found(server.data_dir, record_labels) == {}

        assert _undelivered_texts(server.tenant_file(tenant)) > 0  # the webhooks' deliveries hold texts
        _forget_every_memory(client, mem0, server.http_port, tenant)
        assert _undelivered_texts(server.tenant_file(tenant)) == 0
        left = _found(server.data_dir, s.by_label)
        assert left == {}, {label: (s.by_label[label], files) for label, files in left.items()}
        assert _traces(server.data_dir, set(vectors)) == []
        assert _journal(server.tenant_file(tenant)) == (0, 0)
        state = read_index_file(ann_file, len(vectors[0]) // 4)
        assert state is None or not any(state[1].contains(i) for i in ids)

        # No read serves a forgotten memory's fields; it shows its id, scope and times only.
        for m in _all_memories(client, tenant, include_forgotten=True):
            assert (m.text, m.metadata, m.speaker, m.thread, m.occurred_at, m.updated_at) == ("", {}, "", None, None, 0)
            assert m.forgotten and m.forgotten_at >= m.created_at and m.scope and not m.facts and not m.triples
            with pytest.raises(NotFoundError):
                client.list_memory_versions(tenant, m.id)
        send = _grpc_sender(client)
        answers: list[str | bytes] = [
            send(
                "MemoryService.ListMemories",
                memory_pb2.ListMemoriesRequest(tenant=tenant, include_forgotten=True, page_size=100),
            ).SerializeToString(),
            *(
                send(
                    "MemoryService.GetMemory", memory_pb2.GetMemoryRequest(tenant=tenant, memory_id=i)
                ).SerializeToString()
                for i in ids
            ),
            send(
                "EventsService.ListEvents", events_pb2.ListEventsRequest(tenant=tenant, page_size=100)
            ).SerializeToString(),
            call(
                server.http_port,
                "ListMemories",
                memory_pb2.ListMemoriesRequest(tenant=tenant, include_forgotten=True, page_size=100),
            ).body,
            http_request(
                server.http_port,
                "GET",
                "/v1/events/",
                headers={"authorization": "Token mem0-key", "mnemosyne-tenant": tenant},
            ).body,
            json.dumps(mem0.call("get_all", filters={"user_id": "*"})),
        ]
        answers += [repr(h) for value in list(s.by_label.values())[::10] for h in client.recall(tenant, value, k=10)]
        assert [label for answer in answers for label in s.served(answer)] == []
        assert all(mem0.attempt("history", memory_id=str(i)).get("status") == 404 for i in ids[:3])

        async def assembled() -> str:
            async with _mcp(server, tenant) as c:
                return _tool_text(await c.call_tool("read_memory", {"query": "locker status note", "k": 20}))

        assert s.served(anyio.run(assembled)) == []
        report = client.verify_integrity(tenant)
        assert report.valid, report.problems


def test_the_erasure_knows_every_table_and_column(tmp_path: Path) -> None:
    """Every table and column of a tenant file (ANALYZE's too) is in schema.ERASURE, which says
    what a forget does to it; every column of memories a forget keeps exists, and every other
    one it can clear. A table or column added without saying so fails here."""
    store = TenantStore(tmp_path / "fresh.sqlite", write_lock=threading.RLock())
    try:
        with store.write() as txn:
            txn.connection.execute("ANALYZE")
            tables = {
                name: [column[1] for column in txn.connection.execute(f"PRAGMA table_info('{name}')")]
                for (name,) in txn.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
            cleared = dict(forgotten_columns(txn.connection))
    finally:
        store.close()
    assert tables == {name: erasure.columns.split() for name, erasure in ERASURE.items()}
    assert set(FORGET_KEEPS) <= set(tables["memories"])
    assert set(cleared) == set(tables["memories"]) - set(FORGET_KEEPS)


def test_a_forget_clears_a_column_added_later_and_what_older_forgets_kept(server_factory, tenant: str) -> None:
    """A column added to memories after this version (here by hand) is cleared by a forget without
    being named; and a file of the previous version, whose forgets kept a memory's metadata,
    speaker, thread and time (and its thread's mark), loses them as it opens: nothing of them is
    served or left in any file."""
    server = server_factory().start()
    kept = {name: "".join(secrets.choice(_SECRET_CHARACTERS) for _ in range(24)) for name in ("meta", "who", "thread")}
    later = "".join(secrets.choice(_SECRET_CHARACTERS) for _ in range(24))
    with MemoryClient(server.target) as client:
        old = client.retain(tenant, "an old memory, forgotten by the previous version").memory_id
        live = client.retain(tenant, "a memory with a column of a later version").memory_id
        client.forget(tenant, old)
    server.stop()
    connection = apsw.Connection(str(server.tenant_file(tenant)))
    connection.pragma("secure_delete", True)  # the tables rewritten here leave no copy of a row behind
    connection.execute(
        "UPDATE memories SET metadata = ?, speaker = ?, thread_id = ?, thread_position = 3, occurred_at = 1 "
        "WHERE id = ?; INSERT INTO consolidated_threads(thread_id, newest_id) VALUES(?, ?); "
        "ALTER TABLE memories ADD COLUMN later_field TEXT; UPDATE memories SET later_field = ? WHERE id = ?; "
        + UNDO_METADATA_PAIRS
        + UNDO_METADATA_INDEXES
        + UNDO_REEMBED
        + UNDO_EXPIRY_CHANGES_DELIVERED
        + UNDO_EXPIRY_AND_REVISIONS
        + UNDO_WEBHOOKS
        + UNDO_ACCEPTANCE  # the version before _V_FORGOTTEN_CLEARED (then the later ones run again)
        + f"PRAGMA user_version = {MIGRATIONS.index(_V_FORGOTTEN_CLEARED)}",
        (json.dumps({"k": kept["meta"]}), kept["who"], kept["thread"], old, kept["thread"], old, later, live),
    )
    connection.close()
    secrets_by_label = {**kept, "later": later}
    assert set(_found(server.data_dir, secrets_by_label)) == set(secrets_by_label)
    server.start()
    with MemoryClient(server.target) as client:
        forgotten = client.get_memory(tenant, old)
        assert (forgotten.metadata, forgotten.speaker, forgotten.thread, forgotten.occurred_at) == ({}, "", None, None)
        assert set(_found(server.data_dir, secrets_by_label)) == {"later"}
        client.forget(tenant, live)
        assert _found(server.data_dir, secrets_by_label) == {}
        assert client.verify_integrity(tenant).valid
    connection = apsw.Connection(str(server.tenant_file(tenant)), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert connection.execute("SELECT later_field FROM memories WHERE id = ?", (live,)).fetchone() == (None,)
        assert connection.execute("SELECT count(*) FROM consolidated_threads").fetchone() == (0,)
    finally:
        connection.close()


def test_forgets_beside_reads_that_never_pause_wait_only_for_the_reads_under_way(server_factory, tenant: str) -> None:
    """Reads back to back on four clients (two recalling, two verifying the chain: reads of a few
    tenths of a second) always overlap. A forget's TRUNCATE checkpoint, waiting under the tenant's
    write lock for a moment without a reader, found none: the first forget ended UNAVAILABLE
    ERASURE_BUSY after its 10 s, every write waiting with it. The gate of the tenant's reads
    (store/read_gate.py) makes it wait only for the reads under way (forgets and writes of at most
    0.33 s measured). Each forget still leaves nothing of its memory in any file."""
    server = server_factory().start()
    secrets_by_id: dict[int, str] = {}
    with MemoryClient(server.target) as client:
        for batch in range(4):  # a chain of 2,000 entries: its verification is a long read
            client.retain_batch(tenant, [f"the pump in hall {batch}-{i} is blue and runs at night" for i in range(500)])
        for i in range(10):
            secret = f"Zq{i:02d}" + "".join(random.choice(string.ascii_letters) for _ in range(20))
            secrets_by_id[client.retain(tenant, f"the pump in hall {i} has the code {secret}").memory_id] = secret
    stop = threading.Event()
    forgets: list[float] = []
    writes: list[float] = []

    def read(seed: int) -> None:
        rng = random.Random(seed)
        with MemoryClient(server.target) as reader:
            while not stop.is_set():
                if seed % 2:
                    reader.verify_integrity(tenant)
                else:
                    reader.recall(tenant, f"which pump runs in hall {rng.randrange(200)}", k=20)

    def write() -> None:
        with MemoryClient(server.target) as writer:
            while not stop.is_set():
                started = time.monotonic()
                writer.retain(tenant, f"a note written beside the forgets at {started}")
                writes.append(time.monotonic() - started)

    threads = [threading.Thread(target=read, args=(seed,)) for seed in range(4)] + [threading.Thread(target=write)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1)  # the reads under way
        with MemoryClient(server.target, retries=0) as forgetter:
            for memory_id in secrets_by_id:
                started = time.monotonic()
                forgetter.forget(tenant, memory_id)
                forgets.append(time.monotonic() - started)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert max(forgets) < 4 and max(writes) < 4, (sorted(forgets)[-3:], sorted(writes)[-3:])
    assert texts_left(server.data_dir, secrets_by_id.values()) == {}
    with MemoryClient(server.target) as client:
        assert client.verify_integrity(tenant).valid
