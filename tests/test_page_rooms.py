"""The room a B-tree page split leaves (store/page_scrub.py, docs/operations.md#erasure-of-a-memory):
SQLite writes a split page anew from the entries it keeps and leaves the bytes of those that
moved in the page's unused room, which ``secure_delete`` never reaches. Every page this server
writes to a tenant file has that room zeroed, a file of an older version has it cleared as it
first opens, and a forget clears it in the pages Litestream's checkpoints copied."""

from __future__ import annotations

import os
import random
from pathlib import Path

import apsw
import pytest

from mnemosyne.client import MemoryClient, RetainItem, ThreadRef
from mnemosyne.client.types import BackupChunk
from mnemosyne.store.bookkeeping import PAGES_SCRUBBED_META
from mnemosyne.store.page_scrub import VFS_NAME, scrub_file, scrub_page, unwatch, watch, written_pages
from tests.replica_support import ObjectStorage
from tests.support import ServerFactory
from tests.test_erasure import _token, texts_left
from tests.test_replication import _restore_command, replicating, wait_replicated

MEMORIES = 3000
VICTIMS = range(5, MEMORIES, 59)  # 51 memories spread over every page of the thread index


def rooms_holding_bytes(database: Path) -> list[tuple[str, int]]:
    """(B-tree, page number) of each B-tree page in the file ``database`` whose unused room —
    between its cell pointers and its cells — holds a byte that is not zero. Pages the WAL holds
    a newer copy of (the WAL's frames are as SQLite wrote them) are not the file's: left out."""
    connection = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        pages = list(connection.execute("SELECT name, pageno FROM dbstat WHERE pagetype IN ('internal', 'leaf')"))
        page_size = connection.pragma("page_size")
    finally:
        connection.close()
    wal = Path(f"{database}-wal")
    frames = wal.read_bytes() if wal.exists() else b""
    in_wal = {int.from_bytes(frames[at : at + 4], "big") for at in range(32, len(frames), 24 + page_size)}
    data = database.read_bytes()
    found = []
    for name, number in pages:
        if number in in_wal:
            continue
        page = data[(number - 1) * page_size : number * page_size]
        at = 100 if number == 1 else 0
        header = 8 if page[at] in (10, 13) else 12
        cells = int.from_bytes(page[at + 3 : at + 5], "big")
        content = int.from_bytes(page[at + 5 : at + 7], "big") or 65_536
        if page[at + header + 2 * cells : content].strip(b"\0"):
            found.append((name, number))
    return found


def _threaded(client: MemoryClient, tenant: str, numbers: range) -> list[int]:
    """Memories each in a thread of its own id, ``_token(n)``: inserted out of the thread index's
    order, so its pages split as it grows."""
    ids: list[int] = []
    for start in range(numbers.start, numbers.stop, 500):
        items = [RetainItem(text=f"entry {n}", thread=ThreadRef(_token(n), 0)) for n in range(start, start + 500)]
        ids.extend(r.memory_id for r in client.retain_batch(tenant, items))
    return ids


def test_a_forget_leaves_no_room_holding_bytes_and_later_writes_bring_none_back(
    server_factory: ServerFactory, tenant: str
) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        ids = _threaded(client, tenant, range(MEMORIES))
        victims = [_token(n) for n in VICTIMS]
        assert texts_left(server.data_dir, victims), "the search must find the thread ids before the forgets"
        for n in VICTIMS:
            client.forget(tenant, ids[n])
        assert texts_left(server.data_dir, victims) == {}
        assert rooms_holding_bytes(server.tenant_file(tenant)) == []
        # The writer's cached pages held what their splits left: more threads among the same pages
        # (the same index, fresh ids) write those pages again, and none of that comes back.
        _threaded(client, tenant, range(MEMORIES, MEMORIES + 1500))
        assert texts_left(server.data_dir, victims) == {}
        kept = client.recall(tenant, "entry 6", k=3)
        assert any(h.memory.id == ids[6] for h in kept)
        assert client.verify_integrity(tenant).valid


def test_an_export_s_copy_has_no_room_holding_bytes_though_its_pages_came_from_the_wal(
    server_factory: ServerFactory, tenant: str, tmp_path: Path
) -> None:
    """An export copies the newest version of each page, the WAL's frames too, which hold what
    their splits left (a WAL is not scrubbed): the copy's rooms are cleared before it is sent."""
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        _threaded(client, tenant, range(MEMORIES))
        wal = Path(f"{server.tenant_file(tenant)}-wal")
        assert wal.exists() and wal.stat().st_size > 0, "the pages the test is about are in the WAL"
        copy = tmp_path / "export.sqlite"
        with copy.open("wb") as out:
            for part in client.export_tenant(tenant):
                if isinstance(part, BackupChunk) and part.file == "database":
                    out.write(part.data)
    assert rooms_holding_bytes(copy) == []
    connection = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert connection.execute("SELECT count(*) FROM memories").get == MEMORIES
    finally:
        connection.close()


def test_a_file_of_an_older_version_has_its_rooms_cleared_once_as_it_opens(
    server_factory: ServerFactory, tenant: str
) -> None:
    """A file written before the rooms were cleared: bytes in the rooms of its pages (written here
    where SQLite would have left them) and no mark. Opened, every room is zeros, nothing else
    changed, and the mark is set."""
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        _threaded(client, tenant, range(MEMORIES))
    server.stop()
    database = server.tenant_file(tenant)
    connection = apsw.Connection(str(database))
    with connection:
        connection.execute("DELETE FROM meta WHERE key = ?", (PAGES_SCRUBBED_META,))
    before = list(connection.execute("SELECT id, body, thread_id FROM memories ORDER BY id"))
    connection.close()
    assert rooms_holding_bytes(database) == []
    left = "leftoverofanolderversion"
    page_size = 4096  # SQLite's default, the tenant files'
    assert int.from_bytes(database.read_bytes()[16:18], "big") == page_size
    data = bytearray(database.read_bytes())
    planted = 0
    for number in range(2, len(data) // page_size + 1):
        page = data[(number - 1) * page_size : number * page_size]
        header = {2: 12, 5: 12, 10: 8, 13: 8}.get(page[0])
        if header is None:
            continue
        room = header + 2 * int.from_bytes(page[3:5], "big")
        content = int.from_bytes(page[5:7], "big")
        if content - room > len(left):
            at = (number - 1) * page_size + room
            data[at : at + len(left)] = left.encode()
            planted += 1
    database.write_bytes(bytes(data))
    assert planted > 10 and len(rooms_holding_bytes(database)) == planted

    server = server_factory(server.data_dir).start()
    with MemoryClient(server.target) as client:
        assert client.verify_integrity(tenant).valid  # opens the file
        assert texts_left(server.data_dir, [left]) == {}
    server.stop()
    assert rooms_holding_bytes(database) == []
    connection = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert list(connection.execute("SELECT id, body, thread_id FROM memories ORDER BY id")) == before
        assert connection.execute("SELECT value FROM meta WHERE key = ?", (PAGES_SCRUBBED_META,)).fetchall() == [("1",)]
    finally:
        connection.close()


def test_a_replicating_tenant_s_forget_clears_the_rooms_litestream_s_checkpoints_copied(
    server_factory: ServerFactory, object_storage: ObjectStorage, tmp_path: Path
) -> None:
    """While a tenant replicates, Litestream checkpoints its file from its own process, copying
    pages with what their splits left: the forget clears those pages in the file too."""
    server = replicating(server_factory, object_storage, object_storage.new_bucket(), tmp_path / "member").start()
    tenant = "threads"
    with MemoryClient(server.target) as client:
        ids = _threaded(client, tenant, range(500))
        client.forget(tenant, client.retain(tenant, "a first forget: every page cleared once").memory_id)
        ids += _threaded(client, tenant, range(500, MEMORIES))
        wait_replicated(server, seconds=60)
        victims = [_token(n) for n in VICTIMS]
        for n in VICTIMS:
            client.forget(tenant, ids[n])
        assert texts_left(server.data_dir / "tenants", victims) == {}
        assert rooms_holding_bytes(server.tenant_file(tenant)) == []
        assert client.verify_integrity(tenant).valid


def test_a_file_restored_from_its_replica_has_no_room_holding_bytes(
    server_factory: ServerFactory, object_storage: ObjectStorage, tmp_path: Path
) -> None:
    """Litestream's restore writes the file from its replica's pages as they were: the restore
    clears their rooms before the file is placed."""
    bucket = object_storage.new_bucket()
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    with MemoryClient(server.target) as client:
        _threaded(client, "threads", range(MEMORIES))
        wait_replicated(server, seconds=60)
        restored_dir = tmp_path / "restored"
        done = _restore_command(
            "--from-replica", object_storage.url(bucket), "--tenant", "threads", "--data-dir", str(restored_dir)
        )
    assert done.returncode == 0, done.stderr[-2000:]
    restored = restored_dir / "tenants" / "threads.sqlite"
    assert rooms_holding_bytes(restored) == []
    connection = apsw.Connection(str(restored), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert connection.execute("SELECT count(*) FROM memories WHERE thread_id IS NOT NULL").get == MEMORIES
    finally:
        connection.close()


@pytest.mark.parametrize(("vfs", "auto_vacuum"), [(VFS_NAME, "NONE"), (VFS_NAME, "FULL"), ("unix", "NONE")])
def test_pages_written_through_every_kind_of_change_stay_whole(tmp_path: Path, vfs: str, auto_vacuum: str) -> None:
    """Inserts, updates that grow and shrink rows, deletes, overflow pages, an index and a
    full-text index, through the scrubbing VFS (the store's default): the file is intact after
    every checkpoint, and no room holds a byte; a pass over every page finds nothing left. A file
    with pointer maps (auto-vacuum) is left as SQLite writes it. The same through SQLite's own VFS
    leaves bytes in rooms (what the test would miss otherwise), which the pass clears."""
    rng = random.Random(7)
    database = tmp_path / "pages.sqlite"
    connection = apsw.Connection(str(database), vfs=vfs)
    connection.pragma("auto_vacuum", auto_vacuum)
    connection.pragma("journal_mode", "wal")
    connection.pragma("secure_delete", True)
    connection.execute(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, key TEXT, body TEXT); CREATE INDEX t_key ON t(key);"
        "CREATE VIRTUAL TABLE f USING fts5(body)"
    )
    rows: dict[int, tuple[str, str]] = {}
    for round_ in range(20):
        with connection:
            for _ in range(300):
                key, body = os.urandom(8).hex(), " ".join(os.urandom(3).hex() for _ in range(rng.randrange(1, 400)))
                id_ = connection.execute("INSERT INTO t(key, body) VALUES(?, ?) RETURNING id", (key, body)).get
                connection.execute("INSERT INTO f(rowid, body) VALUES(?, ?)", (id_, body))
                rows[id_] = (key, body)
            for id_ in rng.sample(sorted(rows), 100):
                key, body = os.urandom(12).hex(), "x" * rng.randrange(0, 6000)
                connection.execute("UPDATE t SET key = ?, body = ? WHERE id = ?", (key, body, id_))
                rows[id_] = (key, body)
            for id_ in rng.sample(sorted(rows), 80):
                connection.execute("DELETE FROM t WHERE id = ?", (id_,))
                connection.execute("DELETE FROM f WHERE rowid = ?", (id_,))
                del rows[id_]
        connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)], round_
    stored = {i: (k, b) for i, k, b in connection.execute("SELECT id, key, body FROM t")}
    assert stored == rows
    connection.close()
    left = rooms_holding_bytes(database)
    rewritten = scrub_file(database)
    if vfs == "unix":
        assert left and rewritten >= len(left)
    else:
        assert (left == []) if auto_vacuum == "NONE" else (rewritten == 0)
    if auto_vacuum == "NONE":
        assert rooms_holding_bytes(database) == []
    connection = apsw.Connection(str(database))
    assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert {i: (k, b) for i, k, b in connection.execute("SELECT id, key, body FROM t")} == rows
    connection.close()


def test_only_a_b_tree_page_s_room_is_touched() -> None:
    """A leaf's room is zeroed and nothing else; pages that are not B-tree pages, or whose header
    does not hold together, are left as they are."""
    page = bytearray(os.urandom(4096))
    page[0], page[3:5], page[5:7] = 13, (2).to_bytes(2, "big"), (4000).to_bytes(2, "big")
    page[8:12] = (4000).to_bytes(2, "big") + (4050).to_bytes(2, "big")
    scrubbed = scrub_page(bytes(page), first=False)
    assert scrubbed is not None and scrubbed[12:4000] == bytes(3988)
    assert scrubbed[:12] == page[:12] and scrubbed[4000:] == page[4000:]
    assert scrub_page(scrubbed, first=False) is None  # nothing left to zero
    overflow = bytes(4) + os.urandom(4092)  # an overflow page: the next page's number first
    assert scrub_page(overflow, first=False) is None
    broken = bytearray(page)
    broken[8:10] = (100).to_bytes(2, "big")  # a cell inside the room: not a page SQLite wrote
    assert scrub_page(bytes(broken), first=False) is None
    broken = bytearray(page)
    broken[3:5] = (3000).to_bytes(2, "big")  # more cell pointers than the page holds
    assert scrub_page(bytes(broken), first=False) is None
    first = bytes(100) + bytes(page[:3996])  # page 1: the file's header, then the B-tree's
    assert scrub_page(first, first=True) is not None and scrub_page(first, first=False) is None


def test_a_watched_file_s_wal_pages_are_noted_until_taken(tmp_path: Path) -> None:
    """The pages written to a watched database's WAL are noted (every page counts until the first
    take); an unwatched one's are not."""
    database = tmp_path / "watched.sqlite"
    connection = apsw.Connection(str(database))
    connection.pragma("journal_mode", "wal")
    connection.execute("CREATE TABLE t(x); INSERT INTO t VALUES (zeroblob(50000))")
    assert written_pages(database) == set()
    watch(database)
    try:
        assert written_pages(database) is None
        assert written_pages(database) == set()
        connection.execute("INSERT INTO t VALUES (zeroblob(20000))")
        noted = written_pages(database)  # the blob's overflow pages, its leaf, the schema's page
        assert noted is not None and len(noted) >= 5
        assert max(noted) <= connection.pragma("page_count")
        assert written_pages(database) == set()
    finally:
        unwatch(database)
        connection.close()
    assert written_pages(database) == set()


def test_a_read_only_connection_through_the_default_vfs_closes_quietly(tmp_path: Path) -> None:
    """The last connection's close asks for a write lock (to checkpoint), which a read-only handle
    cannot take: SQLite goes on without it, and so does the close through our VFS."""
    database = tmp_path / "read.sqlite"
    connection = apsw.Connection(str(database))
    connection.pragma("journal_mode", "wal")
    connection.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1)")
    connection.close()
    reader = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READONLY)
    assert apsw.vfs_names()[0] == VFS_NAME  # the default, as every connection of the server gets it
    reader.execute("BEGIN")
    assert reader.execute("SELECT x FROM t").get == 1
    reader.close()


def test_a_file_that_is_no_database_is_left_as_it_is(tmp_path: Path) -> None:
    """A header with no page size SQLite writes (a damaged file), an empty file: untouched."""
    for content in (b"", b"SQLite format 3\x00" + bytes(84) + os.urandom(8192), os.urandom(9000)):
        path = tmp_path / "odd.sqlite"
        path.write_bytes(content)
        assert scrub_file(path) == 0
        assert path.read_bytes() == content
