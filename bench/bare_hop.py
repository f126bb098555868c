"""The floor of a forwarding hop in grpc.aio: a bare Ping server, and a bare relay in front of it.

    python -m bench.bare_hop --serve [--upstream HOST:PORT]   (bench/members.py starts both)

Both are grpc.aio servers with our server options and interpreter settings (as bench/serving.py's
bare server), one event loop each, answering only ``AdminService/Ping``:

* the **server** decodes the request and answers an empty response (a Ping floor);
* the **relay** (``--upstream``) passes each call's request bytes to the server as they came and
  its response bytes back (identity serializers on both sides, one channel made once, no
  metadata of its own but one key): a hop with nothing of ours in it.

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


def serve(upstream: str | None) -> None:
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
        else:
            relayed = grpc.aio.insecure_channel(upstream).unary_unary(PING)  # bytes in, bytes out

            async def relay(request: bytes, context: Any) -> bytes:
                response: bytes = await relayed(request, metadata=(("x-mnemosyne-route", "owner"),))
                return response

            handler = grpc.unary_unary_rpc_method_handler(relay)
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("mnemosyne.v1.AdminService", {"Ping": handler})]
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(json.dumps({"port": port}), flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


@contextmanager
def bare_process(upstream: str | None = None) -> Iterator[tuple[str, int]]:
    """A bare server (or, with ``upstream``, a bare relay to it): its target and pid."""
    command = [sys.executable, "-m", "bench.bare_hop", "--serve", *(["--upstream", upstream] if upstream else [])]
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
    args = parser.parse_args(argv)
    serve(args.upstream)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
