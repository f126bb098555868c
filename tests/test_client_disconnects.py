"""A client that goes away before its request's body is whole is the client's cancellation, not a
server error, on every HTTP surface that reads a body: the native JSON API and the mem0 paths
record CANCELLED (as gRPC records a client that left), and no surface logs an ERROR or a
traceback (``/mcp`` reads the body before the MCP SDK, which would log it as its own error). A
chunked body uvicorn cannot parse gets uvicorn's own 400; the app sees it end the same way (the
connection closed under it), so it is recorded the same way.

Each request is written over a raw socket and cut short; the record is read from /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families
from starlette.types import Receive, Scope, Send

from mnemosyne.transport.http.server import HttpServer, bind
from tests.support import ServerProcess, module_server, wait_until

RETAIN = "/mnemosyne.v1.MemoryService/Retain"
# (path, the method it is recorded under)
SURFACES = [("/v1/tenants/cut/memories", RETAIN), ("/v3/memories/add/", "mem0 add")]
PARTIAL = b'{"text":"x"}'  # what is sent of a body said to be 100 bytes long
MALFORMED_CHUNKS = b'5\r\n{"que\r\nZZ\r\n'  # "ZZ" is not a chunk size


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, "disconnects", http=True, metrics=True)


def _count(server: ServerProcess, method: str, code: str) -> float:
    """How many calls of ``method`` ended with ``code``, from the server's /metrics."""
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "mnemosyne_rpc_duration_seconds"
        for sample in family.samples
        if sample.name.endswith("_count") and sample.labels == {"method": method, "code": code}
    )


def _head(server: ServerProcess, path: str, framing: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.http_port}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\n"
    ).encode() + framing


def _cut_short(server: ServerProcess, path: str) -> None:
    """A body that says it has 100 bytes, of which a few are sent before the connection closes."""
    with socket.create_connection(("127.0.0.1", server.http_port)) as connection:
        connection.sendall(_head(server, path, b"Content-Length: 100\r\n\r\n") + PARTIAL)


def _malformed_chunks(server: ServerProcess, path: str) -> bytes:
    """uvicorn's answer to a chunked body it cannot parse."""
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as connection:
        connection.sendall(_head(server, path, b"Transfer-Encoding: chunked\r\n\r\n") + MALFORMED_CHUNKS)
        answer = b""
        while chunk := connection.recv(4096):  # uvicorn closes after its answer
            answer += chunk
    return answer


def _no_server_error(server: ServerProcess) -> None:
    log = server.stderr_path.read_text(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


@pytest.mark.parametrize(("path", "method"), SURFACES)
def test_a_body_cut_short_is_recorded_as_the_clients_cancellation(
    http_server: ServerProcess, path: str, method: str
) -> None:
    before = _count(http_server, method, "CANCELLED")
    _cut_short(http_server, path)
    wait_until(lambda: _count(http_server, method, "CANCELLED") == before + 1)
    assert _count(http_server, method, "INTERNAL") == 0
    _no_server_error(http_server)


@pytest.mark.parametrize(("path", "method"), SURFACES)
def test_a_malformed_chunked_body_gets_uvicorns_400_and_is_not_a_server_error(
    http_server: ServerProcess, path: str, method: str
) -> None:
    before = _count(http_server, method, "CANCELLED")
    assert _malformed_chunks(http_server, path).startswith(b"HTTP/1.1 400 ")
    wait_until(lambda: _count(http_server, method, "CANCELLED") == before + 1)
    assert _count(http_server, method, "INTERNAL") == 0
    _no_server_error(http_server)


def _answers(server: ServerProcess, sent: bytes) -> list[tuple[bytes, bytes]]:
    """The (status line, body) of each answer on one connection that sends ``sent``, until the
    server closes it."""
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as connection:
        connection.sendall(sent)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
    answers = []
    while received:
        head, _, rest = received.partition(b"\r\n\r\n")
        length = next(int(line[15:]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))
        answers.append((head.split(b"\r\n")[0], rest[:length]))
        received = rest[length:]
    return answers


def test_bytes_that_are_no_request_after_a_request_answered_early_or_whole_are_not_a_server_error(
    http_server: ServerProcess,
) -> None:
    """The refusal of bytes that are no HTTP request (REQUEST_UNREADABLE) closes the connection's
    sending side: an answer the app wrote after it raised "Cannot call write() after write_eof()",
    logged as an ERROR with a traceback. A request answered before its body is read (no route
    here), whose chunked body cannot be parsed, ends as if its client left; a whole request before
    such bytes (a body shorter than the rest sent, a pipelined line of noise) is answered first, then the
    refusal, in order."""
    no_route = f"POST /v1/tenants/cut/memories:nope HTTP/1.1\r\nHost: 127.0.0.1:{http_server.http_port}\r\n"
    answers = _answers(http_server, no_route.encode() + b"Transfer-Encoding: chunked\r\n\r\n" + PARTIAL)
    assert [(status, json.loads(body)["details"][0]["reason"]) for status, body in answers] == [
        (b"HTTP/1.1 400 Bad Request", "REQUEST_UNREADABLE")
    ]
    ping = f"GET /v1/ping HTTP/1.1\r\nHost: 127.0.0.1:{http_server.http_port}\r\n\r\n".encode()
    short = _head(http_server, "/v1/tenants/cut/memories", b"Content-Length: 5\r\n\r\n") + PARTIAL
    for sent, first in ((ping + b"NOT HTTP\r\n\r\n", b"HTTP/1.1 200 OK"), (short, b"HTTP/1.1 400 Bad Request")):
        answers = _answers(http_server, sent)
        assert [status for status, _ in answers] == [first, b"HTTP/1.1 400 Bad Request"], answers
        assert json.loads(answers[1][1])["details"][0]["reason"] == "REQUEST_UNREADABLE", answers
    _no_server_error(http_server)


def test_a_body_cut_short_on_the_mcp_endpoint_is_not_a_server_error(http_server: ServerProcess) -> None:
    _cut_short(http_server, "/mcp?tenant=cut")
    assert _malformed_chunks(http_server, "/mcp?tenant=cut").startswith(b"HTTP/1.1 400 ")

    async def session() -> list[str]:
        url = f"{http_server.http_url}/mcp?tenant=cut"
        async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=30))) as client:
            return [tool.name for tool in (await client.list_tools()).tools]

    # A whole request still reaches the SDK as it was sent (the endpoint read its body first).
    assert "recall" in anyio.run(session)
    _no_server_error(http_server)


def test_an_mcp_body_above_the_request_limit_is_refused_unread(http_server: ServerProcess) -> None:
    """The SDK holds a body of any size in memory: the endpoint refuses one above twice the request
    limit (``max_request_bytes``) by its length, before a byte of it is read."""
    with socket.create_connection(("127.0.0.1", http_server.http_port), timeout=30) as connection:
        connection.sendall(_head(http_server, "/mcp?tenant=cut", b"Content-Length: 1000000000\r\n\r\n"))
        answer = b""
        while b"REQUEST_TOO_LARGE" not in answer and (chunk := connection.recv(65536)):
            answer += chunk  # the head and the body may come in two reads
    assert answer.startswith(b"HTTP/1.1 413 ") and b"REQUEST_TOO_LARGE" in answer, answer[:300]
    _no_server_error(http_server)


# (method, path, status, reason) of requests refused before their body is read, the body over
# twice the request limit of ``small_limit_server`` (``--max-request-bytes 65536``).
REFUSED_UNREAD = [
    ("POST", "/v1/tenants/big/memories", 413, "REQUEST_TOO_LARGE"),
    ("POST", "/v3/memories/add/", 413, "REQUEST_TOO_LARGE"),
    ("POST", "/mcp?tenant=big", 413, "REQUEST_TOO_LARGE"),
    ("PUT", "/v1/tenants/big/memories", 405, "METHOD_NOT_ALLOWED"),
    ("POST", "/v1/tenants/big/nothing", 404, "ROUTE_NOT_FOUND"),
    ("POST", "/mcp", 400, "TENANT_INVALID"),
]


@pytest.fixture(scope="module")
def small_limit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, "small-limit", http=True, args=["--max-request-bytes", "65536"])


@pytest.mark.parametrize(("verb", "path", "status", "reason"), REFUSED_UNREAD)
def test_a_request_refused_before_its_body_is_read_gets_its_answer_with_connection_close(
    small_limit_server: ServerProcess, verb: str, path: str, status: int, reason: str
) -> None:
    """A client that asks for the connection to be closed (urllib's ``Connection: close``) and sends
    a body the server refuses unread got 'Connection reset by peer' instead of the refusal: uvicorn
    closed the connection as soon as the answer was written, with the body still coming. Now the
    body is read and dropped after the answer, and the client gets it."""
    body = b'{"text": "' + b"a" * (4 << 20) + b'"}'
    request = urllib.request.Request(
        small_limit_server.http_url + path,
        data=body,
        method=verb,
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == status, refused.value.read()[:300]
    assert json.loads(refused.value.read())["details"][0]["reason"] == reason
    _no_server_error(small_limit_server)


@pytest.mark.parametrize(
    ("head", "body"),
    [
        # Kept alive, a body over 64 KiB to a route that takes another method: what came of it
        # after the 405 was counted as the next request's head, which was refused 431.
        ("PUT /v1/tenants/big/memories", b'{"text": "' + b"a" * (1 << 20) + b'"}'),
        # The body held back for a 100 Continue the refusal never sent: the next request's bytes
        # were read as it, and refused 400 as no HTTP.
        ("POST /v1/tenants/big/nothing", None),
    ],
)
def test_a_kept_alive_request_answered_before_its_body_never_garbles_the_next(
    small_limit_server: ServerProcess, head: str, body: bytes | None
) -> None:
    """A request answered before its body was whole ends its connection once answered (the rest of
    the body read and dropped): the next request on it was answered with a refusal of its own."""
    port = small_limit_server.http_port
    framing = "Expect: 100-continue\r\nContent-Length: 12\r\n" if body is None else f"Content-Length: {len(body)}\r\n"
    first = f"{head} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n{framing}\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(first.encode() + (body or b""))
        answer = connection.recv(65536)
        with contextlib.suppress(OSError):  # written after the connection ended: refused or not
            connection.sendall(f"GET /v1/ping HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        while chunk := connection.recv(65536):
            answer += chunk
    assert answer.count(b"HTTP/1.1 ") == 1 and answer.startswith((b"HTTP/1.1 405 ", b"HTTP/1.1 404 ")), answer[:600]
    _no_server_error(small_limit_server)


def test_a_connection_that_sends_no_whole_request_head_is_closed_and_others_are_served() -> None:
    """uvicorn times a connection out only while it idles after a response: the HTTP port closes
    one that sends no whole request head within its head time (here 0.5 s; HEAD_SECONDS), from
    when it connects or its last response ends, whatever it trickles meanwhile."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
        return await asyncio.wait_for(reader.read(), seconds) == b""

    async def run() -> None:
        sock = bind("127.0.0.1", 0)
        server = await HttpServer.start(app, sock, tls=None, head_seconds=0.5)
        try:
            silent = await asyncio.open_connection("127.0.0.1", server.port)
            trickling = await asyncio.open_connection("127.0.0.1", server.port)
            served = await asyncio.open_connection("127.0.0.1", server.port)
            trickling[1].write(b"GET /x HTTP/1.1\r\n")
            await asyncio.sleep(0.3)
            trickling[1].write(b"X-Slow: 1\r\n")  # a line in time does not restart the wait
            for _ in range(3):  # requests 0.3 s apart on one connection, 0.9 s in all: kept open
                served[1].write(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                assert (await served[0].readuntil(b"ok")).startswith(b"HTTP/1.1 200 ")
                await asyncio.sleep(0.3)
            assert await closed_within(silent[0], 3) and await closed_within(trickling[0], 3)
            served[1].write(b"GET /x HTTP/1.1\r\n")  # after a response, the head is timed again
            assert await closed_within(served[0], 3)
        finally:
            await server.stop()

    asyncio.run(run())


def test_a_body_that_stops_coming_is_refused_408_and_one_sent_slowly_is_served() -> None:
    """A client that sent a whole head and then part of its body, or none, held its socket and its
    request's task for good: a body that pauses past its time (here 0.5 s; BODY_PAUSE_SECONDS)
    while the server waits for it is 408 REQUEST_BODY_TIMEOUT, the connection closed. A body that
    keeps coming, however slowly, is served, and so is one whose client waits for its 100 Continue
    while the app is not yet reading."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/late":
            await asyncio.sleep(0.8)  # as a call waiting for admission before it reads its body
        while (message := await receive())["type"] == "http.request" and message.get("more_body"):
            pass
        if message["type"] == "http.request":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})

    head = b"POST /%s HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 8\r\n%s\r\n"

    async def run() -> None:
        sock = bind("127.0.0.1", 0)
        server = await HttpServer.start(app, sock, tls=None, body_pause_seconds=0.5)
        try:
            stopped = await asyncio.open_connection("127.0.0.1", server.port)
            stopped[1].write(head % (b"x", b"") + b"abc")

            async def waiting() -> bytes:
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(head % (b"late", b"Expect: 100-continue\r\n"))
                assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 100 ")
                writer.write(b"abcdefgh")
                return await asyncio.wait_for(reader.read(), 5)

            async def slow() -> bytes:
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(head % (b"x", b""))
                for piece in (b"ab", b"cd", b"ef", b"gh"):  # 1.2 s in all, no pause of 0.5 s
                    await asyncio.sleep(0.3)
                    writer.write(piece)
                return await asyncio.wait_for(reader.read(), 5)

            for answered in await asyncio.gather(waiting(), slow()):
                assert answered.startswith(b"HTTP/1.1 200 "), answered[:300]
            refused = await asyncio.wait_for(stopped[0].read(), 5)  # the server closes after its answer
            answer_head, _, body = refused.partition(b"\r\n\r\n")
            assert answer_head.startswith(b"HTTP/1.1 408 "), refused[:300]
            assert json.loads(body)["details"][0]["reason"] == "REQUEST_BODY_TIMEOUT"
        finally:
            await server.stop()

    asyncio.run(run())


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_drip_fed_under_its_pause_is_refused_408_and_one_at_its_rate_is_served(chunked: bool) -> None:
    """A body sent a byte at a time, each just within its pause time, held its request for good:
    a body must be whole within its time (here 1 s; BODY_SECONDS) and a second more for each
    BODY_BYTES_PER_SECOND of it that came (here 40), whether its length is given or chunked;
    past that it is 408 REQUEST_BODY_TIMEOUT saying it came too slowly (its pauses, within 2 s
    here, do not matter). A body sent as slowly but at its rate is served."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while (message := await receive())["type"] == "http.request" and message.get("more_body"):
            pass
        if message["type"] == "http.request":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})

    framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: 4000"

    def part(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data) if chunked else data

    async def send_body(port: int, piece: bytes, count: int) -> bytes:
        """``count`` parts of ``piece`` 0.3 s apart (then the rest at once): the answer."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n%s\r\n\r\n" % framing)
        sent = 0
        for _ in range(count):
            await asyncio.sleep(0.3)
            if writer.is_closing() or reader.at_eof():
                break
            writer.write(part(piece))
            sent += len(piece)
        with contextlib.suppress(ConnectionError):
            writer.write(part(b"x" * (4000 - sent)) + (b"0\r\n\r\n" if chunked else b""))
        return await asyncio.wait_for(reader.read(), 5)

    async def run() -> None:
        server = await HttpServer.start(
            app, bind("127.0.0.1", 0), tls=None, body_pause_seconds=2.0, body_seconds=1.0, body_bytes_per_second=40
        )
        try:
            # 1 byte each 0.3 s: late after ~1.1 s; 200 bytes each 0.3 s (~670 a second, where 40
            # will do) is in time whatever its length.
            dripped, steady = await asyncio.gather(
                send_body(server.port, b"x", 12), send_body(server.port, b"y" * 200, 12)
            )
            head, _, body = dripped.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408 "), dripped[:300]
            refusal = json.loads(body)
            assert refusal["details"][0]["reason"] == "REQUEST_BODY_TIMEOUT"
            assert "came too slowly" in refusal["message"], refusal
            assert steady.startswith(b"HTTP/1.1 200 "), steady[:300]
        finally:
            await server.stop()

    asyncio.run(run())


@pytest.mark.parametrize(
    ("sent", "status", "reason"),
    [
        (b"GET /x?q=" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: h\r\n\r\n", 431, "REQUEST_HEAD_TOO_LARGE"),
        # Whole in the read that crosses the bound: 400 REQUEST_UNREADABLE (uvicorn's parse of a URL
        # over 65,535 bytes failed first), and a header of 70,000 bytes was served.
        (b"GET /x?q=" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: h\r\n\r\n", 431, "REQUEST_HEAD_TOO_LARGE"),
        (b"GET /x HTTP/1.1\r\nHost: h\r\nX-Big: " + b"b" * 70_000 + b"\r\n\r\n", 431, "REQUEST_HEAD_TOO_LARGE"),
        (b"GET /x HTTP/1.1\r\nHost: h\r\nX-Big: " + b"b" * 200_000 + b"\r\n\r\n", 431, "REQUEST_HEAD_TOO_LARGE"),
        (b"GET /x HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 20_000 + b"\r\n", 431, "REQUEST_HEAD_TOO_LARGE"),
        (b"GARBAGE\x00\x01 / HTTP/1.1\r\n\r\n", 400, "REQUEST_UNREADABLE"),
        (b"GET /x HTTP/1.1\r\nContent-Length: twelve\r\n\r\n", 400, "REQUEST_UNREADABLE"),
    ],
)
def test_a_request_head_that_cannot_be_read_or_is_too_large_is_answered_as_json(
    sent: bytes, status: int, reason: str
) -> None:
    """uvicorn's parser keeps a head of any size and answers what it cannot parse with a line of
    text: the HTTP port refuses a head over HEAD_BYTES (431) and an unreadable one (400) with the
    google.rpc.Status JSON of every other error, then closes; a long head within the bound, and a
    large body after a short head, are served."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def answer(port: int, request: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        answered = await asyncio.wait_for(reader.read(), 10)  # the server closes after its answer
        writer.close()
        return answered

    async def run() -> None:
        sock = bind("127.0.0.1", 0)
        server = await HttpServer.start(app, sock, tls=None)
        try:
            refused = await answer(server.port, sent)
            head, _, body = refused.partition(b"\r\n\r\n")
            assert head.startswith(f"HTTP/1.1 {status} ".encode()) and b"application/json" in head, refused[:300]
            assert json.loads(body)["details"][0]["reason"] == reason
            within = b"GET /x?q=" + b"a" * 60_000 + b" HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
            assert (await answer(server.port, within)).startswith(b"HTTP/1.1 200 ")
            large_body = b"POST /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 1000000\r\n\r\n"
            assert (await answer(server.port, large_body + b"c" * 1_000_000)).startswith(b"HTTP/1.1 200 ")
        finally:
            await server.stop()

    asyncio.run(run())


def test_requests_refused_unread_write_no_log_line_each(http_server: ServerProcess) -> None:
    """Each request refused unread (400 REQUEST_UNREADABLE, 431 REQUEST_HEAD_TOO_LARGE) wrote
    uvicorn's WARNING "Invalid HTTP request received.", and each request asking for an upgrade
    (curl --http2's h2c, a WebSocket's) two: a client could write the server's log at will. The
    refusals are logged at most once a minute (REFUSALS_LOG_SECONDS), counted; an upgrade not at all."""
    before = http_server.stderr_path.read_text(errors="replace").count("\n")
    noise = [b"GARBAGE\x00\x01 / HTTP/1.1\r\n\r\n", b"GET /x HTTP/1.1\r\nX-Big: " + b"b" * 70_000 + b"\r\n\r\n"]
    for sent in noise * 10:
        with socket.create_connection(("127.0.0.1", http_server.http_port), timeout=10) as connection:
            connection.sendall(sent)
            assert connection.recv(64).startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 431 "))
    for upgrade in (b"h2c", b"websocket"):
        ping = f"GET /v1/ping HTTP/1.1\r\nHost: 127.0.0.1:{http_server.http_port}\r\nConnection: Upgrade\r\n".encode()
        with socket.create_connection(("127.0.0.1", http_server.http_port), timeout=10) as connection:
            connection.sendall(ping + b"Upgrade: " + upgrade + b"\r\n\r\n")
            assert connection.recv(64).startswith(b"HTTP/1.1 200 ")
    added = http_server.stderr_path.read_text(errors="replace").splitlines()[before:]
    assert len(added) <= 1 and all("HTTP requests refused unread: " in line for line in added), added


def test_a_count_of_requests_refused_unread_is_logged_when_its_interval_ends(caplog: pytest.LogCaptureFixture) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("no request is whole")

    async def refused(port: int, sent: bytes) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(sent)
        assert (await asyncio.wait_for(reader.read(), 10)).startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 431 "))
        writer.close()

    async def run() -> list[str]:
        server = await HttpServer.start(app, bind("127.0.0.1", 0), tls=None, refusals_log_seconds=0.3)
        try:
            for _ in range(3):
                await refused(server.port, b"GARBAGE\x00\x01 / HTTP/1.1\r\n\r\n")
            await refused(server.port, b"GET /x HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 20_000 + b"\r\n")
            await asyncio.sleep(0.5)  # the interval ends: the count waiting is written
            await refused(server.port, b"GARBAGE\x00\x01 / HTTP/1.1\r\n\r\n")
        finally:
            await server.stop()  # the count still waiting is written
        return [r.getMessage() for r in caplog.records if r.name in ("mnemosyne.http", "uvicorn.error")]

    with caplog.at_level("WARNING"):
        lines = asyncio.run(run())
    prefix, suffix = "HTTP requests refused unread: ", " (logged at most every 0.3 s)"
    assert lines == [
        f"{prefix}1 REQUEST_UNREADABLE{suffix}",
        f"{prefix}1 REQUEST_HEAD_TOO_LARGE, 2 REQUEST_UNREADABLE{suffix}",
        f"{prefix}1 REQUEST_UNREADABLE{suffix}",
    ], lines


def test_a_client_that_stops_reading_its_answer_is_dropped_and_one_reading_slowly_is_not() -> None:
    """A client that asked and then took none of its answer for the send stall's bound (here 2.5 s;
    SEND_STALL_SECONDS, 30 s) is dropped: it held its connection, its place in the cap and its
    answer's task for good (a watch whose reader stopped). One taking its answer slowly, a little
    within each bound, gets all of it."""
    answer = 16 << 20

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(answer).encode())]}
        )
        for _ in range(answer // 65536):
            await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    def received(port: int, pause_first: float, pause_between: float, pauses: int) -> int:
        """The answer's bytes a client got: it waits ``pause_first`` after its request, then takes
        64 KiB every ``pause_between`` s ``pauses`` times, then the rest as fast as it comes."""
        with socket.socket() as client:
            if pause_first:  # its buffer full soon: the server's writing pauses
                client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.connect(("127.0.0.1", port))
            client.settimeout(30)
            client.sendall(b"GET /large HTTP/1.1\r\nHost: localhost\r\n\r\n")
            time.sleep(pause_first)
            got = b""
            with contextlib.suppress(ConnectionResetError):
                for _ in range(pauses):
                    step = len(got) + 65536
                    while len(got) < step:
                        got += client.recv(step - len(got))
                    time.sleep(pause_between)
                while chunk := client.recv(1 << 20):
                    got += chunk
            return len(got) - (got.index(b"\r\n\r\n") + 4)

    async def run() -> tuple[int, int]:
        server = await HttpServer.start(app, bind("127.0.0.1", 0), tls=None, send_stall_seconds=2.5)
        try:
            return await asyncio.gather(
                asyncio.to_thread(received, server.port, 6.0, 0.0, 0),  # the bound, and room for a loaded machine
                asyncio.to_thread(received, server.port, 0.0, 0.25, 16),
            )
        finally:
            await server.stop()

    stalled, slow = asyncio.run(run())
    assert stalled < answer, "a client that read nothing for 6 s still got its whole answer"
    assert slow == answer
