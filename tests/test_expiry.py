"""Memories that expire (docs/expiry.md), on a real server whose expiry clock a test moves
(MNEMOSYNE_TEST_CLOCK_FILE): hidden from every read that lists or searches from expires_at on,
erased after the tenant's grace with ForgetMemory's guarantees, through gRPC, HTTP/JSON and the
official mem0 client."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import apsw
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from mnemosyne.cli.server_process import ServerProcess
from mnemosyne.client import BackupChunk, ExpiryPolicy, MemoryClient, RetainItem, TenantBackup
from mnemosyne.client.errors import AbortedError, InvalidArgumentError
from mnemosyne.engine.expiry import ERASURE_WAITS_FOR_COPIES_SECONDS, SWEEP_BATCH, SWEEP_MAX_BATCHES
from mnemosyne.v1 import memory_pb2
from tests.mem0_support import Mem0Client
from tests.support import wait_until
from tests.test_erasure import _mcp, _tool_text, texts_left

DAY = 86400.0
GRACE = 3600


class Clock:
    """The server's expiry clock: the wall clock plus what this file holds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.write_text("0")
        self.offset = 0.0

    def advance(self, seconds: float) -> None:
        self.offset += seconds
        self.path.write_text(str(self.offset))

    def now(self) -> float:
        return time.time() + self.offset


def _server(server_factory: Any, tmp_path: Path) -> tuple[ServerProcess, Clock]:
    clock = Clock(tmp_path / "clock")
    server: ServerProcess = server_factory(env={"MNEMOSYNE_TEST_CLOCK_FILE": str(clock.path)}, http=True).start()
    return server, clock


def _post(server: ServerProcess, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{server.http_url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _recalled(client: MemoryClient, tenant: str, query: str) -> set[str]:
    return {h.memory.text for h in client.recall(tenant, query, k=10)}


def _listed(client: MemoryClient, tenant: str) -> set[str]:
    return {m.text for m in client.list_memories(tenant, page_size=100).memories}


def _mcp_answers(server: ServerProcess, tenant: str) -> str:
    """What the MCP tools that read memories answer (recall, and read_memory with a query)."""

    async def run() -> str:
        async with _mcp(server, tenant) as session:
            recalled = _tool_text(await session.call_tool("recall", {"query": "code word kept", "k": 10}))
            read = _tool_text(await session.call_tool("read_memory", {"query": "code word kept"}))
            return recalled + "\n" + read

    return anyio.run(run)


def test_past_near_and_far_expiries_hidden_everywhere_then_erased_without_a_trace(
    server_factory: Any, tenant: str, tmp_path: Path
) -> None:
    server, clock = _server(server_factory, tmp_path)
    past, near, far, by_mem0 = "Quokka7731Past", "Narwhal5512Near", "Ibex9043Far", "Axolotl2288Mem0"
    headers = {"Mnemosyne-Tenant": tenant}
    with MemoryClient(server.target) as client, Mem0Client(server.http_url, "any", tmp_path, headers) as mem0:
        client.set_expiry_policy(tenant, ExpiryPolicy(grace_seconds=GRACE))
        now = clock.now()
        # mem0's expiration_date is a day: its memory expires at the start of the day after it.
        # The near one expires a moment before, so that both are past their expiry and within
        # their grace at once, whatever the time of day.
        tomorrow_utc = (datetime.fromtimestamp(now, UTC) + timedelta(days=1)).date()
        mem0_expires = datetime.combine(tomorrow_utc + timedelta(days=1), datetime.min.time(), UTC).timestamp()
        past_id = client.retain(tenant, f"the code word {past} is kept", expires_at=now - 10).memory_id
        near_id = client.retain(tenant, f"the code word {near} is kept", expires_at=mem0_expires - 30).memory_id
        # Over HTTP/JSON: expiresAt as proto3 JSON writes a Timestamp.
        far_at = datetime.fromtimestamp(now + 3650 * DAY, UTC).isoformat().replace("+00:00", "Z")
        status, answer = _post(
            server, f"/v1/tenants/{tenant}/memories", {"text": f"the code word {far} is kept", "expiresAt": far_at}
        )
        assert status == 200, answer
        tomorrow = tomorrow_utc.isoformat()
        added = mem0.call("add", messages=f"the code word {by_mem0} is kept", user_id="u1", expiration_date=tomorrow)
        assert added["status"] == "SUCCEEDED"
        mem0_id = mem0.call("get_all", filters={"user_id": "u1"})["results"][0]["id"]
        assert mem0.call("get", memory_id=mem0_id)["expiration_date"] == tomorrow

        # Expired already: hidden from recall and lists, still answered by id (its grace).
        assert _recalled(client, tenant, "code word kept") == {
            f"the code word {near} is kept",
            f"the code word {far} is kept",
            f"the code word {by_mem0} is kept",
        }
        assert past not in " ".join(_listed(client, tenant))
        answered = _mcp_answers(server, tenant)
        assert near in answered and far in answered and past not in answered
        assert client.get_memory(tenant, past_id).expires_at == pytest.approx(now - 10, abs=1e-3)

        clock.advance(mem0_expires + 60 - clock.now())  # near and the mem0 memory expire
        assert _recalled(client, tenant, "code word kept") == {f"the code word {far} is kept"}
        assert _listed(client, tenant) == {f"the code word {far} is kept"}
        assert mem0.call("search", query="code word kept", filters={"user_id": "u1"})["results"] == []
        assert mem0.call("get_all", filters={"user_id": "u1"})["results"] == []
        assert mem0.call("get", memory_id=mem0_id)["memory"] == f"the code word {by_mem0} is kept"  # by id: kept
        answered = _mcp_answers(server, tenant)
        assert far in answered and not any(word in answered for word in (near, by_mem0, past))

        clock.advance(GRACE + 60)  # every grace has passed: the sweep erases them
        wait_until(lambda: client.get_memory(tenant, near_id).forgotten, seconds=20)
        wait_until(lambda: client.get_memory(tenant, int(mem0_id)).forgotten, seconds=20)
        assert client.get_memory(tenant, past_id).forgotten
        assert client.list_memory_revisions(tenant, near_id) == []
        assert client.verify_integrity(tenant).valid
    server.stop()
    left = texts_left(server.data_dir, [past, near, by_mem0, far])
    assert {text.lower() for texts in left.values() for text in texts} == {far.lower()}, left
    connection = apsw.Connection(str(server.tenant_file(tenant)), flags=apsw.SQLITE_OPEN_READONLY)
    try:  # each erasure is its ledger entry, an expire (not a forget)
        erasures = connection.execute(
            "SELECT json_extract(entry, '$.memory_id'), json_extract(entry, '$.op') FROM ledger "
            "WHERE json_extract(entry, '$.op') IN ('forget', 'expire')"
        ).fetchall()
    finally:
        connection.close()
    assert sorted(erasures) == sorted([(past_id, "expire"), (near_id, "expire"), (int(mem0_id), "expire")])


def test_un_expiring_in_the_grace_defaults_and_refusals(server_factory: Any, tenant: str, tmp_path: Path) -> None:
    server, clock = _server(server_factory, tmp_path)
    with MemoryClient(server.target) as client:
        client.set_expiry_policy(
            tenant, ExpiryPolicy(default_ttl_seconds=int(DAY), update_extends=True, grace_seconds=GRACE)
        )
        memory_id = client.retain(tenant, "Pelican4410 stays a day").memory_id
        stamped = client.get_memory(tenant, memory_id).expires_at
        assert stamped == pytest.approx(clock.now() + DAY, abs=5)
        clock.advance(DAY / 2)
        client.update_memory(tenant, memory_id, "Pelican4410 stays a day, updated")  # extends
        assert client.get_memory(tenant, memory_id).expires_at == pytest.approx(clock.now() + DAY, abs=5)
        clock.advance(DAY + 60)
        assert _listed(client, tenant) == set()
        # In the grace: cleared, it is shown again and never erased.
        assert client.update_memory(tenant, memory_id, clear_expires_at=True).updated
        assert _listed(client, tenant) == {"Pelican4410 stays a day, updated"}
        clock.advance(2 * GRACE)
        assert not client.get_memory(tenant, memory_id).forgotten

        for stamp in (Timestamp(seconds=300_000_000_000), Timestamp(seconds=0, nanos=-5)):
            request = memory_pb2.RetainRequest(tenant=tenant, text="never stored", expires_at=stamp)
            with pytest.raises(InvalidArgumentError) as refused:
                client.call(client.memory.Retain, request, retry=False)
            assert refused.value.reason == "EXPIRES_AT_INVALID"
        with pytest.raises(InvalidArgumentError) as refused:
            client.update_memory(tenant, memory_id, expires_at=clock.now(), clear_expires_at=True)
        assert refused.value.reason == "EXPIRES_AT_CONFLICT"
        with pytest.raises(InvalidArgumentError) as refused:
            client.set_expiry_policy(tenant, ExpiryPolicy(grace_seconds=-1))
        assert refused.value.reason == "EXPIRY_POLICY_INVALID"

    # mem0: a malformed date is 400 (mem0 fails open); expiration_date=None un-expires.
    headers = {"Mnemosyne-Tenant": tenant}
    with MemoryClient(server.target) as client, Mem0Client(server.http_url, "any", tmp_path, headers) as mem0:
        for bad in ("2030-13-01", "tomorrow", "2030-01-01T00:00:00Z", 20300101):
            answer = mem0.attempt("add", messages="never stored either", user_id="u2", expiration_date=bad)
            assert answer.get("status") == 400, answer
        client.set_expiry_policy(tenant, ExpiryPolicy(grace_seconds=int(7 * DAY)))  # yesterday's is in its grace
        yesterday = (datetime.fromtimestamp(clock.now(), UTC) - timedelta(days=1)).date().isoformat()
        added = mem0.call("add", messages="Heron3321 expired yesterday", user_id="u2", expiration_date=yesterday)
        event = f"{server.http_url}/v1/event/{added['event_id']}/"
        with urllib.request.urlopen(urllib.request.Request(event, headers=headers), timeout=10) as answer:
            heron = json.loads(answer.read())["results"][0]["id"]
        assert mem0.call("get_all", filters={"user_id": "u2"})["results"] == []
        assert mem0.call("get", memory_id=heron)["expiration_date"] == yesterday
        mem0.call("update", memory_id=heron, expiration_date=None)
        assert [m["id"] for m in mem0.call("get_all", filters={"user_id": "u2"})["results"]] == [heron]
        assert mem0.call("get", memory_id=heron)["expiration_date"] is None


def test_an_expiry_at_the_end_of_9999_is_refused_or_read_back(server_factory: Any, tenant: str, tmp_path: Path) -> None:
    """An expiry is held as float seconds, where the last microsecond of 9999 rounds to the year
    10000, which no Timestamp holds: both are refused on every way in (a retain, a fast one, an
    update, mem0's last day); 9999's last whole second is kept; and a file holding the year 10000's
    float (written before the bound) still answers every read of that memory."""
    server, _ = _server(server_factory, tmp_path)
    last_second = 253_402_300_799  # 9999-12-31T23:59:59Z
    past_the_end = (Timestamp(seconds=last_second + 1), Timestamp(seconds=last_second, nanos=999_999_999))
    with MemoryClient(server.target) as client:
        for stamp in (*past_the_end, Timestamp(seconds=last_second, nanos=999_999_000)):
            for fast in (False, True):
                request = memory_pb2.RetainRequest(tenant=tenant, text="never stored", expires_at=stamp, fast=fast)
                with pytest.raises(InvalidArgumentError) as refused:
                    client.call(client.memory.Retain, request, retry=False)
                assert refused.value.reason == "EXPIRES_AT_INVALID"
        kept = client.retain(tenant, "Osprey2210 is kept to the end of 9999", expires_at=float(last_second)).memory_id
        for stamp in past_the_end:
            update = memory_pb2.UpdateMemoryRequest(tenant=tenant, memory_id=kept, expires_at=stamp)
            with pytest.raises(InvalidArgumentError) as refused:
                client.call(client.memory.UpdateMemory, update, retry=False)
            assert refused.value.reason == "EXPIRES_AT_INVALID"
        assert client.get_memory(tenant, kept).expires_at == last_second
    with Mem0Client(server.http_url, "any", tmp_path, {"Mnemosyne-Tenant": tenant}) as mem0:
        answer = mem0.attempt("add", messages="Osprey2210 never stored", user_id="u3", expiration_date="9999-12-31")
        assert answer.get("status") == 400 and "9999-12-30" in str(answer), answer
        mem0.call("update", memory_id=str(kept), expiration_date="9999-12-30")
        assert mem0.call("get", memory_id=str(kept))["expiration_date"] == "9999-12-30"

    server.stop()
    with apsw.Connection(str(server.tenant_file(tenant))) as connection:
        connection.execute("UPDATE memories SET expires_at = ? WHERE id = ?", ((last_second + 1) * 1.0, kept))
    server.start()
    with MemoryClient(server.target) as client:
        assert client.get_memory(tenant, kept).expires_at == pytest.approx(last_second + 1, abs=1e-3)
        assert [m.id for m in client.list_memories(tenant).memories] == [kept]
        assert [h.memory.id for h in client.recall(tenant, "Osprey2210", k=3)] == [kept]
        assert client.list_memory_revisions(tenant, kept)
    with Mem0Client(server.http_url, "any", tmp_path, {"Mnemosyne-Tenant": tenant}) as mem0:
        assert mem0.call("get", memory_id=str(kept))["expiration_date"] == "9999-12-31"


def test_erasures_due_after_the_year_2319_leave_the_hot_path_workers_running(server_factory: Any, tenant: str) -> None:
    """An erasure due past threading.TIMEOUT_MAX from now (an expiry after the year 2319) was a
    wake-up the worker waiting for it could not wait for: its OverflowError ended the worker, so two
    such retains (one per worker, on the wall clock: the test clock's rechecks hid it) stopped every
    tenant's fast writes. The workers wait in steps and apply them."""
    server: ServerProcess = server_factory().start()
    end_of_9999 = 253_402_300_799.0
    with MemoryClient(server.target) as client:
        for far in ("a", "b"):
            client.retain(f"{tenant}-{far}", "Osprey2210 is kept to the end of 9999", expires_at=end_of_9999)
        client.hot_path(tenant, "enable")
        client.retain(tenant, "Heron17 lands at dawn", fast=True)
        client.hot_path(tenant, "flush", timeout_seconds=10)  # DEADLINE_EXCEEDED with no worker left
        assert [m.text for m in client.list_memories(tenant).memories] == ["Heron17 lands at dawn"]


def test_the_sweep_erases_within_its_turns_while_a_fast_write_backlog_waits(
    server_factory: Any, tenant: str, tmp_path: Path
) -> None:
    """The sweep's share of the worker is not idle time: with a fast-write backlog held back
    (MNEMOSYNE_TEST_HOLD_BACKLOG: the workers take only the writes a read waits for), every
    expired memory is erased within the worker turns that erasing them takes, paced one round at a
    time by a read's consistency token, while the backlog is still pending."""
    hold = tmp_path / "hold-backlog"
    hold.touch()
    clock = Clock(tmp_path / "clock")
    env = {"MNEMOSYNE_TEST_CLOCK_FILE": str(clock.path), "MNEMOSYNE_TEST_HOLD_BACKLOG": str(hold)}
    server = server_factory(env=env).start()
    expiring = SWEEP_BATCH * SWEEP_MAX_BATCHES + SWEEP_BATCH  # two turns of the sweep
    turns = -(-expiring // (SWEEP_BATCH * SWEEP_MAX_BATCHES))
    with MemoryClient(server.target, session_consistency=False) as client, MemoryClient(server.target) as pacer:
        client.hot_path(tenant, "enable")
        client.set_expiry_policy(tenant, ExpiryPolicy(default_ttl_seconds=60, grace_seconds=0))
        ids = [
            r.memory_id
            for start in range(0, expiring, 200)
            for r in client.retain_batch(tenant, [f"Ocelot{i} expires soon" for i in range(start, start + 200)])
        ]
        assert len(set(ids)) == expiring
        client.set_expiry_policy(tenant, ExpiryPolicy(grace_seconds=0))  # the writes below never expire
        backlog = client.retain_batch(tenant, [f"backlog entry {i}" for i in range(100)], fast=True)
        clock.advance(120)  # every one of them is due for erasure

        def erased() -> int:
            return sum(client.get_memory(tenant, memory_id).forgotten for memory_id in ids)

        assert erased() == 0  # the idle wake-ups of a held backlog took no turn of the sweep
        for turn in range(1, turns + 1):
            # A write the pacer reads back: one round of the tenant's worker, ahead of the backlog.
            paced = pacer.retain(tenant, f"pace {turn}", fast=True)
            pacer.list_memories(tenant, page_size=1)  # waits for the pace write (its token)
            assert pacer.get_event(tenant, paced.event_id).status == "succeeded"
            assert erased() >= min(expiring, turn * SWEEP_BATCH * SWEEP_MAX_BATCHES)
        assert erased() == expiring
        # ... while the whole backlog still waits: the sweep did not wait for the tenant to be idle.
        assert {client.get_event(tenant, r.event_id).status for r in backlog} == {"pending"}
        assert client.verify_integrity(tenant).valid
        hold.unlink()
        client.hot_path(tenant, "flush", timeout_seconds=60)
        assert {client.get_event(tenant, r.event_id).status for r in backlog} == {"succeeded"}


def test_a_longer_grace_holds_for_the_rest_of_a_sweep_under_way(
    server_factory: Any, tenant: str, tmp_path: Path
) -> None:
    """A sweep read the tenant's grace once, then erased its turn's batches with it: a policy
    giving a longer grace, acknowledged while the turn ran, did not stop the turn's later batches
    (300-400 more memories erased after the acknowledgement, 8 trials of 8), though the policy said
    they were in their grace. Each batch now reads the grace in its own transaction."""
    clock = Clock(tmp_path / "clock")
    server: ServerProcess = server_factory(env={"MNEMOSYNE_TEST_CLOCK_FILE": str(clock.path)}).start()
    expiring = 3 * SWEEP_BATCH * SWEEP_MAX_BATCHES
    with MemoryClient(server.target) as client:
        for trial in range(3):
            name = f"{tenant}-{trial}"
            client.set_expiry_policy(name, ExpiryPolicy(default_ttl_seconds=60, grace_seconds=0))
            for start in range(0, expiring, 500):
                client.retain_batch(name, [f"Lynx{i} of trial {trial}" for i in range(start, start + 500)])
            clock.advance(120)  # every one of them is due for erasure

            def sweeping(name: str = name) -> bool:
                return client.stats(name).forgotten > 0

            wait_until(sweeping)  # a sweep is under way
            client.set_expiry_policy(name, ExpiryPolicy(default_ttl_seconds=60, grace_seconds=86400))
            erased = client.stats(name).forgotten
            assert erased < expiring  # the policy landed before the sweep was done
            time.sleep(1.0)  # room for the sweep's turn to go on
            assert client.stats(name).forgotten == erased, "erased after a longer grace was acknowledged"
            assert client.verify_integrity(name).valid


def test_the_python_client_s_batch_items_carry_their_own_expiry(client: MemoryClient, tenant: str) -> None:
    """RetainBatch items take expires_at (docs/expiry.md), and the Python client's RetainItem had no
    such field: a batch could not expire but through the tenant's default. Each item's is sent,
    checked as ``retain`` checks it before anything is sent."""
    now = time.time()
    past, later = now - 60, now + 30 * DAY
    results = client.retain_batch(
        tenant,
        [
            RetainItem("Bittern4410 was past its time", expires_at=past),
            RetainItem("Bittern4410 expires next month", expires_at=later),
            RetainItem("Bittern4410 never expires"),
        ],
    )
    expiries = [client.get_memory(tenant, r.memory_id).expires_at for r in results]
    assert expiries == [pytest.approx(past, abs=1e-3), pytest.approx(later, abs=1e-3), None]
    assert _recalled(client, tenant, "Bittern4410") == {"Bittern4410 expires next month", "Bittern4410 never expires"}
    with pytest.raises(InvalidArgumentError) as refused:
        client.retain_batch(tenant, [RetainItem("never sent", expires_at=float("nan"))])
    assert refused.value.reason == "EXPIRES_AT_INVALID"


def test_fast_writes_due_for_erasure_when_applied_are_erased(client: MemoryClient, tenant: str) -> None:
    """A fast write names its tenant's erasure in the index at acceptance; the worker's round that
    claimed it swept first (the erasure was due), found nothing expiring in the file yet and cleared
    the index, then applied it: such a memory (and one due later, whose time the earlier one had
    covered) was never erased. The round names the erasures of what it applies, before its commit."""
    client.set_expiry_policy(tenant, ExpiryPolicy(grace_seconds=0))
    client.hot_path(tenant, "enable")
    now = time.time()
    items = [RetainItem("Wombat3318 was due", expires_at=now - 10), RetainItem("Wombat3318 is due", expires_at=now + 1)]
    events = [r.event_id for r in client.retain_batch(tenant, items, fast=True)]
    assert client.hot_path(tenant, "flush", timeout_seconds=10).succeeded == 2
    ids = [client.get_event(tenant, e).created_memory_ids[0] for e in events]
    wait_until(lambda: all(client.get_memory(tenant, i).forgotten for i in ids), seconds=10)


def test_a_write_committed_while_a_sweep_records_its_next_erasure_is_erased(
    server_factory: Any, tenant: str, tmp_path: Path
) -> None:
    """A synchronous write names its erasure in the index before it commits; a sweep that read the
    tenant's next erasure before that commit (none) then recorded it, clearing the write's name:
    that memory was never erased. The worker is held (MNEMOSYNE_TEST_HOLD_WORKERS "swept") between
    the sweep's read and its record while the write commits; a name given meanwhile is kept."""
    hold = tmp_path / "hold-workers"
    hold.write_text("swept")
    server: ServerProcess = server_factory(env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}).start()
    with MemoryClient(server.target) as client:
        client.set_expiry_policy(tenant, ExpiryPolicy(grace_seconds=0))
        due = client.retain(tenant, "Curlew801 was due", expires_at=time.time() - 10)
        wait_until(lambda: "held at swept " in server.stderr_path.read_text(errors="replace"))
        later = client.retain(tenant, "Curlew801 is due in a second", expires_at=time.time() + 1)
        hold.unlink()
        ids = [due.memory_id, later.memory_id]
        wait_until(lambda: all(client.get_memory(tenant, i).forgotten for i in ids), seconds=10)


def test_an_imported_tenant_s_expired_memories_are_erased(client: MemoryClient, tenant: str) -> None:
    """The index names a tenant with erasures due when a write gives a memory an expiry; a tenant
    file that arrived whole (ImportTenant, an online restore, a move) was named by no write, so its
    expired memories stayed hidden for ever, never erased. An installed file is swept at once."""
    client.set_expiry_policy(tenant, ExpiryPolicy(grace_seconds=2))
    client.retain(tenant, "Godwit5120 is in its grace", expires_at=time.time() - 1)
    manifest, *chunks = client.export_tenant(tenant)
    assert isinstance(manifest, TenantBackup)
    imported = f"{tenant}-imported"
    client.import_tenant(manifest, [c for c in chunks if isinstance(c, BackupChunk)], tenant=imported)
    assert not client.get_memory(imported, 1).forgotten  # its grace has not passed yet
    wait_until(lambda: client.get_memory(imported, 1).forgotten, seconds=10)


def test_a_sweep_killed_at_random_moments_erases_each_expired_memory_once_and_keeps_the_rest(
    server_factory: Any, tenant: str, tmp_path: Path
) -> None:
    """A restart never misses an erasure due, and a killed sweep's batch is all or nothing:
    SIGKILLs at random moments of a sweep of eight turns leave each expired memory erased exactly
    once (one expire entry, the chain valid, no byte of it in any file) and every memory without
    an expiry whole."""
    clock = Clock(tmp_path / "clock")
    server: ServerProcess = server_factory(env={"MNEMOSYNE_TEST_CLOCK_FILE": str(clock.path)}).start()
    expiring = 8 * SWEEP_BATCH * SWEEP_MAX_BATCHES
    kept = [f"Tapir{i} never expires" for i in range(50)]
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    with MemoryClient(server.target) as client:
        client.set_expiry_policy(tenant, ExpiryPolicy(default_ttl_seconds=60, grace_seconds=0))
        ids = [
            r.memory_id
            for start in range(0, expiring, 500)
            for r in client.retain_batch(tenant, [f"Gecko{i} expires soon" for i in range(start, start + 500)])
        ]
        client.set_expiry_policy(tenant, ExpiryPolicy(grace_seconds=0))  # the kept ones never expire
        client.retain_batch(tenant, kept)
    clock.advance(120)  # every Gecko is due for erasure: the sweep begins
    interrupted = []  # erased when each kill came
    for _ in range(4):
        with MemoryClient(server.target) as client:
            before = client.stats(tenant).forgotten
            wait_until(lambda: before == expiring or client.stats(tenant).forgotten > before)  # it goes on
        time.sleep(rng.uniform(0.0, 0.1))
        server.kill()
        server.restart()
        with MemoryClient(server.target) as client:
            interrupted.append(client.stats(tenant).forgotten)
    with MemoryClient(server.target) as client:
        wait_until(lambda: client.stats(tenant).forgotten == expiring, seconds=60)
        assert client.verify_integrity(tenant).valid
        assert {m.text for m in client.list_memories(tenant, page_size=100).memories} == set(kept)
    server.stop()
    assert sum(0 < erased < expiring for erased in interrupted) >= 2, (seed, interrupted)  # kills within the sweep
    assert texts_left(server.data_dir, [f"Gecko{i} " for i in range(expiring)]) == {}, seed
    connection = apsw.Connection(str(server.tenant_file(tenant)), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        erasures = connection.execute(
            "SELECT json_extract(entry, '$.memory_id') FROM ledger WHERE json_extract(entry, '$.op') = 'expire'"
        ).fetchall()
    finally:
        connection.close()
    assert sorted(erasures) == sorted((memory_id,) for memory_id in ids), seed


def test_a_copy_being_sent_waits_out_the_sweep_and_is_revoked_only_once_an_erasure_is_late(
    server_factory: Any, tenant: str, tmp_path: Path
) -> None:
    """An export (or a backup) of a tenant whose memories expire all the time could not finish:
    each sweep's erasure revoked the copy being sent. The sweep waits while a copy of the tenant is
    being sent, and erases once it was sent, or once its oldest erasure is
    ERASURE_WAITS_FOR_COPIES_SECONDS late: then the copy is revoked (COPY_REVOKED), as by a forget."""
    server, clock = _server(server_factory, tmp_path)
    with MemoryClient(server.target, timeout=120) as client:
        client.set_expiry_policy(tenant, ExpiryPolicy(grace_seconds=0))
        # More than a stream's flow-control windows hold: the server is still sending when its
        # client stops reading, the scratch copy in place.
        for start in range(0, 12_000, 1000):
            client.retain_batch(tenant, [f"note {i}: {'padding words ' * 12}{i}" for i in range(start, start + 1000)])

        def expiring(name: str) -> list[str]:
            texts = [f"{name}{i} expires soon" for i in range(20)]
            client.retain_batch(tenant, [RetainItem(t, expires_at=clock.now() + 60) for t in texts])
            return texts

        geckos = expiring("Gecko")
        export = client.export_tenant(tenant)
        manifest = next(export)
        assert isinstance(manifest, TenantBackup)
        clock.advance(120)  # every Gecko's erasure is due while the copy is being sent
        time.sleep(3)  # the sweep's turns come meanwhile
        chunks = [part for part in export if isinstance(part, BackupChunk)]
        assert sum(len(c.data) for c in chunks) == sum(f.size for f in manifest.files)
        wait_until(lambda: client.stats(tenant).forgotten == 20, seconds=30)  # erased once it was sent
        assert texts_left(server.data_dir, geckos) == {}

        herons = expiring("Heron")
        export = client.export_tenant(tenant)
        next(export)
        clock.advance(120 + ERASURE_WAITS_FOR_COPIES_SECONDS)  # the copy is still being sent: too late
        wait_until(lambda: client.stats(tenant).forgotten == 40, seconds=30)
        with pytest.raises(AbortedError) as revoked:
            for _ in export:
                pass
        assert revoked.value.reason == "COPY_REVOKED"
        assert texts_left(server.data_dir, herons) == {}
