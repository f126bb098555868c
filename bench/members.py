"""Scale out (docs/scale-out.md): what sharding tenants over members costs per call, and what the
forwarding hop adds.

    python -m bench.members --out results/members.json [--rounds 5] [--calls 300] [--tenants 40]

Four servers run side by side for the whole run: one server without members (today's
deployment), a deployment of one member (the sharding code on every call, in one process) and a
deployment of two members (m0, m1). The client is this process; the servers
are child processes, whose CPU time (user + system, psutil) is read around each phase. Phases,
interleaved round by round so that the other load of the machine falls on all of them alike:

* ``single``: Retain and Recall on the single server;
* ``one member``: the same calls on the deployment of one member (what the ownership check and
  the routing cost per call, without a second process);
* ``members``: the same calls on the two members, the client routing by the member list (every
  call straight to its owner): server CPU-seconds per 1,000 calls, both members together;
* ``members grouped``: Recall as ``members``, the tenants taken in order of their owner, so that
  each member answers runs of calls in a row (the cost of a process woken for every other call,
  on two cores, apart from the cost of sharding);
* ``direct`` / ``forwarded``: Recall of tenants owned by m1, sent to m1 (its owner) or to m0
  (which forwards them): the hop's added p50 latency and CPU per call (both members);
* ``ping``: Ping of m0, the RPC floor of the same run (its p50 and CPU per call).

Medians over the rounds are reported. Targets: ``members`` within 10% of ``single`` per call;
the hop's added p50 and CPU at most one Ping floor.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench.common import percentiles, print_table, write_json
from bench.corpus import Corpus
from mnemosyne.cli.server_process import LocalMembers, ServerProcess
from mnemosyne.client import MemoryClient
from mnemosyne.store.membership import owner_of


def _cpu(processes: list[ServerProcess]) -> float:
    total = 0.0
    for server in processes:
        assert server.process is not None
        times = psutil.Process(server.pid).cpu_times()
        total += times.user + times.system
    return total


def _phase(processes: list[ServerProcess], calls: int, call: Callable[[int], object]) -> dict[str, float]:
    """Server CPU-seconds per 1,000 calls and the calls' p50 (ms)."""
    before = _cpu(processes)
    samples = []
    for i in range(calls):
        started = time.perf_counter()
        call(i)
        samples.append(time.perf_counter() - started)
    return {"cpu_s_per_1000": (_cpu(processes) - before) / calls * 1000, "p50_ms": percentiles(samples)["p50_ms"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--tenants", type=int, default=40)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    texts = Corpus(seed=11).memories(0, 4000)
    tenants = [f"bench-{i:03d}" for i in range(args.tenants)]
    ids = ["m0", "m1"]
    theirs = [t for t in tenants if owner_of(t, ids) == "m1"]
    grouped = sorted(tenants, key=lambda t: owner_of(t, ids))
    server_args = ["--synchronous", "normal"]
    rounds: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-members-") as tmp:
        single = ServerProcess(Path(tmp) / "single", args=server_args).start(timeout=180)
        members = LocalMembers(Path(tmp) / "members", 2, args=server_args).start(timeout=180)
        lone = LocalMembers(Path(tmp) / "lone", 1, args=server_args).start(timeout=180)
        pair = members.processes
        try:
            with (
                MemoryClient(single.target) as alone,
                MemoryClient("", members=members.members) as routed,
                MemoryClient(pair[0].target) as entry,
                MemoryClient(pair[1].target) as owner,
                MemoryClient("", members=lone.members) as one,
            ):
                for tenant in tenants:  # a few memories each, so that Recall has something to rank
                    for client in (alone, routed, one):
                        client.retain_batch(tenant, texts[:20])
                written = iter(range(10**9))

                def retain(client: MemoryClient) -> Callable[[int], object]:
                    return lambda i: client.retain(tenants[i % len(tenants)], texts[next(written) % len(texts)])

                def recall(client: MemoryClient, among: list[str]) -> Callable[[int], object]:
                    return lambda i: client.recall(among[i % len(among)], texts[(i * 7) % len(texts)][:60])

                phases: dict[str, tuple[list[ServerProcess], Callable[[int], object]]] = {
                    "single retain": ([single], retain(alone)),
                    "single recall": ([single], recall(alone, tenants)),
                    "one member retain": (lone.processes, retain(one)),
                    "one member recall": (lone.processes, recall(one, tenants)),
                    "members retain": (pair, retain(routed)),
                    "members recall": (pair, recall(routed, tenants)),
                    # The same, the calls grouped by owner (each member gets runs of calls in a row).
                    "members grouped recall": (pair, recall(routed, grouped)),
                    "direct recall": (pair, recall(owner, theirs)),
                    "forwarded recall": (pair, recall(entry, theirs)),
                    "ping": (pair, lambda i: entry.ping()),
                }
                for _client, warm in phases.values():  # warm-up: open files, caches, channels
                    for i in range(20):
                        warm(i)
                for round_ in range(args.rounds):
                    order = list(phases) if round_ % 2 == 0 else list(reversed(phases))
                    rounds.append({name: _phase(phases[name][0], args.calls, phases[name][1]) for name in order})
                    print(f"round {round_ + 1}/{args.rounds} done", flush=True)
        finally:
            single.stop()
            members.stop()
            lone.stop()

    def median(name: str, key: str) -> float:
        return statistics.median(r[name][key] for r in rounds)

    result: dict[str, Any] = {name: {k: median(name, k) for k in ("cpu_s_per_1000", "p50_ms")} for name in rounds[0]}
    hop = {
        "added_p50_ms": median("forwarded recall", "p50_ms") - median("direct recall", "p50_ms"),
        "added_cpu_s_per_1000": median("forwarded recall", "cpu_s_per_1000")
        - median("direct recall", "cpu_s_per_1000"),
        "ping_p50_ms": median("ping", "p50_ms"),
        "ping_cpu_s_per_1000": median("ping", "cpu_s_per_1000"),
    }
    ratios = {
        f"{who} / single {call}": result[f"{who} {call}"]["cpu_s_per_1000"] / result[f"single {call}"]["cpu_s_per_1000"]
        for who in ("one member", "members")
        for call in ("retain", "recall")
    }
    print_table(
        "server CPU-seconds per 1,000 calls and p50 (medians of interleaved rounds)",
        ["phase", "CPU s / 1000", "p50 ms"],
        [[name, v["cpu_s_per_1000"], v["p50_ms"]] for name, v in result.items()],
    )
    print_table(
        "sharding and the hop",
        ["measure", "value"],
        [
            *([f"CPU per call: {name}", ratio] for name, ratio in ratios.items()),
            ["hop: added p50 ms", hop["added_p50_ms"]],
            ["hop: added CPU s / 1000", hop["added_cpu_s_per_1000"]],
            ["Ping floor p50 ms", hop["ping_p50_ms"]],
            ["Ping floor CPU s / 1000", hop["ping_cpu_s_per_1000"]],
        ],
    )
    write_json(
        args.out,
        {"rounds": args.rounds, "calls": args.calls, "phases": result, "ratios": ratios, "hop": hop, "raw": rounds},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
