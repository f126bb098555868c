"""The floor of a forwarding hop in grpc.aio: a bare Ping server, and a bare relay in front of it.

    python -m bench.bare_hop --serve [--upstream HOST:PORT]   (bench/members.py starts both)

Both are grpc.aio servers with our server options and interpreter settings (as bench/serving.py's
bare server), one event loop each, answering only ``AdminService/Ping``:

* the **server** decodes the request and answers an empty response (a Ping floor);
* the **relay** (``--upstream``) passes each call's request bytes to the server as they came and
  its response bytes back (identity serializers on both sides, one channel made once, no
  metadata of its own but one key): a hop with nothing of ours in it;
* the **linked relay** (``--upstream --link``): the same, but the hop is not a gRPC call: each
  request goes to the server over one plain TCP connection (asyncio streams) as a frame (a call
  number and a length, then the bytes), which the server answers with a frame of the response
  (it listens for these on its gRPC port + 1000). An experiment: what a member link outside gRPC
  would cost (no deadline, metadata, cancellation or TLS on it).

What a relayed Ping costs above a direct one is what any grpc.aio hop costs on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

PING = "/mnemosyne.v1.AdminService/Ping"


LINK_PORT_OFFSET = 1000


async def _answer_frames(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The server's side of the link: each frame's request decoded, an empty response framed back."""
    from mnemosyne.v1 import admin_pb2

    while True:
        try:
            head = await reader.readexactly(8)
        except asyncio.IncompleteReadError:
            return
        admin_pb2.PingRequest.FromString(await reader.readexactly(int.from_bytes(head[4:], "big")))
        data = admin_pb2.PingResponse().SerializeToString()
        writer.write(head[:4] + len(data).to_bytes(4, "big") + data)


class _Link:
    """The linked relay's side: one connection, calls told apart by their number."""

    def __init__(self, upstream: str) -> None:
        self.host, port = upstream.rsplit(":", 1)
        self.port = int(port) + LINK_PORT_OFFSET
        self.writer: asyncio.StreamWriter | None = None
        self.pending: dict[int, asyncio.Future[bytes]] = {}
        self.numbers = iter(range(1, 2**32))

    async def call(self, request: bytes, context: Any = None) -> bytes:
        if self.writer is None:
            reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.reading = asyncio.ensure_future(self._read(reader))
        number = next(self.numbers)
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.pending[number] = answer
        self.writer.write(number.to_bytes(4, "big") + len(request).to_bytes(4, "big") + request)
        return await answer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            head = await reader.readexactly(8)
            body = await reader.readexactly(int.from_bytes(head[4:], "big"))
            self.pending.pop(int.from_bytes(head[:4], "big")).set_result(body)


def serve(upstream: str | None, link: bool) -> None:
    from mnemosyne.runtime.interpreter import tune_interpreter

    tune_interpreter()
    import grpc

    from mnemosyne.engine.limits import Limits
    from mnemosyne.transport.admission import AdmissionLimits
    from mnemosyne.transport.server import server_options
    from mnemosyne.v1 import admin_pb2

    async def main() -> None:
        server = grpc.aio.server(options=server_options(Limits().max_request_bytes, AdmissionLimits()))
        if upstream is None:

            async def ping(request: Any, context: Any) -> Any:
                return admin_pb2.PingResponse()

            handler = grpc.unary_unary_rpc_method_handler(
                ping,
                request_deserializer=admin_pb2.PingRequest.FromString,
                response_serializer=admin_pb2.PingResponse.SerializeToString,
            )
        elif link:
            handler = grpc.unary_unary_rpc_method_handler(_Link(upstream).call)
        else:
            relayed: Any = grpc.aio.insecure_channel(upstream).unary_unary(PING)  # bytes in, bytes out

            async def relay(request: bytes, context: Any) -> bytes:
                response: bytes = await relayed(request, metadata=(("x-mnemosyne-route", "owner"),))
                return response

            handler = grpc.unary_unary_rpc_method_handler(relay)
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("mnemosyne.v1.AdminService", {"Ping": handler})]
        )
        port = server.add_insecure_port("127.0.0.1:0")
        if upstream is None:
            await asyncio.start_server(_answer_frames, "127.0.0.1", port + LINK_PORT_OFFSET)
        await server.start()
        print(json.dumps({"port": port}), flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


@contextmanager
def bare_process(upstream: str | None = None, *, link: bool = False) -> Iterator[tuple[str, int]]:
    """A bare server (or, with ``upstream``, a bare relay to it; ``link``: a linked relay): its
    target and pid."""
    command = [sys.executable, "-m", "bench.bare_hop", "--serve", *(["--upstream", upstream] if upstream else [])]
    command += ["--link"] if link else []
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = json.loads(process.stdout.readline())["port"]
        yield f"127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        process.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", action="store_true", required=True)
    parser.add_argument("--upstream", help="relay every call to this server")
    parser.add_argument("--link", action="store_true", help="...over a plain TCP connection, not gRPC")
    args = parser.parse_args(argv)
    serve(args.upstream, args.link)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
