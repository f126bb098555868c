"""``mnemosyne reembed``: a tenant moved to another embedder while it serves, resumable after a
SIGKILL of the server, its audit chain extended and still valid, recall by meaning afterwards."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import apsw
import numpy as np
import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from mnemosyne.engine.embedders import make_embedder
from tests.chat_server import Behaviour, ChatServer
from tests.http_support import request
from tests.support import ServerProcess, tokens_json

TEA, DOG = "Carol prefers tea over coffee", "Carol's dog is called Rex"
T = TypeVar("T")
FILLERS = [f"Shipment {i} of part PN-{i:04d} left warehouse {chr(65 + i % 26)} on dock {i % 17}" for i in range(300)]


def _reembed(server: ServerProcess, tenant: str, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mnemosyne", "reembed", "--tenant", tenant, "--target", server.target, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _file(server: ServerProcess, tenant: str, sql: str) -> list[tuple[object, ...]]:
    connection = apsw.Connection(str(server.tenant_file(tenant)), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [tuple(row) for row in connection.execute(sql)]
    finally:
        connection.close()


def _embedder_of(server: ServerProcess, tenant: str) -> str:
    return str(_file(server, tenant, "SELECT value FROM meta WHERE key = 'embedder'")[0][0])


def test_sigkill_mid_reembed_then_a_rerun_moves_the_tenant_to_minilm(server_factory) -> None:
    minilm = make_embedder("minilm")
    server = server_factory().start()
    with MemoryClient(server.target, timeout=30) as client:
        ids = [r.memory_id for r in client.retain_batch("moving", [DOG, TEA, *FILLERS])]
    assert _embedder_of(server, "moving") == "hashing-v2/384"

    # Kill the server once some chunks are committed, mid-move.
    run = _reembed(server, "moving", "--embedder", "minilm", "--chunk-size", "16")
    deadline = time.monotonic() + 60
    while not _file(server, "moving", "SELECT 1 FROM reembed_vectors LIMIT 1"):
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, "no chunk committed in 60 s"
        time.sleep(0.01)
    server.kill()
    _, stderr = run.communicate(timeout=60)
    assert run.returncode != 0, stderr
    done = int(str(_file(server, "moving", "SELECT count(*) FROM reembed_vectors")[0][0]))
    assert 0 < done < len(ids), done  # part of the move committed, not all

    server.start()  # a new port: the killed one may be taken meanwhile
    with MemoryClient(server.target, timeout=30) as client:
        # Half-way, the tenant still answers by its old embedder, and takes writes meanwhile:
        # a new memory, an update of one already re-embedded (its next vector is stale), a forget.
        assert _embedder_of(server, "moving") == "hashing-v2/384"
        hits = client.recall("moving", "part PN-0042 warehouse", k=3)
        assert hits and hits[0].memory.text == FILLERS[42]
        early = ids[3]
        assert _file(server, "moving", f"SELECT 1 FROM reembed_vectors WHERE memory_id = {early}")
        client.update_memory("moving", early, "Carol's sister Dana grows lavender in her garden")
        client.forget("moving", ids[4])
        late = client.retain("moving", "Carol's brother Ed repairs bicycles on weekends").memory_id

        rerun = _reembed(server, "moving", "--embedder", "minilm", "--chunk-size", "64")
        stdout, stderr = rerun.communicate(timeout=300)
        assert rerun.returncode == 0, stderr
        assert "runs on the minilm embedder" in stdout, stdout

        assert _embedder_of(server, "moving") == f"{minilm.name}/{minilm.dim}"
        assert _file(server, "moving", "SELECT count(*) FROM reembed_vectors")[0][0] == 0
        assert not _file(server, "moving", "SELECT 1 FROM meta WHERE key = 'reembed_to'")
        stored = _file(
            server,
            "moving",
            "SELECT e.memory_id, m.body, e.vector FROM embeddings e JOIN memories m ON m.id = e.memory_id",
        )
        assert {row[0] for row in stored} == (set(ids) - {ids[4]}) | {late}
        want = minilm.embed([str(row[1]) for row in stored])
        got = np.stack([np.frombuffer(row[2], dtype="<f4") for row in stored])  # type: ignore[call-overload]  # apsw rows are untyped
        assert np.min(np.sum(want * got, axis=1)) > 0.9999  # every vector is MiniLM's of its current text

        integrity = client.verify_integrity("moving")
        assert integrity.valid, integrity
        assert any(
            '"op":"reembed_switch"' in str(entry[0])
            for entry in _file(server, "moving", "SELECT entry FROM ledger ORDER BY seq DESC LIMIT 1")
        )
        assert client.recall("moving", "What does Carol drink?", k=1)[0].memory.text == TEA
        # A second run has nothing to do.
        again = client.reembed_tenant("moving", "minilm")
        assert again.finished and again.switched == 0

    server.terminate()
    server.start()  # the new embedder is the file's, not the process's memory
    with MemoryClient(server.target, timeout=30) as client:
        assert client.recall("moving", "What does Carol drink?", k=1)[0].memory.text == TEA
        assert client.verify_integrity("moving").valid


def _all_vectors_are_minilm(server: ServerProcess, tenant: str) -> int:
    """How many vectors the tenant holds, once checked to be MiniLM's of each memory's text."""
    minilm = make_embedder("minilm")
    stored = _file(
        server, tenant, "SELECT e.memory_id, m.body, e.vector FROM embeddings e JOIN memories m ON m.id = e.memory_id"
    )
    want = minilm.embed([str(row[1]) for row in stored])
    got = np.stack([np.frombuffer(row[2], dtype="<f4") for row in stored])  # type: ignore[call-overload]  # apsw rows are untyped
    assert np.min(np.sum(want * got, axis=1)) > 0.9999
    return len(stored)


def _wait_for_rows(server: ServerProcess, tenant: str, sql: str, count: int, what: str) -> None:
    """Wait until ``sql`` on the tenant's file returns ``count`` rows or more."""
    deadline = time.monotonic() + 60
    while len(_file(server, tenant, sql)) < count:
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _reembedded_to_minilm(server: ServerProcess, tenant: str) -> None:
    run = _reembed(server, tenant, "--embedder", "minilm")
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr


def _flushed_on_minilm(client: MemoryClient, server: ServerProcess, tenant: str, queued: list[str], count: int) -> None:
    """The queued writes flushed, none failed, each a memory; every vector is MiniLM's."""
    flushed = client.hot_path(tenant, "flush", timeout_seconds=60)
    assert flushed.failed == 0, flushed
    assert set(queued) <= {m.text for m in client.list_memories(tenant, page_size=1000).memories}
    assert _all_vectors_are_minilm(server, tenant) == count
    assert client.verify_integrity(tenant).valid


def test_fast_writes_embedded_before_the_switch_are_committed_by_the_new_embedder(server_factory, tmp_path) -> None:
    hold = tmp_path / "hold"
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}).start()
    queued = [f"Queued note {i}: the courier brings parcel QX-{i:03d} on Tuesday" for i in range(5)]
    with MemoryClient(server.target, timeout=30) as client:
        client.retain_batch("busy", FILLERS[:60])
        client.hot_path("busy", "enable")
        hold.touch()  # the workers extract and embed (by hashing), then wait before their commit
        assert {r.status for r in client.retain_batch("busy", queued, fast=True)} == {"enqueued"}
        running = "SELECT 1 FROM oplog WHERE status = 'running' AND embedding IS NOT NULL"
        _wait_for_rows(server, "busy", running, 1, "no worker held its round")
        _reembedded_to_minilm(server, "busy")
        hold.unlink()
        _flushed_on_minilm(client, server, "busy", queued, 65)


def test_reembed_refuses_what_it_cannot_do_and_is_served_over_http(server_factory, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(tokens_json({"root": ["*"], "acme-token": ["acme"]}))
    server = server_factory(http=True, args=["--tokens-file", str(tokens)]).start()
    with MemoryClient(server.target, token="root", timeout=30) as admin:
        admin.retain_batch("acme", ["the quarterly report is due on Friday", "the office plants need water"])
        with pytest.raises(InvalidArgumentError) as unknown:
            admin.reembed_tenant("acme", "word2vec")
        assert unknown.value.reason == "EMBEDDER_UNKNOWN"
        with pytest.raises(NotFoundError) as missing:
            admin.reembed_tenant("nobody-here", "minilm")
        assert missing.value.reason == "TENANT_NOT_FOUND"
        with pytest.raises(InvalidArgumentError) as chunk:
            admin.reembed_tenant("acme", "minilm", chunk_size=-1)
        assert chunk.value.reason == "CHUNK_SIZE_INVALID"
        same = admin.reembed_tenant("acme", "hashing")
        assert same.finished and same.switched == 0 and same.total == 2
    with MemoryClient(server.target, token="acme-token", timeout=30) as tenant_only:
        with pytest.raises(PermissionDeniedError):
            tenant_only.reembed_tenant("acme", "minilm")
    reply = request(
        server.http_port,
        "POST",
        "/v1/tenants/acme:reembed",
        json_body={"embedder": "minilm", "chunkSize": 1},
        headers={"authorization": "Bearer root"},
    )
    assert reply.status == 200, reply.body
    assert reply.json() == {"embedder": "minilm", "done": "1", "total": "2"}
    bad = request(
        server.http_port,
        "POST",
        "/v1/tenants/acme:reembed",
        json_body={"embedder": "nope"},
        headers={"authorization": "Bearer root"},
    )
    assert bad.status == 400 and bad.reason == "EMBEDDER_UNKNOWN", bad.body


@pytest.mark.parametrize("given", ["0", "10001"])
def test_reembed_s_chunk_size_is_held_to_the_server_s_range_as_it_is_parsed(
    capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """--chunk-size took 1 to 2**31-1, so 10001 reached the server and was refused there, which
    said "give 1-10000, or 0 for 256" (0 being what the flag refuses): the flag names the range."""
    from mnemosyne.cli.commands import build_parser

    with pytest.raises(SystemExit) as exited:
        build_parser("reembed").parse_args(["reembed", "--tenant", "acme", "--chunk-size", given])
    said = capsys.readouterr().err.splitlines()[-1]
    assert exited.value.code == 2 and said.endswith(" from 1 to 10000"), said


def test_a_vector_embedded_before_the_switch_and_kept_after_it_is_not_replayed_after_a_sigkill(
    server_factory, tmp_path
) -> None:
    """A round of 32 or more fast writes is embedded before its extraction (engine/write_path.py):
    a switch while the model extracts, then the round keeps its vectors in the log (the old
    embedder's) and the server is SIGKILLed before its commit. The replay must embed them again
    with the new embedder, never commit the kept ones as the new embedder's."""
    hold = tmp_path / "hold"
    with ChatServer() as chat:
        server = server_factory(
            env={
                "MNEMOSYNE_TEST_HOLD_WORKERS": str(hold),
                "MNEMOSYNE_LLM_API_KEY": "sk-server",
                "MNEMOSYNE_LLM_BACKOFF": "0.01",
            },
            args=["--extractor", "openai", "--llm-base-url", chat.base_url, "--llm-model", "test-model"]
            + ["--llm-timeout", "30", "--hot-path-batch", "64"],
        ).start()
        queued = [f"Queued note {i}: the courier brings parcel QX-{i:03d} on Tuesday" for i in range(40)]
        with MemoryClient(server.target, timeout=30) as client:
            client.retain("racing", TEA)
            client.hot_path("racing", "enable")
            hold.touch()  # the round waits before its commit, once its vectors are kept
            chat.script = [Behaviour("hang")]  # ... and its extraction waits for the model
            assert {r.status for r in client.retain_batch("racing", queued, fast=True)} == {"enqueued"}
            deadline = time.monotonic() + 30
            while chat.calls < len(queued):  # the round was embedded (by hashing) and is extracting
                assert time.monotonic() < deadline, "the round never asked the model"
                time.sleep(0.02)
            _reembedded_to_minilm(server, "racing")
            chat.release.set()  # the extraction ends: the round keeps what it may, then holds
            kept = "SELECT 1 FROM oplog WHERE status = 'running' AND extraction IS NOT NULL"
            _wait_for_rows(server, "racing", kept, len(queued), "the round never kept its extraction")
        server.kill()
        hold.unlink()
        server.start()
        with MemoryClient(server.target, timeout=30) as client:
            _flushed_on_minilm(client, server, "racing", queued, 41)
            assert client.recall("racing", "What does Carol drink?", k=1)[0].memory.text == TEA


def test_a_vector_kept_before_a_sigkill_is_not_taken_as_the_new_embedder_s_by_a_round_that_claimed_it_before_the_switch(
    server_factory, tmp_path
) -> None:
    """A round's kept vectors (an attempt SIGKILLed before its commit) are replayed after the
    restart: when a switch commits between the replay's claim and its commit, the rows the claim
    read hold the old embedder's vectors; they must not be taken as the new embedder's."""
    hold = tmp_path / "hold"
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}).start()
    queued = [f"Queued note {i}: the courier brings parcel QX-{i:03d} on Tuesday" for i in range(5)]
    with MemoryClient(server.target, timeout=30) as client:
        client.retain("replayed", TEA)
        client.hot_path("replayed", "enable")
        hold.touch()  # the round keeps its extraction and vectors (by hashing), then holds
        assert {r.status for r in client.retain_batch("replayed", queued, fast=True)} == {"enqueued"}
        kept = "SELECT 1 FROM oplog WHERE embedding IS NOT NULL"
        _wait_for_rows(server, "replayed", kept, len(queued), "the round never kept its vectors")
    server.kill()
    hold.write_text("claimed")  # the replay holds once it claimed them (the kept vectors read)
    server.start()
    claimed = "SELECT 1 FROM oplog WHERE status = 'running'"
    _wait_for_rows(server, "replayed", claimed, len(queued), "the replay never claimed the operations")
    _reembedded_to_minilm(server, "replayed")
    hold.unlink()
    with MemoryClient(server.target, timeout=30) as client:
        _flushed_on_minilm(client, server, "replayed", queued, 6)


class _Writer(threading.Thread):
    """Writes a tenant without pause: a batch of new memories, then an update of one written
    before, each call retried until acknowledged (waiting while ``up`` is clear: the server is
    being killed and started again), so the test knows every memory and its text."""

    def __init__(self, server: ServerProcess, tenant: str) -> None:
        super().__init__(daemon=True)
        self.server, self.tenant = server, tenant
        self.up, self.stop = threading.Event(), threading.Event()
        self.up.set()
        self.texts: dict[int, str] = {}  # memory id -> its text as last acknowledged
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self._write()
        except BaseException as exc:  # the test asserts there was none
            self.failure = exc

    def _write(self) -> None:
        batches = 0
        while not self.stop.is_set():
            texts = [f"Writer note {batches}-{i}: parcel QX-{batches:04d}{i} went to dock {i}" for i in range(8)]
            outcomes = self._acknowledged(lambda client: client.retain_batch(self.tenant, texts))
            self.texts.update({o.memory_id: text for o, text in zip(outcomes, texts)})
            updated = list(self.texts)[batches * 7 % len(self.texts)]
            text = f"Writer note {batches} updated: crate ZU-{batches:04d} held at the gate"
            self._acknowledged(lambda client: client.update_memory(self.tenant, updated, text))
            self.texts[updated] = text
            batches += 1

    def _acknowledged(self, call: Callable[[MemoryClient], T]) -> T:
        while True:
            self.up.wait()
            try:
                # A short window: the server comes back on a new port, which the next client takes.
                with MemoryClient(self.server.target, timeout=10, retry_window=0.5) as client:
                    return call(client)
            except UnavailableError:
                time.sleep(0.02)  # killed meanwhile: the call again, once the server is up


def test_a_reembed_finishes_while_writes_outpace_it_and_after_a_sigkill_under_them(server_factory) -> None:
    """Writes faster than the move embeds (a batch of 8 and an update per round, chunks of 1-2): the
    move used to wait for fewer than a chunk written during a chunk, which never came. Now each
    write during the move brings its memory's new vector, so the move does only the memories there
    when it began: killed mid-move under the load, then run again under it, it ends, and no
    write is lost, every memory on MiniLM's vector of its text."""
    server = server_factory().start()
    with MemoryClient(server.target, timeout=30) as client:
        before = [r.memory_id for r in client.retain_batch("loaded", FILLERS[:60])]
    writer = _Writer(server, "loaded")
    try:
        run = _reembed(server, "loaded", "--embedder", "minilm", "--chunk-size", "1")
        chunks_done = f"SELECT 1 FROM reembed_vectors WHERE memory_id <= {max(before)}"
        _wait_for_rows(server, "loaded", chunks_done, 1, "no chunk committed in 60 s")
        writer.start()  # the move has begun
        _wait_for_rows(server, "loaded", f"SELECT 1 FROM memories WHERE id > {max(before)}", 16, "no writes")
        writer.up.clear()
        server.kill()
        _, stderr = run.communicate(timeout=60)
        assert run.returncode != 0, stderr
        assert len(_file(server, "loaded", chunks_done)) < len(before)  # killed mid-move
        server.start()  # a new port: the killed one may be taken meanwhile
        with MemoryClient(server.target, timeout=30) as client:  # half-way, recall finds the new ones
            memory_id, text = next(iter(writer.texts.items()))
            assert client.recall("loaded", text, k=1)[0].memory.id == memory_id
        written = len(writer.texts)
        writer.up.set()
        rerun = _reembed(server, "loaded", "--embedder", "minilm", "--chunk-size", "2")
        stdout, stderr = rerun.communicate(timeout=30)
        assert rerun.returncode == 0, stderr
        assert "runs on the minilm embedder" in stdout, stdout
        assert len(writer.texts) > written + 16  # the writer went on throughout
    finally:
        writer.stop.set()
        if writer.is_alive():
            writer.join(timeout=60)
    assert writer.failure is None, writer.failure
    minilm = make_embedder("minilm")
    assert _embedder_of(server, "loaded") == f"{minilm.name}/{minilm.dim}"
    rows = _file(server, "loaded", "SELECT m.id, m.body FROM embeddings e JOIN memories m ON m.id = e.memory_id")
    stored = {int(str(memory_id)): str(text) for memory_id, text in rows}
    assert stored == {**dict(zip(before, FILLERS)), **writer.texts}  # nothing written was lost
    assert _all_vectors_are_minilm(server, "loaded") == len(stored)
    with MemoryClient(server.target, timeout=30) as client:
        for memory_id in list(writer.texts)[:: max(1, len(writer.texts) // 4)]:
            hits = client.recall("loaded", writer.texts[memory_id], k=1)
            assert hits and hits[0].memory.id == memory_id, (writer.texts[memory_id], hits)
        assert client.verify_integrity("loaded").valid


def test_recalls_and_dedups_racing_a_reembed_s_switch_are_answered_by_the_new_embedder(server_factory) -> None:
    """A recall or a Dedup takes the tenant's embedder before its read transaction: a switch
    committed in between (its store learns it only after the commit) made the read refuse the
    tenant's own new embedder, EMBEDDER_MISMATCH. Now the read follows the file and asks again."""
    server = server_factory().start()
    refused: list[str] = []
    stop = threading.Event()
    with MemoryClient(server.target, timeout=30) as client:
        client.retain_batch("switching", [DOG, TEA, *FILLERS[:6]])

        def read(call: Callable[[], object]) -> None:
            while not stop.is_set():
                try:
                    call()
                except FailedPreconditionError as error:
                    refused.append(error.reason)

        readers = [
            threading.Thread(target=read, args=(lambda: client.recall("switching", "What does Carol drink?"),)),
            threading.Thread(target=read, args=(lambda: client.dedup("switching"),)),
        ]
        for reader in readers:
            reader.start()
        try:
            for embedder in ["minilm", "hashing"] * 3:
                while not client.reembed_tenant("switching", embedder).finished:
                    pass
        finally:
            stop.set()
            for reader in readers:
                reader.join()
        assert refused == []
        assert client.recall("switching", TEA, k=1)[0].memory.text == TEA
        assert client.verify_integrity("switching").valid
