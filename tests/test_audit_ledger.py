"""Tampering with a tenant file is caught by VerifyIntegrity, at the right ledger entry."""

from __future__ import annotations

from collections.abc import Callable

import apsw
import pytest

from mnemosyne.client import IntegrityReport, MemoryClient
from tests.support import ServerFactory, ServerProcess, sql_row


@pytest.fixture
def tampered(
    server_factory: ServerFactory,
) -> tuple[ServerProcess, list[int], Callable[..., None], Callable[[int], int]]:
    """A server with 5 memories in tenant "acme"; yields (server, ids, edit) where edit(sql,
    params) changes the file behind the server's back, as a stray process would."""
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        ids = [
            client.retain("acme", f"Memory {i}: Bob's ticket TK-{i} status: open since 2024-01-0{i + 1}").memory_id
            for i in range(5)
        ]
        assert client.verify_integrity("acme").valid

    def edit(sql: str, params: tuple[object, ...] = ()) -> None:
        connection = apsw.Connection(str(server.tenant_file("acme")))
        connection.set_busy_timeout(5000)
        connection.execute(sql, params)
        connection.close()

    def ledger_seq(memory_id: int) -> int:
        connection = apsw.Connection(str(server.tenant_file("acme")), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return int(sql_row(connection, "SELECT ledger_seq FROM memories WHERE id = ?", (memory_id,))[0])
        finally:
            connection.close()

    return server, ids, edit, ledger_seq


def _verify(server: ServerProcess) -> IntegrityReport:
    with MemoryClient(server.target) as client:
        return client.verify_integrity("acme")


def test_untouched_file_is_valid(tampered) -> None:
    server, ids, _, _ = tampered
    report = _verify(server)
    assert report.valid and report.first_broken_at == 0 and report.checked == len(ids)


def test_edited_body_is_caught_at_its_entry(tampered) -> None:
    server, ids, edit, seq = tampered
    edit("UPDATE memories SET body = 'Memory 2: all is fine' WHERE id = ?", (ids[2],))
    report = _verify(server)
    assert not report.valid and report.first_broken_at == seq(ids[2])
    assert report.problems[0].memory_id == ids[2] and "body" in report.problems[0].detail


def test_edited_fact_is_caught_at_its_entry(tampered) -> None:
    server, ids, edit, seq = tampered
    edit("UPDATE facts SET normalized = 'TK-999' WHERE memory_id = ? AND kind = 'identifier'", (ids[3],))
    report = _verify(server)
    assert not report.valid and report.first_broken_at == seq(ids[3])
    assert "facts" in report.problems[0].detail


def test_edited_embedding_is_caught_at_its_entry(tampered) -> None:
    server, ids, edit, seq = tampered
    edit("UPDATE embeddings SET vector = zeroblob(length(vector)) WHERE memory_id = ?", (ids[1],))
    report = _verify(server)
    assert not report.valid and report.first_broken_at == seq(ids[1])
    assert "embedding" in report.problems[0].detail


def test_deleted_memory_row_is_caught_at_its_entry(tampered) -> None:
    server, ids, edit, seq = tampered
    target_seq = seq(ids[4])
    edit("PRAGMA foreign_keys = OFF")
    for table in ("facts", "triples", "embeddings"):
        edit(f"DELETE FROM {table} WHERE memory_id = ?", (ids[4],))
    edit("DELETE FROM memories WHERE id = ?", (ids[4],))
    report = _verify(server)
    assert not report.valid and report.first_broken_at == target_seq
    assert report.problems[0].kind == "MEMORY_MISSING"


def test_memory_row_without_ledger_entry_is_caught_after_the_head(tampered) -> None:
    server, ids, edit, _ = tampered
    edit(
        "INSERT INTO memories(scope, body, metadata, fingerprint, created_at, ledger_seq) "
        "VALUES('global', 'smuggled in', '{}', 'x', 0, 0)"
    )
    report = _verify(server)
    assert not report.valid
    assert report.first_broken_at == len(ids) + 1  # where its entry should have been appended
    assert report.problems[0].kind == "UNRECORDED_MEMORY"


def test_edited_ledger_entry_breaks_the_chain_there(tampered) -> None:
    server, ids, edit, seq = tampered
    edit(
        'UPDATE ledger SET entry = replace(entry, \'"op":"retain"\', \'"op":"retain" \') WHERE seq = ?', (seq(ids[1]),)
    )
    report = _verify(server)
    assert not report.valid and report.first_broken_at == seq(ids[1])
    assert report.problems[0].kind == "CHAIN_BROKEN"


def test_deleted_ledger_entry_is_a_gap(tampered) -> None:
    server, ids, edit, seq = tampered
    edit("DELETE FROM ledger WHERE seq = ?", (seq(ids[3]),))
    report = _verify(server)
    assert not report.valid and report.first_broken_at == seq(ids[3])


def test_forget_keeps_the_chain_valid_and_erasing_without_ledger_is_caught(tampered) -> None:
    server, ids, edit, seq = tampered
    with MemoryClient(server.target) as client:
        assert client.forget("acme", ids[0])
        assert client.verify_integrity("acme").valid
    edit("UPDATE memories SET body = '', forgotten_at = 1 WHERE id = ?", (ids[2],))
    report = _verify(server)
    assert not report.valid and report.first_broken_at == seq(ids[2])


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE ledger SET entry = X'00ff' WHERE seq = 2",  # a blob where text belongs
        "UPDATE ledger SET hash = X'00ff' WHERE seq = 2",
        "UPDATE ledger SET hash = 'é' WHERE seq = 2",
        "UPDATE ledger SET entry = '[1, 2]' WHERE seq = 2",  # JSON, not an object
        "UPDATE ledger SET entry = json_set(entry, '$.memory_id', 'abc') WHERE seq = 2",
        "UPDATE ledger SET entry = json_set(entry, '$.merged', 7), hash = 'x' WHERE seq = 3",
        "UPDATE ledger SET entry = json_set(entry, '$.op', 'records', '$.changes', 5) WHERE seq = 3",
        "UPDATE memories SET body = X'00ff' WHERE id = 2",
        "UPDATE memories SET metadata = X'00ff' WHERE id = 2",
        "UPDATE memories SET metadata = '[1' WHERE id = 2",
        "UPDATE memories SET scope = 5 WHERE id = 2",
        "UPDATE memories SET forgotten_at = 'x' WHERE id = 2",
        "UPDATE embeddings SET vector = X'00' WHERE memory_id = 2",
    ],
)
def test_any_stored_value_is_a_finding_not_a_crash(tampered, sql: str) -> None:
    """A file edited behind the server's back may hold any value in any column: the audit reports
    it as a problem, never INTERNAL (a restore from a replica runs the same audit)."""
    server, _, edit, _ = tampered
    edit(sql)
    report = _verify(server)
    assert not report.valid and report.problems, sql
