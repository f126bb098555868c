"""A refusal the server names (UNAVAILABLE with its ErrorInfo reason) is the server's word on
whether waiting clears it (client/retry_window.py): with a retry delay (google.rpc.RetryInfo) the
Python client calls again within its retry window, as after a restart; without one it raises at
once. Real servers on loopback: one whose replica URL or keys are wrong (REPLICA_UNREACHABLE that
no wait clears), one whose object storage does not answer (REPLICA_UNREACHABLE that clears when
it answers), two members moving a tenant (TENANT_MOVING, which clears when the move ends); and a
server answering as one up to 0.1.0 did, some reasons that waiting clears without a delay.
client/node/test/restarts.test.js holds the Node client to the same."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc.error_details_pb2 import ErrorInfo, RetryInfo

from mnemosyne.cli.server_process import _free_port
from mnemosyne.client import DeadlineExceededError, MemoryClient, UnavailableError
from mnemosyne.client.retry_window import RETRY_WINDOW_SECONDS
from mnemosyne.store.membership import owner_of
from mnemosyne.store.ownership import MOVE_STEP_KEY
from tests.replica_support import replica_env
from tests.support import RefusingServer, status_details, wait_until
from tests.test_moves import ADMIN, Deployment, record


def _without_keys(home: Path) -> dict[str, str]:
    """A server's environment with no keys for object storage anywhere the AWS SDK looks."""
    return {
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
        "AWS_CONFIG_FILE": str(home / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "HOME": str(home),
    }


def test_a_replica_refusal_no_wait_clears_is_raised_at_once_not_after_the_window(server_factory, tmp_path) -> None:
    """No keys for object storage: the bucket is never asked, and the member refuses to create a
    tenant it cannot look for there, REPLICA_UNREACHABLE saying to set them, with no retry delay;
    a client with the default 15 s window raises it at once (before, it called again for the whole
    window: 15 s for an error only an operator can clear)."""
    closed = f"http://127.0.0.1:{_free_port()}"
    server = server_factory(
        env=_without_keys(tmp_path), args=["--replica-url", f"s3://nowhere/p?endpoint={closed}"]
    ).start()
    with MemoryClient(server.target) as client:
        began = time.monotonic()
        with pytest.raises(UnavailableError) as raised:
            client.retain("fresh", "must not wait out a setting that is wrong", request_id="r1")
        took = time.monotonic() - began
    assert raised.value.reason == "REPLICA_UNREACHABLE" and raised.value.retry_after_seconds is None
    assert "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in str(raised.value)
    assert took < RETRY_WINDOW_SECONDS / 5, took


def test_a_replica_refusal_that_clears_when_object_storage_answers_is_waited_out_within_the_window(
    server_factory,
) -> None:
    """Keys given, object storage down (nothing listens at its endpoint): REPLICA_UNREACHABLE
    with a retry delay, so the client calls again until its window (3 s here) is over, then
    raises it."""
    closed = f"http://127.0.0.1:{_free_port()}"
    server = server_factory(env=replica_env(), args=["--replica-url", f"s3://nowhere/p?endpoint={closed}"]).start()
    with MemoryClient(server.target, retry_window=3.0) as client:
        began = time.monotonic()
        with pytest.raises(UnavailableError) as raised:
            client.retain("fresh", "waits for object storage to answer", request_id="r1")
        took = time.monotonic() - began
    assert raised.value.reason == "REPLICA_UNREACHABLE" and raised.value.retry_after_seconds == 1.0
    assert 2.0 <= took < 3.0 + 12.0, took  # one try may take the store's own connect timeout


def test_a_write_refused_while_its_tenant_moves_is_waited_out_and_applied_once_the_move_ends(tmp_path) -> None:
    """A move held after its fence (the MNEMOSYNE_TEST_MOVE_HOLD_AFTER seam): a write of the tenant
    with a request id, refused TENANT_MOVING with a retry delay, is called again by a client of
    the default 15 s window until the move, asked again, has ended, and then lands on the tenant's
    new member, once."""
    ids = ["m0", "m1"]
    tenant = next(t for i in range(1000) if owner_of(t := f"moving-{i}", ids) == "m0")
    deployment = Deployment(tmp_path, 2)
    deployment.run(ids, env={"m0": {"MNEMOSYNE_TEST_MOVE_HOLD_AFTER": "fenced"}})
    members = deployment.members(ids)
    try:
        with MemoryClient("", ADMIN, members=members) as client, ThreadPoolExecutor(2) as pool:
            client.retain(tenant, "The Porto depot opens at 07:00")
            held = pool.submit(client.move_tenant, tenant, "m1", member="m0", timeout=4.0)
            wait_until(lambda: record(deployment.processes["m0"], tenant).get(MOVE_STEP_KEY) == "fenced", 30)
            began = time.monotonic()
            writing = pool.submit(client.retain, tenant, "The Porto depot opens at 08:00", request_id="w1")
            with pytest.raises(DeadlineExceededError):
                held.result(timeout=30)  # the held move, given up: the tenant stays fenced
            assert not writing.done()
            client.move_tenant(tenant, "m1", member="m0")  # asked again, it goes on and ends
            written = writing.result(timeout=RETRY_WINDOW_SECONDS)
            waited = time.monotonic() - began
            assert written.status == "created"
            assert sorted(m.text for m in client.list_memories(tenant).memories) == [
                "The Porto depot opens at 07:00",
                "The Porto depot opens at 08:00",
            ]
        assert waited < RETRY_WINDOW_SECONDS, waited
        with deployment.at("m1") as there:
            assert len(there.list_memories(tenant).memories) == 2
    finally:
        deployment.stop()


@pytest.mark.parametrize(
    ("reason", "delay", "calls"),
    [
        ("SHUTTING_DOWN", None, 3),
        ("TENANT_BUSY", None, 3),
        ("FILE_LIMIT", None, 3),
        ("REPLICA_UNREACHABLE", None, 1),
        ("EXTRACTION_FAILED", None, 1),
        ("REPLICA_UNREACHABLE", 0.05, 3),
    ],
)
def test_a_named_refusal_without_a_delay_is_tried_again_only_for_a_reason_waiting_clears(
    reason: str, delay: float | None, calls: int
) -> None:
    """A server up to 0.1.0 sent SHUTTING_DOWN, TENANT_BUSY, FILE_LIMIT... without a retry delay
    (ours sends one now; this one on loopback answers as they did): a newer client still tries
    them again, as after a restart, so it rides out an older server's shutdown. Another reason
    without a delay is the server's word that no wait clears it: one try (before, each was tried
    for the whole window); with a delay, tried again after it."""
    server = RefusingServer()
    server.code, server.message = grpc.StatusCode.UNAVAILABLE, "refused"
    named = ErrorInfo(reason=reason, domain="mnemosyne.v1")
    waiting = [RetryInfo(retry_delay=duration_pb2.Duration(nanos=int(delay * 1e9)))] if delay is not None else []
    server.details = status_details(grpc.StatusCode.UNAVAILABLE, "refused", named, *waiting)
    try:
        with MemoryClient(server.address, retries=2) as client, pytest.raises(UnavailableError) as raised:
            client.recall("acme", "x")
        assert (raised.value.reason, server.calls) == (reason, calls)
    finally:
        server.stop()
