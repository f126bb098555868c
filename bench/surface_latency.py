"""The server's surfaces against a baseline, interleaved call by call: mem0 add and search, the
MCP tools over streamable HTTP, and recall and ping over HTTP/JSON and over gRPC beside them.

    python -m bench.surface_latency --baseline-python /work/baseline/.venv/bin/python --out results/surfaces.json

Two servers (hashing embedder, no tokens, loopback): this installation's and the baseline's (an
interpreter of another installation, ``--baseline-python``; ``--baseline-pythonpath`` puts a tree
of links first, for a checkout that has no environment of its own). Each holds ``--memories``
mem0 memories (tenant ``default``) and an MCP session (tenant ``bench``) that read its memory once.
Then ``--rounds`` rounds: in each, the servers take turns (their order alternating), and each
answers one call of every kind, timed end to end by this process (the official MCP SDK client,
one keep-alive ``http.client`` connection, a ``MemoryClient``), so a drift of a shared machine's
speed reaches both.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.common import percentiles, print_table, running_server, write_json
from mnemosyne.cli.server_process import ServerProcess
from mnemosyne.client import MemoryClient


def _post(connection: http.client.HTTPConnection, path: str, body: dict[str, Any]) -> None:
    headers = {"content-type": "application/json", "authorization": "Token any"}
    connection.request("POST", path, body=json.dumps(body).encode(), headers=headers)
    response = connection.getresponse()
    response.read()
    assert response.status == 200, (path, response.status)


def _get(connection: http.client.HTTPConnection, path: str) -> None:
    connection.request("GET", path)
    response = connection.getresponse()
    response.read()
    assert response.status == 200, (path, response.status)


class Surfaces:
    """One server's calls, each a function of the round."""

    def __init__(self, server: ServerProcess, session: Any) -> None:
        self.http = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
        self.grpc = MemoryClient(server.target)
        self.session = session

    async def tool(self, name: str, arguments: dict[str, Any]) -> None:
        result = await self.session.call_tool(name, arguments)
        assert not result.is_error, (name, result)

    def calls(self, topic: int) -> dict[str, Callable[[], Awaitable[None] | None]]:
        fact = uuid.uuid4().hex

        def grpc_recall() -> None:
            self.grpc.recall("default", f"topic {topic}", k=10)

        return {
            "mem0 add": lambda: _post(self.http, "/v3/memories/add/", {"messages": f"fact {fact} on {topic}"}),
            "mem0 search": lambda: _post(self.http, "/v3/memories/search/", {"query": f"topic {topic}"}),
            "json recall": lambda: _post(
                self.http, "/v1/tenants/default/memories:recall", {"query": f"topic {topic}", "k": 10}
            ),
            "json ping": lambda: _get(self.http, "/v1/ping"),
            "grpc recall": grpc_recall,
            "grpc ping": self.grpc.ping,
            "mcp recall": lambda: self.tool("recall", {"query": f"topic {topic}", "k": 5}),
            "mcp retain": lambda: self.tool("retain", {"text": f"tool fact {fact}"}),
            "mcp read_memory": lambda: self.tool("read_memory", {}),
            "mcp memory_update": lambda: self.tool("memory_update", {"content": f"MEMORY {fact}"}),
        }


async def measure(servers: dict[str, ServerProcess], memories: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    timings: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
    async with AsyncExitStack() as stack:
        surfaces = {}
        for name, server in servers.items():
            url = f"{server.http_url}/mcp?tenant=bench"
            client = Client(streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=60)))
            surfaces[name] = Surfaces(server, await stack.enter_async_context(client))
            await surfaces[name].tool("read_memory", {})
            for i in range(memories):
                _post(surfaces[name].http, "/v3/memories/add/", {"messages": f"memory {i} about topic {i % 17}"})
        names = list(servers)
        for round_ in range(rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                for kind, call in surfaces[name].calls(round_ % 17).items():
                    started = time.perf_counter()
                    pending = call()
                    if pending is not None:
                        await pending
                    timings[name].setdefault(kind, []).append(time.perf_counter() - started)
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-python", required=True, help="the baseline is this interpreter's installation")
    parser.add_argument("--baseline-pythonpath", default="", help="PYTHONPATH of the baseline's server")
    parser.add_argument("--memories", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    baseline_env = {"PYTHONPATH": args.baseline_pythonpath} if args.baseline_pythonpath else {}
    with ExitStack() as stack:
        servers = {
            "baseline": stack.enter_context(running_server(http=True, python=args.baseline_python, env=baseline_env)),
            "this": stack.enter_context(running_server(http=True)),
        }
        timings = anyio.run(measure, servers, args.memories, args.rounds)
    results = {name: {kind: percentiles(samples) for kind, samples in kinds.items()} for name, kinds in timings.items()}
    rows = [
        [kind, results["baseline"][kind]["p50_ms"], results["this"][kind]["p50_ms"], results["this"][kind]["p99_ms"]]
        for kind in results["this"]
    ]
    print_table("end to end, ms", ["call", "baseline p50", "this p50", "this p99"], rows)
    write_json(args.out, {"rounds": args.rounds, "memories": args.memories, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
