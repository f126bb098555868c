"""The gRPC floor of one call: our Ping beside bare grpc.aio servers, per server thread.

    python -m bench.ping_floor [--rounds 6] [--calls 2000] [--baseline-python P]

One synchronous client (this process) pings each server in turn, ``--calls`` a round, rounds
alternated: a bare grpc.aio server with our options and interpreter settings answering
AdminService/Ping (bench/serving.py's), the same with a trailing metadata pair of its own (the
cost of a trailer such as ``mnemosyne-server-time-us``), our server (``mnemosyne serve``, hashing,
no tenant), and with ``--baseline-python`` another installation's server. Per system: the p50 of a
call from the client, and the server's CPU per call read from ``/proc`` around each round, for
the whole process and for its event loop's thread (the thread running every handler's Python).
``/proc`` counts CPU in clock ticks (10 ms), so a round of 2,000 calls resolves 5 µs a call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.common import running_server
from bench.serving import bare_server_main

TICK_SECONDS = 1 / os.sysconf("SC_CLK_TCK")


@contextmanager
def bare_server(trailer: bool) -> Iterator[tuple[int, str]]:
    """(pid, target) of a bare server in a child process."""
    command = [sys.executable, "-m", "bench.ping_floor", "--bare", "trailer" if trailer else "plain"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        yield child.pid, f"127.0.0.1:{json.loads(child.stdout.readline())['port']}"
    finally:
        child.kill()
        child.wait()


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's CPU seconds, its main thread's: the event loop's)."""

    def ticks(stat: Path) -> int:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime

    whole = ticks(Path(f"/proc/{pid}/stat"))
    return whole * TICK_SECONDS, ticks(Path(f"/proc/{pid}/task/{pid}/stat")) * TICK_SECONDS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--baseline-python", help="also ping the server of this interpreter's installation")
    parser.add_argument("--bare", choices=["plain", "trailer"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare:
        bare_server_main(trailer=args.bare == "trailer")
        return 0
    import grpc

    from mnemosyne.v1 import admin_pb2, admin_pb2_grpc

    with ExitStack() as stack:
        servers = {
            "bare grpc.aio": stack.enter_context(bare_server(trailer=False)),
            "bare + a trailer": stack.enter_context(bare_server(trailer=True)),
        }
        ours = stack.enter_context(running_server())
        servers["ours"] = (ours.pid, ours.target)
        if args.baseline_python:
            base = stack.enter_context(running_server(python=args.baseline_python))
            servers["baseline"] = (base.pid, base.target)
        stubs = {}
        for name, (_, target) in servers.items():
            stubs[name] = admin_pb2_grpc.AdminServiceStub(stack.enter_context(grpc.insecure_channel(target)))
            for _ in range(300):  # warm: the connection, the caches
                stubs[name].Ping(admin_pb2.PingRequest(), timeout=60)
        samples: dict[str, dict[str, list[float]]] = {n: {"p50": [], "cpu": [], "loop": []} for n in servers}
        request = admin_pb2.PingRequest()
        for _ in range(args.rounds):
            for name, (pid, _) in servers.items():
                ping, latencies = stubs[name].Ping, []
                cpu_before, loop_before = cpu_seconds(pid)
                for _ in range(args.calls):
                    started = time.perf_counter()
                    ping(request, timeout=60)
                    latencies.append(time.perf_counter() - started)
                cpu_after, loop_after = cpu_seconds(pid)
                samples[name]["p50"].append(statistics.median(latencies) * 1e6)
                samples[name]["cpu"].append((cpu_after - cpu_before) / args.calls * 1e6)
                samples[name]["loop"].append((loop_after - loop_before) / args.calls * 1e6)
    floor = statistics.median(samples["bare grpc.aio"]["p50"])
    print(f"\n{args.rounds} rounds of {args.calls} Pings from one client, medians of the rounds")
    print("| server | p50 us | p50 / bare | server CPU us per call | its event loop's thread |")
    print("|---|---|---|---|---|")
    for name, got in samples.items():
        p50 = statistics.median(got["p50"])
        cpu, loop = statistics.median(got["cpu"]), statistics.median(got["loop"])
        print(f"| {name} | {p50:.1f} | {p50 / floor:.3f} | {cpu:.1f} | {loop:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
