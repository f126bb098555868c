"""The mem0-compatible endpoints (transport/http/mem0.py, docs/mem0.md): the official ``mem0ai``
client, unchanged, against a real server (in its own pinned virtual environment,
tests/mem0_support.py), events polled over plain HTTP, two keys for two tenants kept apart, and
hostile requests answered with a clear 4xx and mem0's ``detail``."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from mnemosyne.cli.server_process import ServerProcess
from mnemosyne.client import MemoryClient
from mnemosyne.transport.http.mem0 import ROUTES as MEM0_ROUTES
from tests.docs_support import code_blocks, section
from tests.http_support import Reply, request
from tests.mem0_support import Mem0Client, mem0_environment, mem0_python
from tests.support import tokens_json

ROOT = Path(__file__).resolve().parent.parent
SYNC, FAST, OTHER = "m0sync", "m0fast", "m0other"
KEYS = {"key-sync": [SYNC], "key-fast": [FAST], "key-other": [OTHER], "key-two": [SYNC, OTHER], "key-admin": ["*"]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    root = tmp_path_factory.mktemp("mem0")
    hold = root / "hold"
    server = ServerProcess(
        root / "data", http=True, env={"MNEMOSYNE_TOKENS": tokens_json(KEYS), "MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}
    ).start()
    with MemoryClient(server.target, "key-admin") as admin:
        admin.hot_path(FAST, "enable")
    try:
        yield server, root
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server(served: tuple[ServerProcess, Path]) -> ServerProcess:
    return served[0]


def _client(served: tuple[ServerProcess, Path], key: str, headers: dict[str, str] | None = None) -> Mem0Client:
    server, root = served
    client = Mem0Client(server.http_url, key, root, headers)
    assert client.construction == {"ok": "ready"}, client.construction
    return client


def _get(server: ServerProcess, path: str, key: str, headers: dict[str, str] | None = None) -> Reply:
    return request(server.http_port, "GET", path, headers={"authorization": f"Token {key}", **(headers or {})})


def _poll_event(server: ServerProcess, key: str, event_id: str, want: str = "SUCCEEDED") -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        reply = _get(server, f"/v1/event/{event_id}/", key)
        assert reply.status == 200, reply.body
        event: dict[str, Any] = reply.json()
        if event["status"] == want or time.monotonic() > deadline:
            assert event["status"] == want, event
            return event
        time.sleep(0.05)


def test_the_official_client_end_to_end_on_a_synchronous_tenant(served: tuple[ServerProcess, Path]) -> None:
    server = served[0]
    with _client(served, "key-sync") as mem0:
        added = mem0.call("add", messages="Alice moved to Austin last month", user_id="alice", metadata={"src": "form"})
        assert added["status"] == "SUCCEEDED"  # the hot path is off: committed before the answer
        event = _poll_event(server, "key-sync", added["event_id"])
        (result,) = event["results"]
        memory_id = result["id"]
        assert result["event"] == "ADD" and result["memory"] == "Alice moved to Austin last month"
        again = mem0.call("add", messages="alice moved to AUSTIN last month", user_id="alice", metadata={"src": "form"})
        assert _poll_event(server, "key-sync", again["event_id"])["results"] == [
            {"id": memory_id, "event": "NONE", "memory": "Alice moved to Austin last month"}
        ]  # the same content again: a duplicate of the first, stored once
        for i in range(4):
            mem0.call("add", messages=f"Alice note {i}: she waters the ferns on day {i}", user_id="alice")
        for who in ("bob", "bob"):
            mem0.call(
                "add", messages=[{"role": "user", "content": f"{who} plays chess"}], user_id=who, agent_id="coach"
            )
        mem0.call("add", messages="Bob collects vinyl records", user_id="bob", run_id="r1")
        # search: the memory first, with its entity and metadata.
        found = mem0.call("search", query="Where did Alice move? Austin", filters={"user_id": "alice"})["results"]
        assert found[0]["id"] == memory_id and found[0]["user_id"] == "alice"
        assert found[0]["metadata"] == {"src": "form"} and all(r["user_id"] == "alice" for r in found)
        # get_all: filters and pages.
        pages = [mem0.call("get_all", filters={"user_id": "alice"}, page=p, page_size=2) for p in (1, 2, 3)]
        assert [p["count"] for p in pages] == [5, 5, 5]
        assert [len(p["results"]) for p in pages] == [2, 2, 1]
        assert pages[0]["previous"] is None and pages[0]["next"] and pages[2]["next"] is None
        listed = [m["id"] for p in pages for m in p["results"]]
        assert len(set(listed)) == 5 and memory_id in listed
        both = mem0.call("get_all", filters={"AND": [{"user_id": "bob"}, {"run_id": "r1"}]})["results"]
        assert [m["memory"] for m in both] == ["Bob collects vinyl records"]
        # get, update (same id, new text), history (both versions).
        assert mem0.call("get", memory_id=memory_id)["memory"] == "Alice moved to Austin last month"
        updated = mem0.call("update", memory_id=memory_id, text="Alice moved to Denver this spring")
        assert updated["id"] == memory_id and updated["memory"] == "Alice moved to Denver this spring"
        got = mem0.call("get", memory_id=memory_id)
        assert got["memory"] == "Alice moved to Denver this spring" and got["user_id"] == "alice"
        history = mem0.call("history", memory_id=memory_id)
        assert [(h["event"], h["old_memory"], h["new_memory"]) for h in history] == [
            ("ADD", None, "Alice moved to Austin last month"),
            ("UPDATE", "Alice moved to Austin last month", "Alice moved to Denver this spring"),
        ]
        assert history[0]["created_at"] <= history[1]["created_at"]
        # delete, then delete_all with a filter: only the matching memories go.
        assert "deleted" in mem0.call("delete", memory_id=memory_id)["message"]
        gone = mem0.attempt("get", memory_id=memory_id)
        assert gone["error"] == "MemoryNotFoundError", gone
        assert mem0.call("delete_all", user_id="bob")["deleted_count"] == 2
        assert mem0.call("get_all", filters={"user_id": "bob"})["results"] == []
        assert mem0.call("get_all", filters={"user_id": "alice"})["count"] == 4
    with MemoryClient(server.target, "key-admin") as admin:
        assert admin.verify_integrity(SYNC).valid


def test_a_message_s_name_is_the_memory_s_speaker(served: tuple[ServerProcess, Path]) -> None:
    """mem0's messages carry an optional ``name`` beside the role (as OpenAI chat messages do): it
    becomes the memory's speaker, which Recall uses (tests/test_speaker.py)."""
    server = served[0]
    with _client(served, "key-sync") as mem0:
        one = mem0.call(
            "add", messages=[{"role": "user", "content": "I adopted a beagle", "name": "Ana"}], user_id="ana"
        )
        talk = [
            {"role": "user", "content": "We hiked Mount Tam", "name": "Ben"},
            {"role": "assistant", "content": "Sounds lovely"},
        ]
        two = mem0.call("add", messages=talk, user_id="ben")
        bad = mem0.attempt("add", messages=[{"role": "user", "content": "x", "name": "a\nb"}], user_id="ana")
    assert (bad["status"], bad["error"]) == (400, "ValidationError")
    assert "without control or invisible format characters" in bad["message"]
    ids = [int(_poll_event(server, "key-sync", r["event_id"])["results"][0]["id"]) for r in (one, two)]
    with MemoryClient(server.target, "key-admin") as admin:
        memories = [admin.get_memory(SYNC, i) for i in ids]
    assert [(m.text, m.speaker) for m in memories] == [
        ("I adopted a beagle", "Ana"),
        ("user (Ben): We hiked Mount Tam\nassistant: Sounds lovely", "Ben"),
    ]


def test_a_message_s_role_is_one_of_mem0_s(served: tuple[ServerProcess, Path]) -> None:
    """A role was free text: one message's was dropped unread ("tool", "a: b"), several made lines
    of roles mem0 has not ("customer: ..."). mem0's roles, user, assistant and system (in any
    case), are taken; any other is 400 MESSAGE_ROLE_INVALID naming the message and the roles, and
    nothing is stored."""
    server = served[0]
    with _client(served, "key-sync") as mem0:
        talk = [
            {"role": "system", "content": "Ivo's support chat"},
            {"role": "User", "content": "Ivo's modem blinks red"},
            {"role": "assistant", "content": "Reset it"},
        ]
        added = mem0.call("add", messages=talk, user_id="ivo")
        memory_id = int(_poll_event(server, "key-sync", added["event_id"])["results"][0]["id"])
        for messages, index in (
            ([{"role": "tool", "content": "Ivo's ticket 7 opened"}], 0),
            ([{"role": "user", "content": "Ivo's modem"}, {"role": "customer", "content": "still red"}], 1),
            ([{"role": "user: x", "content": "Ivo's router"}], 0),
        ):
            refused = mem0.attempt("add", messages=messages, user_id="ivo")
            assert refused.get("status") == 400, (messages, refused)
            assert f"messages[{index}].role" in refused["message"] and "user, assistant, system" in refused["message"]
        assert mem0.call("get_all", filters={"user_id": "ivo"})["count"] == 1
    raw = request(
        server.http_port,
        "POST",
        "/v3/memories/add/",
        headers={"authorization": "Token key-sync"},
        json_body={"messages": [{"role": "developer", "content": "Ivo's plan"}], "user_id": "ivo"},
    )
    assert raw.status == 400 and raw.reason == "MESSAGE_ROLE_INVALID", raw.body[:300]
    with MemoryClient(server.target, "key-admin") as admin:
        assert admin.get_memory(SYNC, memory_id).text == (
            "system: Ivo's support chat\nuser: Ivo's modem blinks red\nassistant: Reset it"
        )


def test_add_on_a_hot_path_tenant_is_asynchronous(served: tuple[ServerProcess, Path]) -> None:
    server, root = served
    hold = root / "hold"
    hold.touch()  # the workers hold before committing: the event is provably not done yet
    try:
        with _client(served, "key-fast") as mem0:
            added = mem0.call("add", messages="Carol's flight lands at 9pm", user_id="carol")
            assert added["status"] == "PENDING"
            assert _get(server, f"/v1/event/{added['event_id']}/", "key-fast").json()["status"] in (
                "PENDING",
                "RUNNING",
            )
            assert mem0.call("get_all", filters={"user_id": "carol"})["results"] == []
            hold.unlink()
            event = _poll_event(server, "key-fast", added["event_id"])
            assert event["results"][0]["memory"] == "Carol's flight lands at 9pm" and event["completed_at"]
            assert (
                mem0.call("search", query="flight lands", filters={"user_id": "carol"})["results"][0]["id"]
                == (event["results"][0]["id"])
            )
            listed = _get(server, "/v1/events/?status=SUCCEEDED", "key-fast").json()
            assert added["event_id"] in [e["id"] for e in listed["results"]]
    finally:
        hold.unlink(missing_ok=True)


def test_two_keys_for_two_tenants_never_see_each_other(served: tuple[ServerProcess, Path]) -> None:
    server = served[0]
    with _client(served, "key-sync") as mine, _client(served, "key-other") as theirs:
        added = mine.call("add", messages="Dana's locker code is 5521", user_id="dana")
        event = _poll_event(server, "key-sync", added["event_id"])
        memory_id = event["results"][0]["id"]
        assert theirs.call("search", query="Dana locker code 5521", filters={"user_id": "dana"})["results"] == []
        assert theirs.call("get_all", filters={"user_id": "dana"})["results"] == []
        for method in ("get", "history", "delete"):
            answer = theirs.attempt(method, memory_id=memory_id)
            assert answer.get("error") == "MemoryNotFoundError" or answer.get("status") == 404, (method, answer)
        assert theirs.attempt("update", memory_id=memory_id, text="stolen")["status"] == 404
        assert theirs.call("delete_all", user_id="dana")["deleted_count"] == 0
        # The event id of one tenant names nothing in the other (a signed receipt).
        assert _get(server, f"/v1/event/{added['event_id']}/", "key-other").status == 404
        assert mine.call("get", memory_id=memory_id)["memory"] == "Dana's locker code is 5521"


def test_a_null_entity_id_in_a_filter_is_refused_not_read_as_every_memory(served: tuple[ServerProcess, Path]) -> None:
    """A filter's ``"user_id": null`` (a variable that was None) was read as no filter: a search or
    listing answered every memory of the tenant. The official client sends it as it is (it drops
    None only at the top level: there a delete_all(user_id=None) names nothing, FILTER_EMPTY);
    a raw JSON client the same. Each is 400 MEM0_REQUEST_INVALID naming the key, and nothing is read."""
    server = served[0]
    with _client(served, "key-sync") as mem0:
        for who in ("gus", "hal"):
            mem0.call("add", messages=f"{who.title()} keeps bees on the roof", user_id=who, run_id="roof")
        for method, kwargs, key in (
            ("search", {"query": "bees on the roof", "filters": {"user_id": None}}, "user_id"),
            ("get_all", {"filters": {"user_id": None}}, "user_id"),
            ("get_all", {"filters": {"AND": [{"run_id": "roof"}, {"agent_id": None}]}}, "agent_id"),
        ):
            refused = mem0.attempt(method, **kwargs)
            assert refused.get("status") == 400, (method, kwargs, refused)
            assert f"{key} is null" in refused["message"] and f"leave {key} out" in refused["message"], refused
        refused = mem0.attempt("delete_all", user_id=None)
        assert refused.get("status") == 400 and "name at least one" in refused["message"], refused
        auth = {"authorization": "Token key-sync"}
        for path, body, key in (
            ("/v3/memories/search/", {"query": "bees", "filters": {"app_id": None}}, "app_id"),
            ("/v3/memories/", {"filters": {"run_id": None}}, "run_id"),
            ("/v3/memories/?page=1&page_size=5", {"filters": {"AND": [{"user_id": None}]}}, "user_id"),
        ):
            raw = request(server.http_port, "POST", path, headers=auth, json_body=body)
            assert raw.status == 400 and raw.reason == "MEM0_REQUEST_INVALID", (path, body, raw.body[:300])
            assert f"{key} is null" in raw.json()["detail"], raw.body[:300]
        # An id beside the filters (mem0's v1 search took it there) was not read either.
        beside: tuple[tuple[str, dict[str, Any]], ...] = (
            ("/v3/memories/search/", {"query": "bees", "user_id": "gus"}),
            ("/v3/memories/", {"run_id": "roof", "filters": {"user_id": "gus"}}),
        )
        for path, body in beside:
            raw = request(server.http_port, "POST", path, headers=auth, json_body=body)
            assert raw.status == 400 and raw.reason == "MEM0_REQUEST_INVALID", (path, body, raw.body[:300])
            assert "give it in filters" in raw.json()["detail"], raw.body[:300]
        for who in ("gus", "hal"):  # nothing was deleted either
            assert mem0.call("get_all", filters={"user_id": who, "run_id": "roof"})["count"] == 1


def test_a_token_of_several_tenants_names_one_with_a_header(served: tuple[ServerProcess, Path]) -> None:
    server = served[0]
    no_header = _get(server, "/v1/events/", "key-two")
    assert (no_header.status, no_header.reason) == (400, "TENANT_REQUIRED")
    assert "Mnemosyne-Tenant" in no_header.json()["detail"]
    with _client(served, "key-two", {"Mnemosyne-Tenant": OTHER}) as two:
        two.call("add", messages="Eli rides a red bicycle", user_id="eli")
    with _client(served, "key-other") as other:
        assert other.call("get_all", filters={"user_id": "eli"})["count"] == 1
    forbidden = _get(server, "/v1/events/", "key-two", {"mnemosyne-tenant": FAST})
    assert (forbidden.status, forbidden.reason) == (403, "TENANT_FORBIDDEN") and forbidden.json()["detail"]
    # The client's construction pings: a tenant the key cannot use is refused there too, as by
    # every other call (ping answered it as the key's project, and each call after failed).
    pinged = _get(server, "/v1/ping/", "key-two", {"mnemosyne-tenant": OTHER})
    assert (pinged.status, pinged.json()["project_id"]) == (200, OTHER)
    for named, status, reason in ((FAST, 403, "TENANT_FORBIDDEN"), ("../x", 400, "TENANT_INVALID")):
        refused = _get(server, "/v1/ping/", "key-two", {"mnemosyne-tenant": named})
        assert refused.status == status and refused.reason == reason, refused.body[:300]


def test_both_apis_share_the_port_unambiguously(server: ServerProcess) -> None:
    ours = request(server.http_port, "GET", "/v1/ping", headers={"authorization": "Bearer key-sync"})
    assert ours.status == 200 and "status" not in ours.json()
    theirs = _get(server, "/v1/ping/", "key-sync")
    assert theirs.status == 200 and theirs.json() == {
        "status": "ok",
        "org_id": "mnemosyne",
        "project_id": SYNC,
        "user_email": None,
    }
    whoami = request(server.http_port, "GET", "/v1/whoami", headers={"authorization": "Bearer key-sync"})
    assert whoami.json()["tenants"] == [SYNC]
    listed = request(
        server.http_port,
        "GET",
        f"/v1/tenants/{SYNC}/memories?page_size=1",
        headers={"authorization": "Bearer key-sync"},
    )
    # Ours (an object; proto3 JSON leaves an empty list out), not mem0's list: whatever ran before.
    body = listed.json()
    assert listed.status == 200 and isinstance(body, dict) and set(body) <= {"memories", "nextPageToken"}, body
    assert request(server.http_port, "GET", "/openapi.json").status == 200


def test_a_bad_key_is_refused_at_construction(served: tuple[ServerProcess, Path]) -> None:
    server, root = served
    client = Mem0Client(server.http_url, "not-a-key", root)
    try:
        assert client.construction["error"] == "ValueError" and "token" in client.construction["message"]
    finally:
        client.close()
    reply = _get(server, "/v1/ping/", "not-a-key")
    assert (reply.status, reply.reason) == (401, "TOKEN_UNKNOWN") and reply.json()["detail"]
    # Authentication comes first: a bad body from an unknown key learns nothing more.
    garbage = _send(server, "POST", "/v3/memories/add/", b"{not json", key="not-a-key")
    assert (garbage.status, garbage.reason) == (401, "TOKEN_UNKNOWN")
    headed = request(server.http_port, "GET", "/v1/events/", headers={"mnemosyne-tenant": SYNC})
    assert (headed.status, headed.reason) == (401, "TOKEN_MISSING")


def _send(server: ServerProcess, method: str, path: str, body: Any = None, key: str = "key-sync") -> Reply:
    raw = body if isinstance(body, bytes) else (None if body is None else json.dumps(body).encode())
    headers = {"authorization": f"Token {key}", "content-type": "application/json"}
    return request(server.http_port, method, path, raw, headers)


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "reason"),
    [
        ("POST", "/v3/memories/add/", b"{not json", 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v3/memories/add/", b"[1, 2]", 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v3/memories/add/", {"messages": "x" * 40_000}, 400, "TEXT_TOO_LONG"),
        ("POST", "/v3/memories/add/", {"messages": []}, 400, "TEXT_EMPTY"),
        ("POST", "/v3/memories/add/", {"messages": [{"role": "user", "content": 7}]}, 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v3/memories/add/", {"messages": "hi", "user_id": ["a"]}, 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v3/memories/add/", {"messages": "hi", "metadata": {"k": {"deep": 1}}}, 400, "REQUEST_UNDECODABLE"),
        (
            "POST",
            "/v3/memories/add/",
            {"messages": "hi", "metadata": {"mem0.user_id": "x"}},
            400,
            "MEM0_REQUEST_INVALID",
        ),
        # Not JSON numbers, though Python's json reads them: stored as the text "NaN" before.
        ("POST", "/v3/memories/add/", b'{"messages": "hi", "metadata": {"k": NaN}}', 400, "NUMBER_INVALID"),
        ("POST", "/v3/memories/add/", b'{"messages": "hi", "metadata": {"k": -Infinity}}', 400, "NUMBER_INVALID"),
        ("POST", "/v3/memories/search/", b'{"query": "q", "filters": {"metadata": {"k": NaN}}}', 400, "NUMBER_INVALID"),
        ("POST", "/v3/memories/search/", {"filters": {}}, 400, "QUERY_EMPTY"),
        ("POST", "/v3/memories/search/", {"query": "q", "top_k": "ten"}, 400, "NUMBER_INVALID"),
        ("POST", "/v3/memories/search/", {"query": "q", "top_k": 100_000}, 400, "K_OUT_OF_RANGE"),
        ("POST", "/v3/memories/search/", b'{"query": "q", "top_k": ' + b"9" * 5000 + b"}", 400, "NUMBER_INVALID"),
        (
            "POST",
            "/v3/memories/add/",
            b'{"messages": "hi", "metadata": {"k": ' + b"9" * 5000 + b"}}",
            400,
            "NUMBER_INVALID",
        ),
        ("POST", "/v3/memories/?page_size=100000000", {"filters": {}}, 400, "PAGE_SIZE_OUT_OF_RANGE"),
        ("POST", "/v3/memories/?page=0", {"filters": {}}, 400, "PAGE_INVALID"),
        ("POST", "/v3/memories/?page=-1", {}, 400, "PAGE_INVALID"),
        ("POST", "/v3/memories/", {"filters": "alice"}, 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v3/memories/", {"filters": {"user_id": {}}}, 400, "MEM0_REQUEST_INVALID"),
        # An empty or blank id (an unset variable) was stored and matched as an id of its own.
        ("POST", "/v3/memories/add/", {"messages": "hi", "user_id": ""}, 400, "MEM0_REQUEST_INVALID"),
        ("POST", "/v3/memories/add/", {"messages": "hi", "agent_id": " \t"}, 400, "MEM0_REQUEST_INVALID"),
        ("POST", "/v3/memories/search/", {"query": "q", "filters": {"run_id": ""}}, 400, "MEM0_REQUEST_INVALID"),
        ("POST", "/v3/memories/", {"filters": {"AND": [{"app_id": " "}]}}, 400, "MEM0_REQUEST_INVALID"),
        ("DELETE", "/v1/memories/?user_id=", None, 400, "MEM0_REQUEST_INVALID"),
        (
            "POST",
            "/v3/memories/search/",
            {"query": "q", "filters": {"AND": [{"agent_id": {}}]}},
            400,
            "MEM0_REQUEST_INVALID",
        ),
        ("GET", "/v1/memories/abc/", None, 400, "MEMORY_ID_INVALID"),
        ("GET", "/v1/memories/99999999999999999999/", None, 400, "MEMORY_ID_INVALID"),
        ("GET", "/v1/memories/987654/", None, 404, "MEMORY_NOT_FOUND"),
        ("PUT", "/v1/memories/987654/", {"text": "x"}, 404, "MEMORY_NOT_FOUND"),
        ("DELETE", "/v1/memories/987654/", None, 404, "MEMORY_NOT_FOUND"),
        ("GET", "/v1/memories/987654/history/", None, 404, "MEMORY_NOT_FOUND"),
        ("DELETE", "/v1/memories/", None, 400, "FILTER_EMPTY"),
        ("DELETE", "/v1/memories/?user_id=*", None, 400, "FILTER_EMPTY"),
        ("GET", "/v1/event/123456/", None, 404, "EVENT_NOT_FOUND"),
        ("GET", "/v1/event/s.forged.receipt/", None, 404, "EVENT_NOT_FOUND"),
        ("GET", "/v1/event/../", None, 404, "EVENT_NOT_FOUND"),
        ("GET", "/v1/events/?page_size=0", None, 400, "PAGE_SIZE_OUT_OF_RANGE"),
        ("GET", "/v1/events/?page_token=forged", None, 400, "PAGE_TOKEN_INVALID"),
        # A string for a boolean: "false" was read as true (enable_graph's 501), or taken unread.
        ("POST", "/v3/memories/add/", {"messages": "hi", "infer": "false"}, 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v3/memories/add/", {"messages": "hi", "async_mode": "no"}, 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v3/memories/add/", {"messages": "hi", "enable_graph": "false"}, 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v3/memories/add/", {"messages": "hi", "infer": 0}, 400, "REQUEST_UNDECODABLE"),
        ("PATCH", "/v3/memories/add/", {}, 405, "METHOD_NOT_ALLOWED"),
        ("GET", "/v3/no/such/", None, 404, "ROUTE_NOT_FOUND"),
    ],
)
def test_hostile_requests_get_a_clear_4xx_with_detail(
    server: ServerProcess, method: str, path: str, body: Any, status: int, reason: str
) -> None:
    reply = _send(server, method, path, body)
    assert (reply.status, reply.reason) == (status, reason), reply.body[:400]
    document = reply.json()
    assert document["detail"] == document["message"] and len(document["detail"]) > 10


def test_an_add_s_flags_are_named_when_wrong_and_its_timestamp_is_the_memory_s_time(
    served: tuple[ServerProcess, Path],
) -> None:
    """mem0's ``timestamp`` (the memory's creation time, unix seconds) was accepted and ignored
    whatever its value: it is the memory's occurred_at, by the rule for numbers."""
    server = served[0]
    reply = _send(server, "POST", "/v3/memories/add/", {"messages": "hi", "async_mode": "no"})
    assert reply.json()["detail"] == "async_mode must be true or false, not a string"
    wrong = {value: "NUMBER_INVALID" for value in (b'"x"', b"true", b"1.5", b"1e400")}
    wrong |= {value: "OCCURRED_AT_INVALID" for value in (b"253402300800", b"-62135596801")}  # as occurredAt's
    for value, reason in wrong.items():
        body = b'{"messages": "a wrong timestamp", "timestamp": ' + value + b', "infer": false}'
        refused = _send(server, "POST", "/v3/memories/add/", body)
        assert (refused.status, refused.reason) == (400, reason), (value, refused.body[:300])
        assert "timestamp" in refused.json()["detail"]
    with _client(served, "key-sync") as mem0:
        added = [
            mem0.call("add", messages=f"a note from then ({stamp})", user_id="then", timestamp=stamp)
            for stamp in (1_500_000_000, 0)
        ]
    ids = [int(_poll_event(server, "key-sync", a["event_id"])["results"][0]["id"]) for a in added]
    with MemoryClient(server.target, "key-admin") as admin:
        assert [admin.get_memory(SYNC, i).occurred_at for i in ids] == [1_500_000_000, 0]  # seconds


MEM0_BODY_ROUTES = [route for route in MEM0_ROUTES if route.verb in ("POST", "PUT") and not route.unsupported]
LONE = "\\ud800"  # JSON text: an escape of half a surrogate pair, alone
MEM0_FIELDS = ["messages", "text", "query", "user_id", "agent_id", "app_id", "run_id", "metadata", "filters", "infer"]


@pytest.mark.parametrize("route", MEM0_BODY_ROUTES, ids=lambda route: route.name)
def test_a_lone_surrogate_escape_in_a_mem0_body_is_refused_as_undecodable(server: ServerProcess, route: Any) -> None:
    path = route.path.replace("([^/]+)", "1")
    bodies = [f'{{"{LONE}": 1}}'] + [
        f'{{"{name}": {value}}}'
        for name in MEM0_FIELDS
        for value in (
            f'"{LONE}"',
            '"\\udc00"',
            f'["{LONE}"]',
            f'{{"{LONE}": "x"}}',
            f'[{{"role": "user", "content": "{LONE}"}}]',
        )
    ]
    for body in bodies:
        reply = _send(server, route.verb, path, body.encode())
        assert (reply.status, reply.reason) == (400, "REQUEST_UNDECODABLE"), (body, reply.body[:300])
        assert "surrogate" in reply.json()["detail"]


def test_a_lone_surrogate_escape_in_the_metadata_of_a_delete_is_refused(server: ServerProcess) -> None:
    reply = _send(server, "DELETE", "/v1/memories/?user_id=u&metadata=" + quote(f'{{"a": "{LONE}"}}'))
    assert (reply.status, reply.reason) == (400, "REQUEST_UNDECODABLE"), reply.body[:300]
    assert "surrogate" in reply.json()["detail"]


@pytest.mark.parametrize("route", MEM0_BODY_ROUTES, ids=lambda route: route.name)
def test_a_key_given_twice_in_a_mem0_body_is_refused_as_on_the_json_api(server: ServerProcess, route: Any) -> None:
    """Python's json kept the last of two values: a PUT of {"text": A, "text": B} stored B, an add
    of two user_ids filed the memory under the second. The JSON API refuses both; so does mem0."""
    path = route.path.replace("([^/]+)", "1")
    for body in (
        '{"text": "A", "text": "B"}',
        '{"messages": "hi", "user_id": "u1", "user_id": "u2"}',
        '{"query": "q", "filters": {"user_id": "u1", "user_id": "u2"}}',
    ):
        reply = _send(server, route.verb, path, body.encode())
        assert (reply.status, reply.reason) == (400, "REQUEST_UNDECODABLE"), (body, reply.body[:300])
        assert "appears twice" in reply.json()["detail"]


def test_a_mem0_write_with_a_key_or_a_query_parameter_twice_changes_nothing(server: ServerProcess) -> None:
    with MemoryClient(server.target, "key-admin") as admin:
        memory_id = admin.retain(SYNC, "The twice-probe locker holds the spare badge").memory_id
        before = len(admin.list_memories(SYNC, page_size=1000).memories)
        put = _send(server, "PUT", f"/v1/memories/{memory_id}/", b'{"text": "A first", "text": "B second"}')
        add = _send(server, "POST", "/v3/memories/add/", b'{"messages": "twice added", "user_id": "a", "user_id": "b"}')
        listed = _send(server, "POST", "/v3/memories/?page=1&page=2", {"filters": {}})
        deleted = _send(server, "DELETE", "/v1/memories/?user_id=a&user_id=b")
        for reply in (put, add, listed, deleted):
            assert (reply.status, reply.reason) == (400, "REQUEST_UNDECODABLE"), reply.body[:300]
            assert "appears twice" in reply.json()["detail"]
        assert admin.get_memory(SYNC, memory_id).text == "The twice-probe locker holds the spare badge"
        assert len(admin.list_memories(SYNC, page_size=1000).memories) == before


@pytest.mark.parametrize(
    ("method", "path", "body", "names"),
    [
        ("POST", "/v1/exports/", {"schema": "{}"}, "memory exports"),
        ("GET", "/api/v1/webhooks/projects/p1/", None, "webhooks"),
        ("GET", "/api/v1/orgs/organizations/o/projects/p/", None, "organizations and projects"),
        ("PUT", "/v1/batch/", {"memories": []}, "batch"),
        ("GET", "/v1/entities/", None, "entities"),
        ("POST", "/v1/memories/", {"messages": "hi"}, "v1 add"),
        ("POST", "/v3/memories/add/", {"messages": "hi", "enable_graph": True}, "graph memory"),
        ("POST", "/v3/memories/search/", {"query": "q", "filters": {"OR": [{"user_id": "a"}]}}, "OR"),
        ("POST", "/v3/memories/", {"filters": {"user_id": {"in": ["a", "b"]}}}, "operators on user_id"),
        ("POST", "/v3/memories/", {"filters": {"created_at": {"gte": "2024-01-01"}}}, "created_at"),
    ],
)
def test_what_mem0_has_and_we_do_not_is_a_501_naming_it(
    server: ServerProcess, method: str, path: str, body: Any, names: str
) -> None:
    reply = _send(server, method, path, body)
    assert (reply.status, reply.reason) == (501, "MEM0_UNSUPPORTED"), reply.body[:400]
    assert names in reply.json()["detail"]


@pytest.mark.parametrize(
    ("path", "filters", "named"),
    [
        ("/v3/memories/search/", {"usr_id": "a"}, "'usr_id' is no field a filter takes"),
        ("/v3/memories/", {"AND": [{"user_id": "a"}, {"$where": "1"}]}, "'$where' is no field a filter takes"),
        ("/v3/memories/", {"user_id": {"$weird": 1}}, "'$weird' on user_id is no filter operator"),
        ("/v3/memories/search/", {"agent_id": {"in": ["a"], "like": "b"}}, "'like' on agent_id is no filter operator"),
    ],
)
def test_a_filter_field_or_operator_mem0_does_not_have_is_a_400_naming_it(
    server: ServerProcess, path: str, filters: dict[str, Any], named: str
) -> None:
    """Only what mem0 has is 'not served' (501): a misspelt field or an operator of no filter
    language was answered 501 MEM0_UNSUPPORTED too, a server error for the caller's mistake."""
    reply = _send(server, "POST", path, {"query": "q", "filters": filters})
    assert (reply.status, reply.reason) == (400, "MEM0_REQUEST_INVALID"), reply.body[:400]
    assert named in reply.json()["detail"], reply.json()["detail"]


def test_a_refusal_for_load_carries_retry_after(tmp_path: Path) -> None:
    parked = tmp_path / "park"
    parked.touch()
    server = ServerProcess(
        tmp_path / "data",
        http=True,
        args=["--worker-threads", "1", "--calls-per-tenant", "1", "--queued-calls-per-tenant", "1"],
        env={"MNEMOSYNE_TEST_PARK_TENANT": "default", "MNEMOSYNE_TEST_PARK_FILE": str(parked)},
    ).start()
    threads = []
    try:
        threads = [
            threading.Thread(target=request, args=(server.http_port, "GET", "/v1/memories/1/")) for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        time.sleep(1.0)  # one call parked on the only worker, one queued: the queue is full
        reply = request(server.http_port, "GET", "/v1/memories/1/")
        assert (reply.status, reply.reason) == (429, "QUEUED_CALLS_PER_TENANT_REACHED")
        assert reply.headers["retry-after"] == "1" and reply.json()["detail"]
    finally:
        parked.unlink()
        for thread in threads:
            thread.join()
        server.stop()


def _run_example(code: str, port: int, home: Path, env: dict[str, str] | None = None) -> list[str]:
    script = code.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    result = subprocess.run(
        [str(mem0_python()), "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**mem0_environment(home), **(env or {})},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


def test_the_readme_mem0_example_runs_as_printed(tmp_path: Path) -> None:
    (block,) = code_blocks(section((ROOT / "README.md").read_text(), "mem0"), "python")
    server = ServerProcess(tmp_path / "data", http=True).start()  # no tokens file: any key
    try:
        assert _run_example(block, server.http_port, tmp_path) == ["Alice moved to Austin last month"]
    finally:
        server.stop()


def test_the_docs_page_example_runs_as_printed(tmp_path: Path) -> None:
    # The page's first example; its second (the session-consistency helper) is the flow of
    # tests/test_session_consistency.py::test_the_official_mem0_client_with_the_helper_reads_its_own_add.
    first, helper = code_blocks((ROOT / "docs" / "mem0.md").read_text(), "python")
    assert "session_consistency(MemoryClient(" in helper
    block = first
    server = ServerProcess(
        tmp_path / "data", http=True, env={"MNEMOSYNE_TOKENS": tokens_json({"doc-token": ["acme"]})}
    ).start()
    try:
        lines = _run_example(block, server.http_port, tmp_path, {"MNEMOSYNE_TOKEN": "doc-token"})
    finally:
        server.stop()
    assert lines == ["SUCCEEDED", "['Alice moved to Austin last month', 'Alice moved to Denver']"]


def test_a_delete_all_takes_the_queued_adds_it_matches(served: tuple[ServerProcess, Path]) -> None:
    """A mem0 delete by user on a hot-path tenant is a forget by filter (README, "Nothing queued
    before a delete outlives it"): an add of that user still queued is never applied (its event
    fails FORGOTTEN_BEFORE_APPLIED), another user's is."""
    server, root = served
    hold = root / "hold"
    hold.touch()  # the workers hold before committing: every add below is still open
    auth = {"authorization": "Token key-fast"}
    try:
        queued = [
            request(
                server.http_port,
                "POST",
                "/v3/memories/add/",
                headers=auth,
                json_body={"messages": [{"role": "user", "content": f"{user} parks in bay {bay}"}], "user_id": user},
            ).json()["event_id"]
            for user, bay in (("dora", 11), ("dora", 12), ("eve", 13))
        ]
        deleted = request(server.http_port, "DELETE", "/v1/memories/?user_id=dora", headers=auth)
        assert deleted.status == 200, deleted.body
    finally:
        hold.unlink()
    for event_id in queued[:2]:
        assert _poll_event(server, "key-fast", event_id, want="FAILED")["error"].startswith("FORGOTTEN_BEFORE_APPLIED")
    assert _poll_event(server, "key-fast", queued[2])["results"][0]["memory"] == "eve parks in bay 13"
    listed = request(
        server.http_port, "POST", "/v3/memories/", headers=auth, json_body={"filters": {"user_id": "dora"}}
    )
    assert listed.json()["results"] == []
