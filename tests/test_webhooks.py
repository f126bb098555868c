"""Webhooks (docs/webhooks.md): a real server delivers each change to a real HTTP receiver on
loopback, signed per Standard Webhooks (verified with the ``standardwebhooks`` library), at least
once, through retries, an outage and a SIGKILL; never for a write that rolled back; a hanging
receiver delays no other tenant; addresses are judged at connect time."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook as Verifier

from mnemosyne.client import (
    FailedPreconditionError,
    InvalidArgumentError,
    MemoryClient,
    NotFoundError,
    RecordChange,
    RetainItem,
    ServerError,
    UnauthenticatedError,
)
from mnemosyne.engine.config import EngineConfig, WebhookConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.types import RetainItem as EngineRetainItem
from mnemosyne.engine.webhooks.addresses import refusal
from mnemosyne.engine.webhooks.sender import post
from mnemosyne.runtime.seams import Seams
from mnemosyne.store.webhook_index import INDEX_FILE_NAME
from tests.http_support import request as http_request
from tests.support import tokens_json, wait_until

ALLOW = ["--webhook-allow-private-addresses"]
FAST_RETRIES = {"MNEMOSYNE_TEST_WEBHOOK_BACKOFF": "0.05", "MNEMOSYNE_TEST_WEBHOOK_TIMEOUT": "5"}


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def payload(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.body)
        return loaded

    @property
    def delivery_id(self) -> str:
        return self.headers["webhook-id"]


@dataclass
class Receiver:
    """An HTTP receiver on a loopback port: records every request and answers as told. ``answer``
    returns the status for a request (0: drop the connection unanswered, a receiver that is down)."""

    answer: Callable[[Received], int] = lambda _: 204
    requests: list[Received] = field(default_factory=list)
    delivered: list[Received] = field(default_factory=list)  # answered 2xx
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                got = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with receiver.lock:
                    receiver.requests.append(got)
                status = receiver.answer(got)
                if status == 0:
                    self.close_connection = True
                    self.connection.close()
                    return
                if 300 <= status < 400:
                    self.send_response(status)
                    self.send_header("location", "/elsewhere")
                    self.end_headers()
                    return
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()
                if 200 <= status < 300:
                    with receiver.lock:
                        receiver.delivered.append(got)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def delivered_of(self, kind: str, path: str = "/hook") -> dict[int, Received]:
        """Each memory's first delivered payload of ``kind`` at ``path``, by memory id."""
        with self.lock:
            found: dict[int, Received] = {}
            for r in self.delivered:
                if r.path == path and r.payload["type"] == kind:
                    found.setdefault(r.payload["data"]["memory_id"], r)
            return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


def _verify_all(received: list[Received], secret: str) -> None:
    verifier = Verifier(secret)
    for r in received:
        assert verifier.verify(r.body, r.headers) == r.payload


def test_every_change_is_delivered_signed_once_at_least_through_failures_and_an_outage(
    server_factory, tenant: str, receiver: Receiver
) -> None:
    """500 changes; the receiver fails the first two attempts of every tenth memory's delivery and
    is down for a while in the middle: every change arrives, each signature verifies, a retry
    carries its first attempt's id and body, and a write that rolled back sends nothing."""
    down = threading.Event()
    attempts: dict[str, int] = {}

    def answer(r: Received) -> int:
        attempts[r.delivery_id] = attempts.get(r.delivery_id, 0) + 1
        if down.is_set():
            return 0
        if r.payload["data"]["memory_id"] % 10 == 0 and attempts[r.delivery_id] <= 2:
            return 500
        return 204

    receiver.answer = answer
    env = {**FAST_RETRIES, "MNEMOSYNE_TEST_FAULTS": "after_ledger:ROLLED-BACK"}
    server = server_factory(args=ALLOW, env=env).start()
    with MemoryClient(server.target, retries=0) as client:
        made = client.create_webhook(tenant, receiver.url(), ["memory.created"], include_text=True)
        assert made.webhook.kinds == ("memory.created",) and len(made.secrets) == 1
        created: set[int] = set()
        for batch in range(10):
            if batch == 5:
                down.set()
            if batch == 7:
                down.clear()
            items = [RetainItem(f"change {batch}-{i}: the shipment {batch * 50 + i} left the dock") for i in range(50)]
            created |= {r.memory_id for r in client.retain_batch(tenant, items)}
            with pytest.raises(ServerError):  # rolled back after its ledger entry (and its delivery row)
                client.retain(tenant, f"ROLLED-BACK write {batch}")
        assert len(created) == 500
        wait_until(lambda: set(receiver.delivered_of("memory.created")) == created, 60)
        assert client.list_webhooks(tenant)[0].pending_deliveries == 0
        log = client.list_webhook_deliveries(tenant, made.webhook.id, page_size=500).deliveries
    _verify_all(receiver.requests, made.secrets[0])
    by_id: dict[str, set[bytes]] = {}
    for r in receiver.requests:
        by_id.setdefault(r.delivery_id, set()).add(r.body)
    assert all(len(bodies) == 1 for bodies in by_id.values())  # a retry sends the same bytes
    assert len(by_id) == 500 and not any(b"ROLLED-BACK" in r.body for r in receiver.requests)
    texts = {r.payload["data"]["text"] for r in receiver.delivered}
    assert len(texts) == 500 and all(t.startswith("change ") for t in texts)
    retried = {r.payload["data"]["memory_id"] for r in receiver.requests if attempts[r.delivery_id] >= 3}
    assert {m for m in created if m % 10 == 0} <= retried
    assert len(log) == 500 and all(d.delivered and d.last_status_code == 204 for d in log)
    assert max(d.attempts for d in log) >= 3


def test_a_sigkill_mid_delivery_loses_nothing_and_repeats_with_the_same_id(
    server_factory, tenant: str, receiver: Receiver
) -> None:
    held = threading.Event()
    release = threading.Event()

    def answer(r: Received) -> int:
        if not held.is_set():
            held.set()
            release.wait(30)  # the server is killed while this delivery waits for its answer
        return 204

    receiver.answer = answer
    server = server_factory(args=ALLOW, env=FAST_RETRIES).start()
    with MemoryClient(server.target, retries=0) as client:
        made = client.create_webhook(tenant, receiver.url(), ["memory.created", "memory.updated"])
        ids = [
            r.memory_id
            for r in client.retain_batch(tenant, [RetainItem(f"parcel {i} is in bay {i}") for i in range(20)])
        ]
        client.update_memory(tenant, ids[0], text="parcel 0 moved to bay 99")
        wait_until(held.is_set)
        os.kill(server.pid, signal.SIGKILL)
        server.process.wait(10)
    release.set()
    server.start()
    wait_until(
        lambda: (
            set(receiver.delivered_of("memory.created")) == set(ids) and bool(receiver.delivered_of("memory.updated"))
        ),
        30,
    )
    _verify_all(receiver.requests, made.secrets[0])
    first = receiver.requests[0]
    again = [r for r in receiver.requests[1:] if r.delivery_id == first.delivery_id]
    assert again and all(r.body == first.body for r in again)  # at least once, the same id and payload
    assert receiver.delivered_of("memory.updated")[ids[0]].payload["data"] == {
        "tenant": tenant,
        "memory_id": ids[0],
        "ledger_seq": 21,
        "scope": "global",
    }


def test_a_hanging_receiver_delays_no_other_tenant(server_factory, tenant: str, receiver: Receiver) -> None:
    """Tenant A's receiver hangs (for longer than the test) on its first delivery; tenant B's
    deliveries all arrive while it hangs: shown by the order of events, not by timing."""
    order: list[str] = []
    release = threading.Event()

    def answer(r: Received) -> int:
        if r.path == "/hang":
            order.append("A arrived")
            release.wait(60)
            order.append("A answered")
        else:
            order.append("B")
        return 204

    receiver.answer = answer
    env = {"MNEMOSYNE_TEST_WEBHOOK_TIMEOUT": "120"}  # A's attempt never times out during the test
    server = server_factory(args=[*ALLOW, "--webhook-workers", "2"], env=env).start()
    a, b = f"{tenant}-a", f"{tenant}-b"
    with MemoryClient(server.target, retries=0) as client:
        for t, path in ((a, "/hang"), (b, "/hook")):
            client.retain(t, "the first memory makes the tenant's file")
            client.create_webhook(t, receiver.url(path), ["memory.created"])
        for i in range(5):
            client.retain(a, f"tenant A change {i}")
        wait_until(lambda: "A arrived" in order)
        b_ids = {client.retain(b, f"tenant B change {i}").memory_id for i in range(30)}
        wait_until(lambda: set(receiver.delivered_of("memory.created")) == b_ids, 30)
        assert order.count("B") == 30 and order[0] == "A arrived" and "A answered" not in order
        release.set()
        wait_until(lambda: len(receiver.delivered_of("memory.created", "/hang")) == 5, 30)
    assert order.index("A answered") > max(i for i, e in enumerate(order) if e == "B")


def test_a_host_that_is_or_resolves_to_loopback_is_refused_without_the_flag(
    server_factory, tenant: str, receiver: Receiver
) -> None:
    """Refused when the subscription is made: address literals, a name that resolves to a refused
    address, and ``localhost``'s names (RFC 6761, resolvable or not). Judged again at every
    delivery: a name accepted then (here: under the operator's flag, since removed) is refused
    when the delivery connects, and the receiver hears nothing."""
    server = server_factory(args=ALLOW, env=FAST_RETRIES).start()
    port = receiver.server.server_address[1]
    with MemoryClient(server.target, retries=0) as client:
        made = client.create_webhook(tenant, f"http://localhost:{port}/hook", ["memory.created"])
    server.stop()
    server.args = [a for a in server.args if a not in ALLOW]
    server.restart()
    with MemoryClient(server.target, retries=0) as client:
        for url, says in (
            (f"http://127.0.0.1:{port}/", "127.0.0.1 is a loopback address"),
            ("http://[::ffff:127.0.0.1]/", "is a loopback address"),
            ("http://169.254.169.254/", "a cloud metadata address"),
            ("http://10.1.2.3/", "10.1.2.3 is a private address"),
            (f"http://localhost:{port}/hook", "localhost is a loopback name"),
            ("http://LocalHost./", "localhost. is a loopback name"),
            ("https://api.localhost:8443/in", "api.localhost is a loopback name"),
        ):
            with pytest.raises(FailedPreconditionError) as refused:
                client.create_webhook(tenant, url, ["memory.created"])
            assert refused.value.reason == "WEBHOOK_ADDRESS_REFUSED", url
            assert says in refused.value.message, refused.value.message
        client.retain(tenant, "a change the receiver must never hear of")

        def refused_attempts() -> list[str]:
            log = client.list_webhook_deliveries(tenant, made.webhook.id).deliveries
            return [d.last_error for d in log if d.attempts >= 2]

        wait_until(lambda: bool(refused_attempts()))
        error = refused_attempts()[0]
    assert "a loopback address: refused" in error and "localhost resolves to" in error, error
    assert receiver.requests == []


def test_the_operator_flag_allows_every_refused_address(server_factory, tenant: str) -> None:
    server = server_factory(args=ALLOW, env=FAST_RETRIES).start()
    with MemoryClient(server.target, retries=0) as client:
        for literal in (
            "http://127.0.0.1:9/",
            "http://[::ffff:127.0.0.1]/",
            "http://169.254.169.254/",
            "http://10.1.2.3/",
        ):
            assert client.create_webhook(tenant, literal, ["memory.created"]).webhook.url == literal


def test_redirects_are_not_followed(server_factory, tenant: str, receiver: Receiver) -> None:
    receiver.answer = lambda r: 302 if r.path == "/hook" else 204
    server = server_factory(args=ALLOW, env=FAST_RETRIES).start()
    with MemoryClient(server.target, retries=0) as client:
        made = client.create_webhook(tenant, receiver.url(), ["memory.created"])
        client.retain(tenant, "a change")
        wait_until(lambda: len(receiver.requests) >= 2)
        (delivery,) = client.list_webhook_deliveries(tenant, made.webhook.id).deliveries
    assert {r.path for r in receiver.requests} == {"/hook"}
    assert not delivery.delivered and delivery.last_status_code == 302 and "not followed" in delivery.last_error


def test_each_kind_is_delivered_with_ids_only_unless_text_is_asked_for(
    server_factory, tenant: str, receiver: Receiver
) -> None:
    env = {**FAST_RETRIES, "MNEMOSYNE_TEST_POISON_MARKER": "POISON"}
    server = server_factory(args=ALLOW, env=env).start()
    kinds = [
        "memory.created",
        "memory.updated",
        "memory.forgotten",
        "record.changed",
        "fast_write.succeeded",
        "fast_write.failed",
        "consolidation.applied",
    ]
    with MemoryClient(server.target, retries=0) as client:
        client.create_webhook(tenant, receiver.url(), kinds)
        first = client.retain(tenant, "Dana's locker code is kestrel").memory_id
        client.update_memory(tenant, first, text="Dana's locker code is marmoset")
        client.forget(tenant, first)
        client.hot_path(tenant, "enable")
        fast = client.retain(tenant, "a fast note about the harbour", fast=True).event_id
        poisoned = client.retain(tenant, "a POISON note", fast=True).event_id
        client.hot_path(tenant, "flush")
        change = [RecordChange("put", "MEMORY.md", "# Memory\nthe harbour")]
        client.consolidate(tenant, "global", change, expected_generation=0, receipt_id="receipt-1")
        wait_until(lambda: {r.payload["type"] for r in receiver.delivered} >= set(kinds), 30)
    seen = {(r.payload["type"], json.dumps(r.payload["data"], sort_keys=True)) for r in receiver.delivered}
    data = {kind: [json.loads(d) for k, d in seen if k == kind] for kind in kinds}
    assert {d["memory_id"] for d in data["memory.updated"]} == {first}
    assert [d["memory_id"] for d in data["memory.forgotten"]] == [first]
    assert {d["event_id"] for d in data["fast_write.succeeded"]} == {fast}
    assert [(d["event_id"], d["error_reason"]) for d in data["fast_write.failed"]] == [(poisoned, "EXTRACTION_FAILED")]
    assert any(c == [{"op": "put", "key": "MEMORY.md"}] for c in (d["changes"] for d in data["record.changed"]))
    assert data["consolidation.applied"][0]["changes"] == [{"op": "put", "key": "MEMORY.md"}]
    body = b"".join(r.body for r in receiver.requests)
    assert b"kestrel" not in body and b"marmoset" not in body and b"harbour" not in body  # ids and kinds only


def test_subscriptions_over_http_for_the_admin_or_the_tenant_s_own_token(server_factory, tenant: str) -> None:
    tokens = {"admin-token": ["*"], "tenant-token": [tenant], "other-token": ["someone-else"]}
    server = server_factory(http=True, env={"MNEMOSYNE_TOKENS": tokens_json(tokens)}).start()
    port, path = server.http_port, f"/v1/tenants/{tenant}/webhooks"
    created = http_request(
        port,
        "POST",
        path,
        json_body={
            "url": "https://hooks.example.com/in",
            "kinds": ["WEBHOOK_KIND_MEMORY_CREATED", "WEBHOOK_KIND_RECORD_CHANGED"],
        },
        headers={"authorization": "Bearer tenant-token"},
    )
    assert created.status == 200, created.body
    assert created.json()["consistencyToken"] and created.headers["mnemosyne-consistency-token"]
    webhook = created.json()["webhook"]
    assert webhook["kinds"] == ["WEBHOOK_KIND_MEMORY_CREATED", "WEBHOOK_KIND_RECORD_CHANGED"] and created.json()[
        "secrets"
    ][0].startswith("whsec_")
    assert created.json()["secrets"][0] not in json.dumps(webhook)  # listed by a hint only
    other = http_request(port, "GET", path, headers={"authorization": "Bearer other-token"})
    assert other.status == 403
    listed = http_request(port, "GET", path, headers={"authorization": "Bearer admin-token"})
    assert [w["id"] for w in listed.json()["webhooks"]] == [webhook["id"]]
    bad = http_request(
        port,
        "POST",
        path,
        json_body={"url": "ftp://x", "kinds": ["WEBHOOK_KIND_MEMORY_CREATED"]},
        headers={"authorization": "Bearer admin-token"},
    )
    assert (bad.status, bad.reason) == (400, "WEBHOOK_URL_INVALID")
    gone = http_request(
        port, "POST", f"{path}/{webhook['id']}:delete", json_body={}, headers={"authorization": "Bearer tenant-token"}
    )
    assert gone.status == 200 and gone.json()["deleted"] is True
    missing = http_request(
        port, "GET", f"{path}/{webhook['id']}/deliveries", headers={"authorization": "Bearer admin-token"}
    )
    assert (missing.status, missing.reason) == (404, "WEBHOOK_NOT_FOUND")


def test_a_subscription_failing_for_a_day_is_paused_says_so_and_resumes(
    server_factory, tenant: str, receiver: Receiver, tmp_path: Path
) -> None:
    clock = tmp_path / "clock"
    clock.write_text("0")
    failing = threading.Event()
    failing.set()
    receiver.answer = lambda r: 503 if failing.is_set() else 204
    server = server_factory(args=ALLOW, env={**FAST_RETRIES, "MNEMOSYNE_TEST_CLOCK_FILE": str(clock)}).start()
    with MemoryClient(server.target, retries=0) as client:
        made = client.create_webhook(tenant, receiver.url(), ["memory.created"])
        client.retain(tenant, "a change")
        # The first failure recorded (its time is when the failing began), not only sent: a clock
        # moved between the two would date the failing from after the jump.
        wait_until(lambda: bool(client.list_webhooks(tenant)[0].failing_since))
        assert not client.list_webhooks(tenant)[0].paused_at
        clock.write_text(str(25 * 3600))  # a day and an hour later, every attempt still failing
        wait_until(lambda: bool(client.list_webhooks(tenant)[0].paused_at))
        paused = client.list_webhooks(tenant)[0]
        assert "every delivery failed since" in paused.pause_reason and "HTTP 503" in paused.pause_reason
        count = len(receiver.requests)
        client.retain(tenant, "a change while paused")
        assert client.list_webhooks(tenant)[0].pending_deliveries == 2 and len(receiver.requests) == count
        failing.clear()
        resumed = client.resume_webhook(tenant, made.webhook.id)
        assert not resumed.paused_at and not resumed.failing_since
        wait_until(lambda: len(receiver.delivered) == 2)
    _verify_all(receiver.delivered, made.secrets[0])


def test_rotated_secrets_all_sign_and_retired_ones_stop(server_factory, tenant: str, receiver: Receiver) -> None:
    server = server_factory(args=ALLOW, env=FAST_RETRIES).start()
    with MemoryClient(server.target, retries=0) as client:
        made = client.create_webhook(tenant, receiver.url(), ["memory.created"])
        rotated = client.rotate_webhook_secret(tenant, made.webhook.id)
        assert len(rotated.webhook.secrets) == 2 and rotated.secrets
        client.retain(tenant, "signed by both")
        wait_until(lambda: len(receiver.delivered) == 1)
        old_id = made.webhook.secrets[0].id
        after = client.rotate_webhook_secret(tenant, made.webhook.id, retire_secret_ids=[old_id])
        client.retain(tenant, "signed by the new ones only")
        wait_until(lambda: len(receiver.delivered) == 2)
        with pytest.raises(InvalidArgumentError):
            client.rotate_webhook_secret(tenant, made.webhook.id, secret="whsec_short")
        for undecodable in ("whsec_" + "A" * 33, "whsec_" + "A" * 45 + "="):  # base64 of 4n + 1 characters
            with pytest.raises(InvalidArgumentError, match="base64"):
                client.rotate_webhook_secret(tenant, made.webhook.id, secret=undecodable)
        with pytest.raises(NotFoundError):
            client.resume_webhook(tenant, 999)
        with pytest.raises(ValueError):
            client.create_webhook(tenant, receiver.url(), ["memory.eaten"])
    first, second = receiver.delivered
    for secret in (made.secrets[0], rotated.secrets[0]):
        _verify_all([first], secret)
    _verify_all([second], rotated.secrets[0])
    _verify_all([second], after.secrets[0])
    with pytest.raises(Exception, match="signature"):
        _verify_all([second], made.secrets[0])


def test_erase_tenant_takes_its_webhooks_and_its_place_in_the_index(server_factory, tenant: str) -> None:
    server = server_factory(env={"MNEMOSYNE_TOKENS": tokens_json({"admin": ["*"]})}).start()
    with MemoryClient(server.target, "admin", retries=0) as client:
        client.create_webhook(tenant, "https://hooks.example.com/in", ["memory.created"])
        index = list(server.data_dir.glob(f"{INDEX_FILE_NAME}*"))  # the file and its write-ahead log

        def indexed() -> bool:
            return any(tenant.encode() in p.read_bytes() for p in index if p.exists())

        assert indexed()
        client.erase_tenant(tenant)
        assert client.list_webhooks(tenant) == [] and not indexed()
    with (
        MemoryClient(server.target, "nobody", retries=0) as stranger,
        pytest.raises(UnauthenticatedError),
    ):
        stranger.list_webhooks(tenant)


@pytest.mark.parametrize(
    ("address", "refused_as"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::a9fe:a9fe", "metadata"),
        ("0.0.0.0", "an unspecified"),
        ("::", "an unspecified"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("100.64.0.1", "shared"),
        ("100.100.100.200", "metadata"),
        ("10.0.0.1", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12::1", "private"),
        ("169.254.169.254", "metadata"),
        ("224.0.0.1", "multicast"),
        ("93.184.216.34", ""),
        ("2606:4700::1111", ""),
    ],
)
def test_the_addresses_a_delivery_may_reach(address: str, refused_as: str) -> None:
    ip = ipaddress.ip_address(address)
    assert (refusal(ip, allow_private=False) or "allowed").count(refused_as or "allowed") == 1
    assert refusal(ip, allow_private=True) == "", "--webhook-allow-private-addresses allows every address"


def test_a_tenant_fenced_by_a_move_is_not_delivered_from(tenant: str, receiver: Receiver, tmp_path: Path) -> None:
    """A move's fence stops the old owner's deliveries (its file goes to the new owner with them):
    attempts made before the fence, none after it while the receiver would answer; unfenced (a
    move undone), the deliveries go. The engine in process, as a member runs it."""
    failing = threading.Event()
    failing.set()
    receiver.answer = lambda r: 503 if failing.is_set() else 204
    config = EngineConfig(data_dir=tmp_path / "data", webhooks=WebhookConfig(allow_private_addresses=True))
    engine = Engine(config, seams=Seams(webhook_backoff=0.05))
    try:
        engine.retain(tenant, EngineRetainItem(text="the tenant's first memory"))
        made = engine.webhooks.create(tenant, receiver.url(), ["memory.created"], include_text=False, secrets=[])
        engine.retain(tenant, EngineRetainItem(text="a change delivered by the new owner only"))
        wait_until(lambda: len(receiver.requests) >= 2)  # failing attempts, retried
        engine.pool.fence(tenant, move_step="fenced")
        with engine.pool.tenant(tenant, create=False) as store:
            assert store is not None and store.fenced
        attempts = len(receiver.requests)  # an attempt in flight at the fence may still land
        failing.clear()
        engine.deliveries.committed(tenant)  # woken as a commit would: it looks, and sends nothing
        log = engine.webhooks.deliveries(tenant, made.webhook.id, page_size=0, page_token="").deliveries
        assert [d.status for d in log] == ["pending"]
        retry_at = log[0].next_attempt_at
        assert retry_at is not None
        wait_until(lambda: engine.deliveries.now() > retry_at + 0.5)  # past its retry, twice over
        assert len(receiver.delivered) == 0 and len(receiver.requests) <= attempts + 1
        with engine.pool.tenant(tenant, create=False) as store:
            assert store is not None
            store.fence(False)
        engine.retain(tenant, EngineRetainItem(text="the move was undone"))
        wait_until(lambda: len(receiver.delivered) == 2)
    finally:
        engine.close()


def test_every_revision_reaches_subscribers_reverts_and_expiry_changes_included(
    server_factory, tenant: str, receiver: Receiver
) -> None:
    """Each revision of a memory after its creation is a ``memory.updated`` delivery carrying its
    ledger entry (a revert, a change of the expiry alone), and a record's revert is a
    ``record.changed`` of the generation it published."""
    server = server_factory(args=ALLOW, env=FAST_RETRIES).start()
    scope = "workspace/notes"
    with MemoryClient(server.target, retries=0) as client:
        client.create_webhook(tenant, receiver.url(), ["memory.updated", "record.changed"], include_text=True)
        memory_id = client.retain(tenant, "the gate code is 1111").memory_id
        client.update_memory(tenant, memory_id, text="the gate code is 2222")
        first = client.list_memory_revisions(tenant, memory_id)[0]
        assert client.revert_memory(tenant, memory_id, first.revision).updated
        assert client.update_memory(tenant, memory_id, expires_at=4_000_000_000.0).updated  # its expiry alone
        assert client.update_memory(tenant, memory_id, clear_expires_at=True).updated
        revisions = client.list_memory_revisions(tenant, memory_id)
        assert [r.kind for r in revisions] == ["retained", "updated", "reverted", "updated", "updated"]
        g1 = client.edit_records(tenant, scope, [RecordChange("put", "plan.md", "first plan")], expected_generation=0)
        g2 = client.edit_records(tenant, scope, [RecordChange("put", "plan.md", "second plan")], expected_generation=g1)
        g3 = client.revert_record(tenant, scope, "plan.md", g1, expected_generation=g2)

        def delivered(kind: str) -> list[dict[str, Any]]:
            with receiver.lock:
                return [r.payload["data"] for r in receiver.delivered if r.payload["type"] == kind]

        wanted = {r.ledger_seq for r in revisions[1:]}
        wait_until(lambda: {d["ledger_seq"] for d in delivered("memory.updated")} >= wanted, 30)
        wait_until(lambda: {d["generation"] for d in delivered("record.changed")} >= {g1, g2, g3}, 30)
    updated = {d["ledger_seq"]: d for d in delivered("memory.updated")}
    assert set(updated) == wanted  # nothing else: the retain is memory.created, not wanted here
    assert updated[revisions[2].ledger_seq]["text"] == "the gate code is 1111"  # the revert's text
    assert all(updated[seq]["memory_id"] == memory_id for seq in wanted)
    (reverted,) = [d for d in delivered("record.changed") if d["generation"] == g3]
    assert reverted["scope"] == scope and reverted["changes"] == [{"op": "put", "key": "plan.md"}]


# URLs no delivery could ever reach, and what the refusal names (docs/webhooks.md "Subscriptions").
UNDELIVERABLE = [
    ("http://hooks.example/ok\x7f", "the control character U+007F at character 24"),
    ("http://hooks.example/a\x00b", "the control character U+0000"),
    ("http://hooks.example/a\tb", "the control character U+0009"),
    ("http://hooks.example/a\x85b", "the control character U+0085"),  # C1
    ("http://hooks.example/a b", "a space at character 23"),
    ("http://hooks.example/caf\u00e9", "not ASCII: percent-encode it (%C3%A9)"),
    ("http://b\u00fccher.example/", "give it in its IDNA form, xn--bcher-kva.example"),
    ("http://" + "\u00fc" * 64 + ".example/", "it has no IDNA form"),
    ("http://a..b/", "an empty label"),
    ("http://.hooks.example/", "an empty label"),
    ("http://" + "a" * 64 + ".com/", "a label of 64 characters"),
    ("http://" + ("a" * 63 + ".") * 4 + "com/", "has at most 253"),
    ("http://a!b.example/", "holds '!'"),
    ("http://a%62.example/", "holds '%'"),
    ("http://hooks.example:0/", "port '0'"),
    ("http://hooks.example:65536/", "port '65536'"),
    ("http://hooks.example:+80/", "port '+80'"),
    ("http://hooks.example:8o/", "port '8o'"),
    ("http://[2001:db8::1]x/", "after its closing bracket"),
    ("http://[fe80::1%25eth0]/", "names a zone"),
    ("http://user@hooks.example/", "a user or password"),
    ("http://@hooks.example/", "a user or password"),
    ("http://hooks.example/#", "a #fragment"),
    ("http:///hook", "no host"),
    ("ftp://hooks.example/", "scheme is 'ftp'"),
]


def test_urls_no_delivery_could_reach_are_refused_naming_what_is_wrong(server_factory, tenant: str) -> None:
    server = server_factory(http=True, env=FAST_RETRIES).start()
    with MemoryClient(server.target, retries=0) as client:
        for url, named in UNDELIVERABLE:
            with pytest.raises(InvalidArgumentError) as refused:
                client.create_webhook(tenant, url, ["memory.created"])
            assert refused.value.reason == "WEBHOOK_URL_INVALID" and named in refused.value.message, (
                url,
                refused.value,
            )
        assert client.list_webhooks(tenant) == []
    for url, named in UNDELIVERABLE[:: len(UNDELIVERABLE) // 5]:  # the same over HTTP/JSON
        reply = http_request(
            server.http_port,
            "POST",
            f"/v1/tenants/{tenant}/webhooks",
            json_body={"url": url, "kinds": ["WEBHOOK_KIND_MEMORY_CREATED"]},
        )
        assert (reply.status, reply.reason) == (400, "WEBHOOK_URL_INVALID") and named in reply.json()["message"], url


@pytest.mark.parametrize(("url", "named"), UNDELIVERABLE)
def test_the_sender_reads_a_url_as_its_refusal_does_and_never_guesses_a_port(url: str, named: str) -> None:
    """A subscription stored before a refusal existed fails each attempt saying why, without a
    connection: port 0 never becomes 80, a host the resolver cannot take is never looked up."""
    attempt = post(url, b"{}", {}, timeout=2, allow_private=True)
    assert attempt.status_code == 0 and attempt.error.startswith("the url cannot be delivered to: "), attempt
    assert named in attempt.error


def test_urls_at_the_limits_are_accepted_and_delivered(server_factory, tenant: str, receiver: Receiver) -> None:
    """What the refusals leave is deliverable: an escaped path and query, no path, an upper-case
    scheme, a port with a leading zero; a 63-character label and a 253-character name are taken."""
    server = server_factory(args=ALLOW, env=FAST_RETRIES).start()
    port = receiver.server.server_address[1]
    deliverable = {
        f"http://127.0.0.1:{port}/p%7Fq?x=%C3%A9&y=%20": "/p%7Fq?x=%C3%A9&y=%20",
        f"http://127.0.0.1:{port}": "/",
        f"HTTP://127.0.0.1:0{port}/upper": "/upper",
        f"http://localhost:{port}/by-name": "/by-name",
    }
    with MemoryClient(server.target, retries=0) as client:
        for url in deliverable:
            client.create_webhook(tenant, url, ["memory.created"])
        for url in (
            "http://" + "a" * 63 + ".example/",
            "https://" + ("a" * 62 + ".") * 4 + "a./",
            "http://a_b.example:65535/",
        ):
            assert client.create_webhook(tenant, url, ["memory.created"]).webhook.url == url
        client.retain(tenant, "a change for every deliverable url")
        wait_until(lambda: {r.path for r in receiver.delivered} == set(deliverable.values()), 30)


def test_an_empty_kinds_list_names_the_kinds_as_a_request_gives_them(server_factory, tenant: str) -> None:
    server = server_factory(http=True).start()
    with MemoryClient(server.target, retries=0) as client:
        with pytest.raises(InvalidArgumentError) as refused:
            client.create_webhook(tenant, "https://hooks.example/in", [])
    message = refused.value.message
    assert refused.value.reason == "WEBHOOK_KINDS_INVALID"
    assert "memory.created (WEBHOOK_KIND_MEMORY_CREATED)" in message, message
    assert "consolidation.applied (WEBHOOK_KIND_CONSOLIDATION_APPLIED)" in message, message
    path = f"/v1/tenants/{tenant}/webhooks"
    empty = http_request(server.http_port, "POST", path, json_body={"url": "https://hooks.example/in", "kinds": []})
    assert (empty.status, empty.reason) == (400, "WEBHOOK_KINDS_INVALID")
    named = [w.strip("(),;") for w in empty.json()["message"].split() if w.strip("(),;").startswith("WEBHOOK_KIND_")]
    assert len(named) == 8
    for kind in named:  # each name the message gives is one the request takes
        made = http_request(
            server.http_port, "POST", path, json_body={"url": "https://hooks.example/in", "kinds": [kind]}
        )
        assert made.status == 200 and made.json()["webhook"]["kinds"] == [kind], made.body
