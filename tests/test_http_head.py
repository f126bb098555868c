"""HEAD on the HTTP port (RFC 9110 §9.3.2): every path that answers GET — the API's routes, the
mem0-compatible ones, the OpenAPI document, the root page, the console's and the API reference's
files — answers HEAD with the GET's status and headers (Content-Length and Content-Type
included) and no body, as a read (the same token and tenant checks, no write), and the
connection serves its next request; a 405 names HEAD in ``Allow`` wherever it names GET.

Everything over real sockets to a real server, one connection kept alive across the requests."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.types import Receive, Scope, Send

from mnemosyne.transport.auth import hash_token
from mnemosyne.transport.http.api_docs import ASSETS as DOCS_ASSETS
from mnemosyne.transport.http.console import ASSETS as CONSOLE_ASSETS
from mnemosyne.transport.http.mem0 import ROUTES as MEM0_ROUTES
from mnemosyne.transport.http.server import HttpServer, bind
from tests.http_support import ROUTES, request
from tests.support import ServerProcess, module_server

TENANT = "headed"
# Headers a second answer may carry differently from the first (the clock's).
VOLATILE = {"date"}


class Connection:
    """One kept-alive HTTP/1.1 connection, read byte-exactly: an answer's body is read as its
    framing says, so a byte of a HEAD's body left on the stream spoils the next answer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def ask(self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    def _more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError(f"the server closed the connection (buffered: {self.buffer[:200]!r})")
        self.buffer += data

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._more()
        taken, self.buffer = self.buffer[:size], self.buffer[size:]
        return taken

    def answer(self, *, head: bool) -> tuple[int, dict[str, str], bytes]:
        """The next answer: status, headers (lower-case names), body (none for a HEAD's)."""
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        raw, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *header_lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            assert name.lower() not in headers, f"{name} sent twice"
            headers[name.lower()] = value.strip()
        if head:
            return int(status_line.split()[1]), headers, b""
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                while b"\r\n" not in self.buffer:
                    self._more()
                size_line, self.buffer = self.buffer.split(b"\r\n", 1)
                size = int(size_line, 16)
                body += self._take(size)
                self._take(2)
                if size == 0:
                    break
        else:
            body = self._take(int(headers["content-length"]))
        return int(status_line.split()[1]), headers, body

    def nothing_left(self) -> None:
        """No byte beyond the answers read so far (a HEAD's body would be here)."""
        self.sock.settimeout(0.3)
        try:
            extra = self.sock.recv(65536)
        except TimeoutError:
            extra = b""
        finally:
            self.sock.settimeout(30)
        assert self.buffer + extra == b"", (self.buffer + extra)[:300]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, "http-head", http=True, metrics=True)


@pytest.fixture(scope="module")
def memory_id(server: ServerProcess) -> str:
    kept = request(server.http_port, "POST", f"/v1/tenants/{TENANT}/memories", json_body={"text": "the lamp is blue"})
    assert kept.status == 200, kept.body
    found: str = kept.json()["result"]["memoryId"]
    return found


def _api_paths(memory_id: str) -> list[str]:
    """A path of each GET route of the API (their variables filled in), streams apart."""
    values = {"tenant": TENANT, "memory_id": memory_id, "event_id": "1", "webhook_id": "wh1"}
    return [
        re.sub(r"\{([a-z_]+)\}", lambda m: values[m.group(1)], route.template)
        for route in ROUTES.values()
        if route.verb == "GET" and not route.streams
    ]


def _mem0_paths(memory_id: str) -> list[str]:
    paths = []
    for route in MEM0_ROUTES:
        if route.verb != "GET":
            continue
        path = route.path.replace("([^/]+)", memory_id).replace(".*", "x/")
        paths += path.split("|")
    return paths


def _page_paths() -> list[str]:
    files = [f"/console/{p.name}" for p in sorted(CONSOLE_ASSETS.iterdir())]
    files += [f"/docs/{p.name}" for p in sorted(DOCS_ASSETS.iterdir())]
    return ["/", "/openapi.json", "/console", "/console/", "/docs", "/docs/", "/console/nothing.js", *files]


def _same_answer(connection: Connection, path: str, headers: dict[str, str] | None = None) -> int:
    """HEAD then GET of ``path`` on ``connection``: the same status and headers, the HEAD's without
    a body; the GET's body is as long as the HEAD said. Returns the status."""
    connection.ask("HEAD", path, headers)
    status, head_headers, _ = connection.answer(head=True)
    connection.ask("GET", path, headers)
    get_status, get_headers, body = connection.answer(head=False)
    assert status == get_status, (path, status, get_status, body[:300])
    assert {k: v for k, v in head_headers.items() if k not in VOLATILE} == {
        k: v for k, v in get_headers.items() if k not in VOLATILE
    }, path
    assert int(head_headers["content-length"]) == len(body), path
    return status


def test_every_get_of_the_port_answers_head_with_its_status_and_headers_and_no_body(
    server: ServerProcess, memory_id: str
) -> None:
    """Before, HEAD on an API route or a mem0 one was 405 (Allow: GET); only /, the OpenAPI
    document and the console's files took it, each answering it in its own code."""
    paths = [*_api_paths(memory_id), *_mem0_paths(memory_id), *_page_paths()]
    statuses = {}
    connection = Connection(server.http_port)
    try:
        for path in paths:
            statuses[path] = _same_answer(connection, path)
        connection.nothing_left()
    finally:
        connection.close()
    assert statuses[f"/v1/tenants/{TENANT}/memories/{memory_id}"] == 200
    assert statuses["/v1/ping"] == statuses["/v1/ping/"] == statuses["/"] == statuses["/console/index.html"] == 200
    assert statuses["/console"] == 308 and statuses["/console/nothing.js"] == 404
    assert statuses["/v1/memories/"] == 501  # mem0's v1 list, not served: its GET's refusal, and HEAD's
    assert sum(status == 200 for status in statuses.values()) >= 20, statuses


def test_a_head_on_a_stream_answers_its_head_and_the_connection_serves_the_next_request(
    server: ServerProcess,
) -> None:
    """WatchEvents never ends by itself: its HEAD is answered by the stream's head alone, ended
    at once, and the next request on the connection is answered."""
    streams = [route.template.replace("{tenant}", TENANT) for route in ROUTES.values() if route.streams]
    assert len(streams) >= 2, streams
    connection = Connection(server.http_port)
    try:
        for path in streams:
            started = time.monotonic()
            connection.ask("HEAD", path)
            status, headers, _ = connection.answer(head=True)
            assert (status, headers["content-type"]) == (200, "text/event-stream; charset=utf-8"), (path, headers)
            connection.ask("GET", "/v1/ping")
            assert connection.answer(head=False)[0] == 200
            assert time.monotonic() - started < 5, path
        connection.nothing_left()
    finally:
        connection.close()


# (verb, path, Allow): a 405 names HEAD wherever it names GET, and a HEAD where GET is not taken is refused.
REFUSED = [
    ("PUT", "/v1/ping", "GET, HEAD"),
    ("DELETE", f"/v1/tenants/{TENANT}/memories", "GET, HEAD, POST"),
    ("HEAD", f"/v1/tenants/{TENANT}/memories:recall", "POST"),
    ("POST", "/v1/ping/", "GET, HEAD"),
    ("HEAD", "/v3/memories/add/", "POST"),
    ("PATCH", "/v1/memories/m1/", "DELETE, GET, HEAD, PUT"),
    ("DELETE", "/openapi.json", "GET, HEAD"),
    ("PUT", "/", "GET, HEAD"),
    ("DELETE", "/console/index.html", "GET, HEAD"),
    ("POST", "/docs/", "GET, HEAD"),
]


@pytest.mark.parametrize(("verb", "path", "allow"), REFUSED)
def test_a_405_names_head_wherever_it_names_get(server: ServerProcess, verb: str, path: str, allow: str) -> None:
    connection = Connection(server.http_port)
    try:
        connection.ask(verb, path, body=b"{}" if verb in ("POST", "PUT", "PATCH") else b"")
        status, headers, body = connection.answer(head=verb == "HEAD")
        assert (status, headers["allow"]) == (405, allow), (headers, body[:300])
        if verb != "HEAD":
            error = json.loads(body)
            assert error["details"][0]["reason"] == "METHOD_NOT_ALLOWED"
            assert error["details"][0]["metadata"]["allow"] == allow
        connection.ask("GET", "/v1/ping")  # and the connection serves on
        assert connection.answer(head=False)[0] == 200
    finally:
        connection.close()


def test_a_head_writes_nothing(server: ServerProcess, memory_id: str) -> None:
    """A HEAD is served as a read: on every GET route of a tenant never written, none comes into
    being."""
    fresh = "headnever"
    statuses = set()
    connection = Connection(server.http_port)
    try:
        for path in _api_paths(memory_id) + _mem0_paths(memory_id):
            connection.ask("HEAD", path.replace(TENANT, fresh), {"Mnemosyne-Tenant": fresh})
            statuses.add(connection.answer(head=True)[0])
        connection.ask("GET", "/v1/tenants?pageSize=1000")
        tenants = json.loads(connection.answer(head=False)[2])
    finally:
        connection.close()
    assert 405 not in statuses and 200 in statuses, statuses  # served as the GETs are
    assert fresh not in tenants["tenants"] and TENANT in tenants["tenants"], tenants


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tokens = tmp_path_factory.mktemp("head-tokens") / "tokens.json"
    entry = {"name": "reader", "sha256": hash_token("head-reader-token"), "tenants": [TENANT]}
    tokens.write_text(json.dumps({"tokens": [entry]}))
    yield from module_server(tmp_path_factory, "http-head-secured", http=True, args=["--tokens-file", str(tokens)])


@pytest.mark.parametrize(
    ("token", "status"),
    [(None, 401), ("Bearer not-a-token", 401), ("Bearer head-reader-token", 200)],
)
def test_a_head_is_checked_as_its_get_is(secured: ServerProcess, token: str | None, status: int) -> None:
    """The same token and tenant checks: a HEAD without a token, with a wrong one, or for a tenant
    its token does not reach, is refused as the GET is, before anything is read."""
    headers = {"Authorization": token} if token else {}
    connection = Connection(secured.http_port)
    try:
        assert _same_answer(connection, f"/v1/tenants/{TENANT}/memories", headers) == status
        assert _same_answer(connection, "/v1/events/", {**headers, "Mnemosyne-Tenant": TENANT}) == status
        if token is not None and status == 200:  # another tenant than its token's
            assert _same_answer(connection, "/v1/tenants/elsewhere/memories", headers) == 403
        connection.nothing_left()
    finally:
        connection.close()


def _calls(server: ServerProcess, method: str) -> float:
    """The calls of ``method`` recorded OK (``mnemosyne_rpc_duration_seconds_count``)."""
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "mnemosyne_rpc_duration_seconds_count" and sample.labels == {
                "code": "OK",
                "method": method,
            }:
                return float(sample.value)
    return 0.0


def test_a_head_is_recorded_as_its_get_is(server: ServerProcess) -> None:
    """Under its RPC's name (the mem0 endpoint's), as the GET would be: not as a call with no route."""
    ping, mem0_ping = _calls(server, "/mnemosyne.v1.AdminService/Ping"), _calls(server, "mem0 ping")
    connection = Connection(server.http_port)
    try:
        for path in ("/v1/ping", "/v1/ping", "/v1/ping", "/v1/ping/", "/v1/ping/"):
            connection.ask("HEAD", path)
            assert connection.answer(head=True)[0] == 200
    finally:
        connection.close()
    deadline = time.monotonic() + 5  # a call is recorded as it ends, just after its answer is out
    while True:
        counted = (_calls(server, "/mnemosyne.v1.AdminService/Ping") - ping, _calls(server, "mem0 ping") - mem0_ping)
        if counted == (3, 2) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert counted == (3, 2)


def test_the_port_s_own_refusal_of_a_head_has_no_body() -> None:
    """A refusal the port writes itself in answer to a HEAD (408: its body stopped coming) is
    its head alone, as every answer to a HEAD: its JSON body was written after it."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass

    async def run() -> bytes:
        server = await HttpServer.start(app, bind("127.0.0.1", 0), tls=None, body_pause_seconds=0.5)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"HEAD /x HTTP/1.1\r\nHost: h\r\nContent-Length: 8\r\n\r\nabc")
            async with asyncio.timeout(10):
                answer = await reader.read()  # to its close
            writer.close()
            return answer
        finally:
            await server.stop()

    answer = asyncio.run(run())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ") and b"content-length: " in head.lower(), answer[:300]
    assert body == b"", answer[:300]
