"""Scale out (docs/scale-out.md): what sharding tenants over members costs per call, and what the
forwarding hop adds.

    python -m bench.members --out results/members.json [--rounds 5] [--calls 300] [--tenants 40]
        [--server-args "--embedder hashing"]

Servers run side by side for the whole run: one server without members (today's deployment), a
pair of such servers (two processes, no members), a deployment of one member (the sharding code
on every call, in one process), a deployment of two members (m0, m1), and a bare grpc.aio Ping
server with a bare relay in front of it (bench/bare_hop.py). The client is this process; the
servers are child processes, whose CPU time (user + system, psutil: /proc) is read around each
phase. Phases, interleaved round by round so that the other load of the machine falls on all of
them alike:

* ``single``: Retain and Recall on the single server;
* ``one member``: the same calls on the deployment of one member (what the ownership check and
  the routing cost per call, without a second process);
* ``members``: the same calls on the two members, the client routing by the member list (every
  call straight to its owner): server CPU-seconds per 1,000 calls, both members together;
* ``pair recall``: Recall as ``members``, each tenant sent to the server of the pair that stands
  where its owner would (the first for m0's tenants, the second for m1's): two processes taking
  turns with no sharding code at all, what ``members`` costs apart from being members;
* ``members grouped``: Recall as ``members``, the tenants taken in order of their owner, so that
  each member answers runs of calls in a row (the cost of a process woken for every other call,
  on two cores, apart from the cost of sharding);
* ``direct`` / ``forwarded``: Recall of tenants owned by m1, sent to m1 (its owner) or to m0
  (which forwards them): the hop's added p50 latency and CPU per call (both members);
* ``direct watch`` / ``forwarded watch``: a server stream's hop: WatchEvents of a tenant owned by
  m1 opened, its first event read and the stream closed, sent to m1 or through m0;
* ``ping``: Ping of m0, the RPC floor of the same run (its p50 and CPU per call);
* ``bare ping`` / ``bare relayed ping``: Ping of the bare server, directly and through the bare
  relay (both processes): the floor of any grpc.aio hop in the same run;
* ``bare linked ping``: through the linked relay (bench/bare_hop.py: the hop over a plain TCP
  connection, not a gRPC call; both processes): what a member link outside gRPC would cost.

``--server-args``: more flags of every Mnemosyne server (``--embedder hashing``: recall without the
model's query embedding, whose cost would only add noise to the differences measured here).
Medians over the rounds are reported. Targets: ``members`` within 10% of ``single`` per call;
the hop's added p50 and CPU at most 1.2 Ping floors (issue 46).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil

from bench.bare_hop import bare_process
from bench.common import percentiles, print_table, write_json
from bench.corpus import Corpus
from mnemosyne.cli.server_process import LocalMembers, ServerProcess
from mnemosyne.client import MemoryClient
from mnemosyne.store.membership import owner_of

IDS = ["m0", "m1"]
Phase = tuple[list[int], Callable[[int], object]]


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def _phase(pids: list[int], calls: int, call: Callable[[int], object]) -> dict[str, float]:
    """Server CPU-seconds per 1,000 calls and the calls' p50 (ms)."""
    before = _cpu(pids)
    samples = []
    for i in range(calls):
        started = time.perf_counter()
        call(i)
        samples.append(time.perf_counter() - started)
    return {"cpu_s_per_1000": (_cpu(pids) - before) / calls * 1000, "p50_ms": percentiles(samples)["p50_ms"]}


def _pids(processes: list[ServerProcess]) -> list[int]:
    return [server.pid for server in processes]


def _phases(stack: ExitStack, tmp: Path, tenants: list[str], server_args: list[str]) -> dict[str, Phase]:
    """Start every server and client (closed with ``stack``), write each tenant's memories, and
    return the phases: name -> (the server pids whose CPU counts, one call)."""
    texts = Corpus(seed=11).memories(0, 4000)
    theirs = [t for t in tenants if owner_of(t, IDS) == "m1"]
    grouped = sorted(tenants, key=lambda t: owner_of(t, IDS))
    single = ServerProcess(tmp / "single", args=server_args)
    pair = [ServerProcess(tmp / f"pair{i}", args=server_args) for i in range(2)]
    for server in (single, *pair):
        stack.callback(server.stop)
        server.start(timeout=180)
    members = LocalMembers(tmp / "members", 2, args=server_args).start(timeout=180)
    stack.callback(members.stop)
    lone = LocalMembers(tmp / "lone", 1, args=server_args).start(timeout=180)
    stack.callback(lone.stop)
    bare_target, bare_pid = stack.enter_context(bare_process())
    relay_target, relay_pid = stack.enter_context(bare_process(bare_target))
    link_target, link_pid = stack.enter_context(bare_process(bare_target, link=True))
    two = _pids(members.processes)

    def client(target: str, **kwargs: Any) -> MemoryClient:
        return stack.enter_context(MemoryClient(target, **kwargs))

    alone, routed, one = client(single.target), client("", members=members.members), client("", members=lone.members)
    entry, owner = client(members.processes[0].target), client(members.processes[1].target)
    bare, relay, linked = client(bare_target), client(relay_target), client(link_target)
    pair_clients = {member: client(server.target) for member, server in zip(IDS, pair)}
    for tenant in tenants:  # a few memories each, so that Recall has something to rank
        for writer in (alone, routed, one, pair_clients[owner_of(tenant, IDS)]):
            writer.retain_batch(tenant, texts[:20])
    for tenant in theirs:  # events to watch: a fast write's
        owner.hot_path(tenant, "enable")
        owner.retain(tenant, texts[0], fast=True)
        owner.hot_path(tenant, "flush")
    written = iter(range(10**9))

    def retain(c: MemoryClient) -> Callable[[int], object]:
        return lambda i: c.retain(tenants[i % len(tenants)], texts[next(written) % len(texts)])

    def recall(c: MemoryClient, among: list[str]) -> Callable[[int], object]:
        return lambda i: c.recall(among[i % len(among)], texts[(i * 7) % len(texts)][:60])

    def watch(c: MemoryClient) -> Callable[[int], object]:
        def first_event(i: int) -> object:
            events = c.watch_events(theirs[i % len(theirs)])
            try:
                return next(events)
            finally:
                events.close()  # cancels the stream (at the owner too)

        return first_event

    def pair_recall(i: int) -> object:
        tenant = tenants[i % len(tenants)]
        return pair_clients[owner_of(tenant, IDS)].recall(tenant, texts[(i * 7) % len(texts)][:60])

    return {
        "single retain": ([single.pid], retain(alone)),
        "single recall": ([single.pid], recall(alone, tenants)),
        "one member retain": (_pids(lone.processes), retain(one)),
        "one member recall": (_pids(lone.processes), recall(one, tenants)),
        "members retain": (two, retain(routed)),
        "members recall": (two, recall(routed, tenants)),
        "pair recall": (_pids(pair), pair_recall),
        # The same, the calls grouped by owner (each member gets runs of calls in a row).
        "members grouped recall": (two, recall(routed, grouped)),
        "direct recall": (two, recall(owner, theirs)),
        "forwarded recall": (two, recall(entry, theirs)),
        "direct watch": (two, watch(owner)),
        "forwarded watch": (two, watch(entry)),
        "ping": (two, lambda i: entry.ping()),
        "bare ping": ([bare_pid, relay_pid], lambda i: bare.ping()),
        "bare relayed ping": ([bare_pid, relay_pid], lambda i: relay.ping()),
        "bare linked ping": ([bare_pid, link_pid], lambda i: linked.ping()),
    }


def _rounds(phases: dict[str, Phase], rounds: int, calls: int) -> Iterator[dict[str, dict[str, float]]]:
    for _counted, warm in phases.values():  # warm-up: open files, caches, channels
        for i in range(20):
            warm(i)
    for round_ in range(rounds):
        order = list(phases) if round_ % 2 == 0 else list(reversed(phases))
        yield {name: _phase(phases[name][0], calls, phases[name][1]) for name in order}
        print(f"round {round_ + 1}/{rounds} done", flush=True)


def _summary(rounds: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    def median(name: str, key: str) -> float:
        return statistics.median(r[name][key] for r in rounds)

    phases = {name: {k: median(name, k) for k in ("cpu_s_per_1000", "p50_ms")} for name in rounds[0]}
    cpu = {name: v["cpu_s_per_1000"] for name, v in phases.items()}
    p50 = {name: v["p50_ms"] for name, v in phases.items()}
    hop = {
        "added_p50_ms": p50["forwarded recall"] - p50["direct recall"],
        "added_cpu_s_per_1000": cpu["forwarded recall"] - cpu["direct recall"],
        "stream_added_p50_ms": p50["forwarded watch"] - p50["direct watch"],
        "stream_added_cpu_s_per_1000": cpu["forwarded watch"] - cpu["direct watch"],
        "ping_p50_ms": p50["ping"],
        "ping_cpu_s_per_1000": cpu["ping"],
        "bare_added_p50_ms": p50["bare relayed ping"] - p50["bare ping"],
        "bare_added_cpu_s_per_1000": cpu["bare relayed ping"] - cpu["bare ping"],
        "bare_ping_p50_ms": p50["bare ping"],
        "bare_ping_cpu_s_per_1000": cpu["bare ping"],
        "linked_added_p50_ms": p50["bare linked ping"] - p50["bare ping"],
        "linked_added_cpu_s_per_1000": cpu["bare linked ping"] - cpu["bare ping"],
    }
    ratios = {
        f"{who} / single {call}": cpu[f"{who} {call}"] / cpu[f"single {call}"]
        for who, call in (
            ("one member", "retain"),
            ("one member", "recall"),
            ("members", "retain"),
            ("members", "recall"),
            ("pair", "recall"),
            ("members grouped", "recall"),
        )
    }
    ratios |= {
        "hop added p50 / Ping floor": hop["added_p50_ms"] / hop["ping_p50_ms"],
        "hop added CPU / Ping floor": hop["added_cpu_s_per_1000"] / hop["ping_cpu_s_per_1000"],
        "stream hop added p50 / Ping floor": hop["stream_added_p50_ms"] / hop["ping_p50_ms"],
        "stream hop added CPU / Ping floor": hop["stream_added_cpu_s_per_1000"] / hop["ping_cpu_s_per_1000"],
        "bare hop added p50 / bare Ping": hop["bare_added_p50_ms"] / hop["bare_ping_p50_ms"],
        "bare hop added CPU / bare Ping": hop["bare_added_cpu_s_per_1000"] / hop["bare_ping_cpu_s_per_1000"],
        "linked hop added p50 / bare Ping": hop["linked_added_p50_ms"] / hop["bare_ping_p50_ms"],
        "linked hop added CPU / bare Ping": hop["linked_added_cpu_s_per_1000"] / hop["bare_ping_cpu_s_per_1000"],
    }
    return {"phases": phases, "ratios": ratios, "hop": hop}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--tenants", type=int, default=40)
    parser.add_argument("--server-args", default="", help="more flags of every Mnemosyne server")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    tenants = [f"bench-{i:03d}" for i in range(args.tenants)]
    server_args = ["--synchronous", "normal", *args.server_args.split()]
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-members-") as tmp, ExitStack() as stack:
        phases = _phases(stack, Path(tmp), tenants, server_args)
        rounds = list(_rounds(phases, args.rounds, args.calls))
    summary = _summary(rounds)
    print_table(
        "server CPU-seconds per 1,000 calls and p50 (medians of interleaved rounds)",
        ["phase", "CPU s / 1000", "p50 ms"],
        [[name, v["cpu_s_per_1000"], v["p50_ms"]] for name, v in summary["phases"].items()],
    )
    print_table("sharding and the hop", ["measure", "value"], [[k, v] for k, v in summary["ratios"].items()])
    write_json(
        args.out,
        {"rounds": args.rounds, "calls": args.calls, "server_args": server_args, **summary, "raw": rounds},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
