"""The HTTP port holds at most ``--http-max-connections`` connections open (at most a quarter of
the open-file limit): idle or trickling clients could open connections until the process had no
file descriptor left, after which no tenant file and no gRPC connection opened. A connection over
the cap is answered 503 ``HTTP_CONNECTIONS_FULL`` (the JSON error of every other refusal, with
``Retry-After``) and closed; the ones already open keep working, and the cap frees up as
connections close, however they close.

Real servers on loopback, raw sockets as the clients."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
import threading
import time
from typing import Any

from starlette.types import Receive, Scope, Send

from mnemosyne.client import MemoryClient
from mnemosyne.transport.http.server import HttpServer, bind
from tests.support import ServerProcess, wait_until

GET = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def _ok(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _refusal(answer: bytes) -> tuple[bytes, Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, json.loads(body)


async def served(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(GET)
    try:
        return (await asyncio.wait_for(reader.readuntil(b"ok"), 5)).startswith(b"HTTP/1.1 200 ")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False


async def refused(port: int, source: str = "127.0.0.1") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(GET)
    answer = await asyncio.wait_for(reader.read(), 5)  # read to its end: the server closed it
    writer.close()
    return answer


async def new_one_served(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A new connection, served once the server has seen an old one close."""
    for _ in range(100):
        connection = await asyncio.open_connection("127.0.0.1", port)
        if await served(*connection):
            return connection
        connection[1].close()
        await asyncio.sleep(0.02)
    raise AssertionError("no new connection was served: the cap did not free up")


def test_connections_past_the_cap_are_refused_503_and_the_cap_frees_as_they_close() -> None:
    """Three connections held (cap 3): a fourth is answered 503 HTTP_CONNECTIONS_FULL with
    Retry-After and closed, while the three are still served. One closed by its client, one
    reset, one closed by the head timer: each frees its place for a new connection."""

    async def run() -> None:
        server = await HttpServer.start(_ok, bind("127.0.0.1", 0), tls=None, max_connections=3, head_seconds=3.0)
        try:
            closing = await asyncio.open_connection("127.0.0.1", server.port)
            resetting = await asyncio.open_connection("127.0.0.1", server.port)
            idle = await asyncio.open_connection("127.0.0.1", server.port)  # sends nothing: timed out
            assert await served(*closing)
            assert await served(*resetting)

            head, body = _refusal(await refused(server.port))
            assert head.startswith(b"HTTP/1.1 503 ") and b"content-type: application/json" in head, head
            assert b"\r\nretry-after: 1\r\n" in head, head
            assert body["details"][0]["reason"] == "HTTP_CONNECTIONS_FULL", body
            assert "--http-max-connections" in str(body["message"]), body
            assert await served(*closing)  # the connections held are still served

            closing[1].close()
            resetting[1].get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            resetting[1].transport.abort()  # closed with no linger: a reset
            replacements = [await new_one_served(server.port), await new_one_served(server.port)]
            assert b"HTTP_CONNECTIONS_FULL" in await refused(server.port)  # full again
            assert await asyncio.wait_for(idle[0].read(), 10) == b""  # closed by its head time
            replacements.append(await new_one_served(server.port))
            for _reader, writer in replacements:
                writer.close()
        finally:
            await server.stop()

    asyncio.run(run())


def test_one_address_holds_at_most_its_share_of_connections() -> None:
    """With --http-max-connections-per-address 2, a third connection from one address is refused
    503 HTTP_ADDRESS_CONNECTIONS_FULL while another address is served, and the address gets its
    place back when one of its connections closes."""

    async def run() -> None:
        server = await HttpServer.start(
            _ok, bind("127.0.0.1", 0), tls=None, max_connections=10, max_connections_per_address=2
        )
        try:
            first = await asyncio.open_connection("127.0.0.1", server.port)
            second = await asyncio.open_connection("127.0.0.1", server.port)
            assert await served(*first) and await served(*second)
            head, body = _refusal(await refused(server.port))
            assert head.startswith(b"HTTP/1.1 503 ") and b"\r\nretry-after: 1\r\n" in head, head
            assert body["details"][0]["reason"] == "HTTP_ADDRESS_CONNECTIONS_FULL", body
            assert "127.0.0.1" in body["message"] and "--http-max-connections-per-address" in body["message"]
            other = await asyncio.open_connection("127.0.0.1", server.port, local_addr=("127.0.0.2", 0))
            assert await served(*other)
            first[1].close()
            again = await new_one_served(server.port)  # its place back
            for _reader, writer in (second, other, again):
                writer.close()
        finally:
            await server.stop()

    asyncio.run(run())


def test_idle_http_connections_cannot_take_the_descriptors_tenants_and_grpc_need(server_factory) -> None:
    """Under an open-file limit of 256, 400 idle HTTP connections took every descriptor: a gRPC
    client could not connect and a tenant's files could not open. The port holds a quarter of the
    limit (64); the others are refused and closed, and tenants are written over gRPC meanwhile.
    The flood itself holds at most a few more for a moment."""
    server: ServerProcess = server_factory(open_files=(256, 256), http=True).start()
    peak, flooded = [0], threading.Event()

    def sample() -> None:  # the server's open descriptors, at their most while the flood comes
        while not flooded.is_set():
            with contextlib.suppress(OSError):
                peak[0] = max(peak[0], len(os.listdir(f"/proc/{server.pid}/fd")))

    sampler = threading.Thread(target=sample)
    sampler.start()
    with contextlib.ExitStack() as held:
        for _ in range(400):
            last = held.enter_context(socket.create_connection(("127.0.0.1", server.http_port), timeout=10))
        time.sleep(0.5)
        flooded.set()
        sampler.join()
        # asyncio accepted its whole backlog at once, several turns of the loop before the cap saw
        # one: the flood ran the process out of descriptors for a moment (ERROR "socket.accept() out
        # of system resource").
        assert peak[0] <= 160, peak
        with MemoryClient(server.target, retries=0, timeout=10) as client:
            for i in range(20):
                assert client.retain(f"capped-{i}", f"memory {i}").status == "created"
        answer = b""  # the last one's: answered as it came, before any request
        while chunk := last.recv(65536):  # to its end: the server closed it
            answer += chunk
        head, body = _refusal(answer)
        assert head.startswith(b"HTTP/1.1 503 ") and body["details"][0]["reason"] == "HTTP_CONNECTIONS_FULL"
        wait_until(lambda: len(os.listdir(f"/proc/{server.pid}/fd")) < 256 - 64, 5)  # refused ones closed
    log = server.stderr_path.read_text()
    assert "HTTP port: at most 64 connections open (asked 1024;" in log
    assert "Traceback" not in log and " ERROR " not in log
