"""Graceful shutdown under load: SIGTERM while 20 clients write.

Order on SIGTERM: health turns NOT_SERVING (gRPC health and /readyz) while calls are still
served for --drain-delay-seconds; then new calls are refused and in-flight ones get the grace
period; then the files close. Every write that returned success is there after a restart,
nothing is half-written (VerifyIntegrity), and no call was cut off (CANCELLED/INTERNAL).

The writer is a parameter: synchronous writes (accepted = committed), and hot-path writes
(``fast=True`` on enabled tenants: accepted = in the durable operation log, committed by the
workers before or after the restart).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2

from mnemosyne.cli.server_process import LocalMembers
from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import MnemosyneClientError, error_info
from mnemosyne.store.membership import owner_of
from mnemosyne.transport.cluster.fanout import AGGREGATE_STATS
from mnemosyne.transport.cluster.forwarding import ROUTE_KEY
from mnemosyne.transport.cluster.link import MESSAGE, STREAM_WINDOW, LinkLost, LinkStream, MemberLink
from mnemosyne.v1 import admin_pb2, admin_pb2_grpc, hot_path_pb2, hot_path_pb2_grpc, memory_pb2, memory_pb2_grpc
from tests.http_support import request
from tests.support import ServerProcess, gauge, health_check, link_key, link_port, wait_until

THREADS = 20
TENANTS = 4
DRAIN_DELAY = 3.0
GRACE = 15.0


def _sync_write(client: MemoryClient, tenant: str, text: str) -> int:
    result = client.retain(tenant, text)
    assert result.status == "created", result
    return result.memory_id


def _fast_write(client: MemoryClient, tenant: str, text: str) -> int:
    result = client.retain(tenant, text, fast=True)
    assert result.status == "enqueued", result
    return 0  # the memory id is decided later, by a worker


# name -> function performing one write and returning its memory id once accepted (0: not yet known).
WRITERS: dict[str, Callable[[MemoryClient, str, str], int]] = {"sync": _sync_write, "fast": _fast_write}


@dataclass
class Load:
    accepted: dict[str, tuple[str, int]] = field(default_factory=dict)  # text -> (tenant, id)
    attempted: set[str] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)
    accepted_at: list[float] = field(default_factory=list)
    refusals: list[tuple[float, grpc.StatusCode]] = field(default_factory=list)
    health: list[tuple[float, str]] = field(default_factory=list)  # (time, SERVING/NOT_SERVING/error)
    lock: threading.Lock = field(default_factory=threading.Lock)
    enough: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


def _writer(server: ServerProcess, write: Callable[[MemoryClient, str, str], int], n: int, load: Load) -> None:
    tenant = f"shutdown-{n % TENANTS}"
    with MemoryClient(server.target, retries=0, timeout=60) as client:
        for i in range(100_000):
            if load.done.is_set():
                return
            text = f"writer {n} item {i}: shipment {n * 1000 + i} left the dock"
            with load.lock:
                load.attempted.add(text)
            try:
                memory_id = write(client, tenant, text)
            except MnemosyneClientError as exc:
                with load.lock:
                    load.refusals.append((time.monotonic(), exc.code))
                    load.messages.append(f"{exc}: {text}")
                return
            with load.lock:
                load.accepted[text] = (tenant, memory_id)
                load.accepted_at.append(time.monotonic())
                if len(load.accepted) >= 200:
                    load.enough.set()


def _health_poller(server: ServerProcess, load: Load) -> None:
    with grpc.insecure_channel(server.target) as channel:
        while not load.done.is_set():
            try:
                status = health_pb2.HealthCheckResponse.ServingStatus.Name(health_check(channel, timeout=5).status)
            except grpc.RpcError as exc:
                status = exc.code().name
            load.health.append((time.monotonic(), status))
            if status not in ("SERVING", "NOT_SERVING"):
                return
            time.sleep(0.02)


def _readyz(server: ServerProcess) -> int:
    try:
        with urllib.request.urlopen(server.metrics_url + "/readyz", timeout=5) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("mode", sorted(WRITERS))
def test_sigterm_under_load(server_factory, mode: str) -> None:
    server: ServerProcess = server_factory(
        args=["--drain-delay-seconds", str(DRAIN_DELAY), "--grace-seconds", str(GRACE)], metrics=True
    ).start()
    load = Load()
    if mode == "fast":
        with MemoryClient(server.target) as client:
            for n in range(TENANTS):
                client.hot_path(f"shutdown-{n}", "enable")
    threads = [threading.Thread(target=_writer, args=(server, WRITERS[mode], n, load)) for n in range(THREADS)]
    threads.append(threading.Thread(target=_health_poller, args=(server, load)))
    for t in threads:
        t.start()
    try:
        assert load.enough.wait(120), "the writers did not get going"
        assert _readyz(server) == 200
        assert server.process is not None
        sigterm_at = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        # /readyz turns 503 during the drain delay (polled: no fixed sleep).
        while (ready := _readyz(server)) == 200 and time.monotonic() - sigterm_at < 30:
            time.sleep(0.02)
        assert ready == 503
        exit_code = server.wait_exit(timeout=DRAIN_DELAY + GRACE + 60)
    finally:
        load.done.set()
        for t in threads:
            t.join(timeout=120)
    assert exit_code == 0, server.stderr_path.read_text()[-3000:]

    # Health said NOT_SERVING before any writer was refused, and writes were still served then.
    not_serving = [t for t, s in load.health if s == "NOT_SERVING"]
    # What the poller saw instead (it stops at an answer that is neither), to tell why if not.
    assert not_serving, [(round(t - sigterm_at, 2), s) for t, s in load.health if s != "SERVING"][-5:]
    not_serving_at = min(not_serving)
    assert not_serving_at > sigterm_at
    assert load.refusals, "every writer should eventually be refused by the stopped server"
    assert not_serving_at < min(t for t, _code in load.refusals)
    assert max(load.accepted_at) > not_serving_at  # writes were still served during the drain delay
    serving_after = [s for t, s in load.health if t > not_serving_at]
    assert "SERVING" not in serving_after  # never back to SERVING

    # After a restart: every accepted write is there, whole; nothing else but attempted writes.
    server.restart()
    with MemoryClient(server.target, retries=3, timeout=60) as client:
        stored: dict[str, tuple[str, int]] = {}
        copies = 0
        for n in range(TENANTS):
            tenant = f"shutdown-{n}"
            if mode == "fast":  # accepted operations still in the log are applied after the restart
                assert client.hot_path(tenant, "flush", timeout_seconds=60).failed == 0
            report = client.verify_integrity(tenant)
            assert report.valid, report
            token = ""
            while True:
                page = client.list_memories(tenant, page_size=1000, page_token=token)
                stored.update({m.text: (tenant, m.id) for m in page.memories})
                copies += len(page.memories)
                token = page.next_page_token
                if not token:
                    break
        for text, (tenant, memory_id) in load.accepted.items():
            got = stored.get(text)
            assert got is not None and got[0] == tenant, f"accepted write lost: {text!r}"
            assert memory_id in (0, got[1]), f"accepted write changed id: {text!r}"
        assert copies == len(stored), "a write was stored twice"
        assert set(stored) <= load.attempted
    # No call was cut off (CANCELLED): refused calls got UNAVAILABLE, safe to retry.
    cut = [message for (_t, code), message in zip(load.refusals, load.messages) if code != grpc.StatusCode.UNAVAILABLE]
    assert not cut, cut  # those only: a loaded run's first 3 of its many UNAVAILABLE hid the one that was not


def _stop_while_held(server: ServerProcess, calls: list[threading.Thread], held: Path) -> None:
    """SIGTERM; once the calls answered, ``held`` (a seam's file) goes so the held work may end and
    the server exit, which it does with 0."""
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    for thread in calls:
        thread.join(timeout=30)
    held.unlink()
    assert server.wait_exit(timeout=30) == 0


def _code_and_reason(error: grpc.RpcError) -> tuple[object, str]:
    info = error_info(error)
    return error.code(), info.reason if info is not None else ""


def test_calls_waiting_for_the_hot_path_at_the_end_of_the_grace_answer_shutting_down(server_factory, tmp_path) -> None:
    """A read given a token (HTTP) and a Flush (gRPC) still waiting for writes that are not
    applied (the workers hold) when the grace period ends answer UNAVAILABLE / SHUTTING_DOWN
    before the server stops; they were cut before, the HTTP read with a bare 500."""
    hold = tmp_path / "hold-workers"
    hold.touch()
    server: ServerProcess = server_factory(
        env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}, args=["--grace-seconds", "1"], http=True
    ).start()
    with grpc.insecure_channel(server.target) as channel:
        hot_path_pb2_grpc.HotPathServiceStub(channel).Enable(hot_path_pb2.HotPathRequest(tenant="held"))
        written = memory_pb2_grpc.MemoryServiceStub(channel).Retain(
            memory_pb2.RetainRequest(tenant="held", text="Never applied while held", fast=True)
        )
    token = written.consistency_token
    answers: dict[str, tuple[object, str]] = {}

    def read() -> None:
        reply = request(
            server.http_port,
            "POST",
            "/v1/tenants/held/memories:recall",
            json_body={"query": "never applied", "consistencyToken": token},
        )
        answers["read"] = (reply.status, reply.reason)

    def flush() -> None:
        channel = grpc.insecure_channel(server.target)
        try:
            hot_path_pb2_grpc.HotPathServiceStub(channel).Flush(hot_path_pb2.FlushRequest(tenant="held"), timeout=30)
        except grpc.RpcError as error:
            answers["flush"] = _code_and_reason(error)
        finally:
            channel.close()

    waiting = [threading.Thread(target=flush), threading.Thread(target=read)]
    for thread in waiting:
        thread.start()
    with MemoryClient(server.target) as client:
        while client.hot_path("held", "status").awaited == 0:  # the read (started last) waits
            time.sleep(0.02)
    _stop_while_held(server, waiting, hold)
    assert answers == {"read": (503, "SHUTTING_DOWN"), "flush": (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")}


def test_calls_still_running_at_the_end_of_the_grace_answer_shutting_down(server_factory, tmp_path) -> None:
    """Calls still on a thread (an HTTP recall and write, held there by the park seam) or waiting
    for one (a gRPC recall queued behind the first: --reader-share 1) when the grace period ends
    answer UNAVAILABLE / SHUTTING_DOWN before the server stops; they were cut before, the HTTP
    calls with a bare plain-text 500, the gRPC one UNAVAILABLE without a reason."""
    park = tmp_path / "park"
    park.touch()
    server: ServerProcess = server_factory(
        env={"MNEMOSYNE_TEST_PARK_TENANT": "parked", "MNEMOSYNE_TEST_PARK_FILE": str(park)},
        args=["--grace-seconds", "1", "--drain-delay-seconds", "0"],
        http=True,
        metrics=True,
    ).start()
    answers: dict[str, tuple[object, str]] = {}

    def http(name: str, path: str, body: dict[str, str]) -> None:
        reply = request(server.http_port, "POST", f"/v1/tenants/parked/{path}", json_body=body)
        answers[name] = (reply.status, reply.reason if reply.body.startswith(b"{") else reply.body.decode())

    def queued_recall() -> None:
        with grpc.insecure_channel(server.target) as channel:
            try:
                memory_pb2_grpc.MemoryServiceStub(channel).Recall(
                    memory_pb2.RecallRequest(tenant="parked", query="held"), timeout=30
                )
            except grpc.RpcError as error:
                answers["queued"] = _code_and_reason(error)

    calls = [
        threading.Thread(target=http, args=("recall", "memories:recall", {"query": "held"})),
        threading.Thread(target=http, args=("write", "memories", {"text": "held write"})),
    ]
    for thread in calls:
        thread.start()
    wait_until(
        lambda: gauge(server, "mnemosyne_reader_threads_busy") == gauge(server, "mnemosyne_worker_threads_busy") == 1
    )
    calls.append(threading.Thread(target=queued_recall))
    calls[-1].start()
    wait_until(lambda: gauge(server, "mnemosyne_queued_calls") == 1)
    _stop_while_held(server, calls, park)
    shutting_down = (503, "SHUTTING_DOWN")
    assert answers == {
        "recall": shutting_down,
        "write": shutting_down,
        "queued": (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN"),
    }


def test_a_stop_with_an_http_call_held_ends_within_the_grace_period(server_factory, tmp_path) -> None:
    """An HTTP request still reading its body when the grace period ended (its client sends no
    more) was waited for by uvicorn for ceil(grace) more, counted only after admission's drain
    (here a parked recall's whole grace): up to about twice --grace-seconds. Its connection now
    closes as the grace ends (no 500), and the process exits soon after."""
    park = tmp_path / "park"
    park.touch()
    grace = 1.0
    server: ServerProcess = server_factory(
        env={"MNEMOSYNE_TEST_PARK_TENANT": "parked", "MNEMOSYNE_TEST_PARK_FILE": str(park)},
        args=["--grace-seconds", str(grace), "--drain-delay-seconds", "0"],
        http=True,
        metrics=True,
    ).start()
    answers: list[int] = []

    def parked_recall() -> None:
        reply = request(server.http_port, "POST", "/v1/tenants/parked/memories:recall", json_body={"query": "held"})
        park.unlink()  # answered SHUTTING_DOWN: its thread may end, and the server with it
        answers.append(reply.status)

    recall = threading.Thread(target=parked_recall)
    recall.start()
    held = socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
    head = "POST /v1/tenants/t/memories HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    held.sendall(f"{head}Content-Length: 100\r\n\r\n{{".encode())  # the body never comes
    wait_until(lambda: gauge(server, "mnemosyne_reader_threads_busy") == 1)
    assert server.process is not None
    began = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    with held:
        answer = held.recv(65536)
    closed = time.monotonic() - began
    assert (answer[:12], closed < grace + 0.4) == (b"", True), (answer, closed)  # closed, not answered 500
    assert server.wait_exit(timeout=30) == 0
    exited, ended = time.monotonic() - began, time.time()
    recall.join(timeout=30)
    assert answers == [503]
    # The ports within the grace (and uvicorn's 0.1s ticks), then the process at once: Python's
    # teardown of the ~1,300 modules it loaded (the HTTP port's MCP SDK, pydantic, ...) took
    # 0.6-2.5 s more after the last log record, and is skipped once everything is closed.
    assert exited < grace + 2.0, exited
    stopped = next(line for line in server.stderr_path.read_text().splitlines() if "stopped: in-flight" in line)
    logged = datetime.strptime(stopped[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    assert ended - logged < 0.3, ended - logged


def _owned_by(member: str, prefix: str) -> str:
    """A tenant the ownership hash gives to ``member`` of m0 and m1."""
    return next(f"{prefix}-{i}" for i in range(100) if owner_of(f"{prefix}-{i}", ["m0", "m1"]) == member)


def _members_parking_at_m1(tmp_path: Path, park: Path, tenant: str, m1_args: Sequence[str] = ()) -> LocalMembers:
    """Members m0 and m1 started (/metrics on), m0 with a grace period of 1 s and no drain delay,
    m1 parking ``tenant``'s jobs on their thread while ``park`` exists (and ``m1_args``)."""
    return LocalMembers(
        tmp_path / "pair",
        2,
        args_of=lambda i: list(m1_args) if i else ["--grace-seconds", "1", "--drain-delay-seconds", "0"],
        env_of=lambda i: {"MNEMOSYNE_TEST_PARK_TENANT": tenant, "MNEMOSYNE_TEST_PARK_FILE": str(park)} if i else {},
        metrics=True,
    ).start()


def test_forwarded_calls_and_a_started_export_at_the_end_of_the_grace_answer_shutting_down(tmp_path) -> None:
    """At an entry member (docs/scale-out.md) whose grace period ends, a Recall forwarded to its
    owner (held there by the park seam) and an export already under way through it (its client
    slow to read, its owner held) answer UNAVAILABLE / SHUTTING_DOWN; they were cut with a bare
    UNAVAILABLE ("Cancelling all calls"), the export as if its stream had merely broken off."""
    park = tmp_path / "park"
    tenant = _owned_by("m1", "far")
    members = _members_parking_at_m1(tmp_path, park, tenant)
    try:
        entry, owner = members.processes
        with MemoryClient(owner.target) as client:
            for batch in range(3):  # several 1 MiB export chunks
                client.retain_batch(
                    tenant, [f"note {batch}-{i} " + "lorem ipsum dolor sit amet " * 40 for i in range(100)]
                )
        answers: dict[str, tuple[object, str]] = {}
        # A window of 64 KiB (no BDP probing): the entry's write of a chunk waits for this client.
        channel = grpc.insecure_channel(entry.target, options=[("grpc.http2.bdp_probe", 0)])
        export = admin_pb2_grpc.AdminServiceStub(channel).ExportTenant(
            admin_pb2.ExportTenantRequest(tenant=tenant), timeout=30
        )
        assert next(export).HasField("manifest")
        park.touch()
        stopped = threading.Event()

        def read_export() -> None:
            stopped.wait()
            time.sleep(0.7)  # reading again after the calls were ended (0.5 s before the grace ends)
            try:
                for _chunk in export:
                    pass
                answers["export"] = (grpc.StatusCode.OK, "complete")
            except grpc.RpcError as error:
                answers["export"] = _code_and_reason(error)

        def recall() -> None:
            with grpc.insecure_channel(entry.target) as hop:
                try:
                    memory_pb2_grpc.MemoryServiceStub(hop).Recall(memory_pb2.RecallRequest(tenant=tenant, query="note"))
                except grpc.RpcError as error:
                    answers["recall"] = _code_and_reason(error)

        calls = [threading.Thread(target=read_export), threading.Thread(target=recall)]
        for thread in calls:
            thread.start()
        wait_until(lambda: gauge(owner, "mnemosyne_reader_threads_busy") == 1)  # the recall is parked
        stopped.set()
        _stop_while_held(entry, calls, park)
        channel.close()
        shutting_down = (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")
        assert answers == {"recall": shutting_down, "export": shutting_down}
    finally:
        members.stop()


def test_a_stream_waiting_for_its_entry_at_the_end_of_the_owners_grace_answers_shutting_down(tmp_path) -> None:
    """At an owner whose grace period ends, a stream forwarded to it over the member link that
    waits for its entry to grant more messages (an AggregateStats of a chunk per tenant, opened by
    the link's own entry side, which reads nothing: the owner sent its window) ends with
    UNAVAILABLE / SHUTTING_DOWN in its END; it was cut bare (the link closed under it)."""
    members = LocalMembers(
        tmp_path / "pair", 2, args_of=lambda i: ["--grace-seconds", "1", "--drain-delay-seconds", "0"] if i else []
    ).start()
    try:
        owner = members.processes[1]
        theirs = [t for t in (f"t-{i}" for i in range(100)) if owner_of(t, members.ids) == "m1"]
        with MemoryClient(owner.target) as client:
            for tenant in theirs[: STREAM_WINDOW + 2]:  # more chunks than the window
                client.retain(tenant, "a note")
        ended = asyncio.run(_aggregate_while_the_owner_stops(owner))
        assert owner.wait_exit(timeout=30) == 0
    finally:
        members.stop()
    assert ended == (grpc.StatusCode.UNAVAILABLE.value[0], "SHUTTING_DOWN")


async def _aggregate_while_the_owner_stops(owner: ServerProcess) -> tuple[int, str]:
    """The END of an AggregateStats over the link, the owner stopped once it waits for credit:
    its status's code and reason (-1 and "link lost" when the link closed instead)."""
    link = await MemberLink.connect("127.0.0.1", link_port(owner), link_key(owner), None)
    try:
        request = admin_pb2.AggregateStatsRequest(chunk_size=1).SerializeToString()
        stream = await link.stream(AGGREGATE_STATS, request, [(ROUTE_KEY, "m1")], None)  # its part alone
        await _until_frames(stream, lambda kinds: kinds.count(MESSAGE) == STREAM_WINDOW)
        assert owner.process is not None
        owner.process.send_signal(signal.SIGTERM)
        await _until_frames(stream, lambda kinds: MESSAGE not in kinds[-1:])  # END, or the link closed
        try:
            async for _message in stream.messages():
                pass
        except LinkLost:
            return -1, "link lost"
        assert stream.refusal is not None
        info = error_details_pb2.ErrorInfo()
        details = [d for d in stream.refusal.details if d.Unpack(info)]
        return stream.refusal.code, info.reason if details else ""
    finally:
        await link.close()


async def _until_frames(stream: LinkStream, arrived: Callable[[list[int]], bool]) -> None:
    """Wait until the kinds of the frames the stream holds unread satisfy ``arrived``."""
    async with asyncio.timeout(20):
        while not arrived([kind for kind, _ in stream._frames]):
            await asyncio.sleep(0.02)


def test_calls_waiting_on_another_member_at_the_end_of_the_grace_answer_shutting_down(tmp_path) -> None:
    """At a member whose grace period ends, the calls waiting on another member without being
    forwarded there — the admin fan-outs (ListTenants, ListTenantFigures) and a MoveTenant's
    import — answer UNAVAILABLE / SHUTTING_DOWN. The other member is slow to answer: its one
    worker thread is held by a parked write (the park seam), so their parts queue behind it.
    They were cut bare, or answered as if that member were lost."""
    park = tmp_path / "park"
    parked, moved = _owned_by("m1", "far"), _owned_by("m0", "near")
    members = _members_parking_at_m1(tmp_path, park, parked, ["--worker-threads", "1"])
    try:
        entry, other = members.processes
        with MemoryClient(entry.target) as client:
            client.retain(moved, "a note to move")
        answers: dict[str, tuple[object, str]] = {}
        admin = grpc.insecure_channel(entry.target)
        stub = admin_pb2_grpc.AdminServiceStub(admin)
        asked = {
            "tenants": lambda: stub.ListTenants(admin_pb2.ListTenantsRequest(), timeout=30),
            "figures": lambda: stub.ListTenantFigures(admin_pb2.ListTenantFiguresRequest(), timeout=30),
            "move": lambda: stub.MoveTenant(admin_pb2.MoveTenantRequest(tenant=moved, destination="m1"), timeout=30),
        }

        def ask(name: str) -> None:
            try:
                asked[name]()
                answers[name] = (grpc.StatusCode.OK, "answered")
            except grpc.RpcError as error:
                answers[name] = _code_and_reason(error)

        with grpc.insecure_channel(other.target) as channel:
            park.touch()
            held = memory_pb2_grpc.MemoryServiceStub(channel).Retain.future(
                memory_pb2.RetainRequest(tenant=parked, text="held"), timeout=30
            )
            wait_until(lambda: gauge(other, "mnemosyne_worker_threads_busy") == 1)
            calls = [threading.Thread(target=ask, args=(name,)) for name in asked]
            for thread in calls:
                thread.start()
            wait_until(lambda: gauge(other, "mnemosyne_queued_calls") == len(asked))  # each waits on m1
            _stop_while_held(entry, calls, park)
            held.result(timeout=30)
        admin.close()
        shutting_down = (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")
        assert answers == dict.fromkeys(asked, shutting_down)
    finally:
        members.stop()
