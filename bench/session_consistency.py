"""What session consistency costs a client that does not need it: the same calls from a client
with it (the default) and one without, interleaved call by call on one server.

    python -m bench.session_consistency --rounds 400 --out results/session.json

One server (hashing embedder, loopback), one tenant per client, ``--memories`` synchronous
memories each. Each round, the two clients take turns (their order alternating), and each makes:

* ``sync write``: a synchronous retain (with the session, it carries no token: the last recall
  dropped it);
* ``recall after it``: a recall (with the session, it carries the write's token, which names no
  queued write: it is checked, not waited for);
* ``recall again``: a second recall (the session dropped the token after the first: none sent);
* ``fast write``: a fast retain on a tenant whose hot path is on (with the session, it carries the
  token of the client's previous fast write; its answer is the one token kept).

Timed end to end by this process; the workers drain the fast writes meanwhile.
"""

from __future__ import annotations

import argparse
import time

from bench.common import machine, percentiles, print_table, running_server, write_json
from mnemosyne.client import MemoryClient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    kinds = ("sync write", "recall after it", "recall again", "fast write")
    samples: dict[tuple[str, str], list[float]] = {(who, kind): [] for who in ("session", "none") for kind in kinds}
    with running_server() as server:
        clients = {
            "session": MemoryClient(server.target),
            "none": MemoryClient(server.target, session_consistency=False),
        }
        for who, client in clients.items():
            for start in range(0, args.memories, 500):
                items = [f"{who} note {i}: shelf {i % 37} holds part P-{i:05d}" for i in range(start, start + 500)]
                client.retain_batch(f"sync-{who}", items)
            client.hot_path(f"fast-{who}", "enable")
        for n in range(args.rounds):
            order = list(clients.items()) if n % 2 == 0 else list(reversed(clients.items()))
            for who, client in order:
                times = [time.perf_counter()]
                client.retain(f"sync-{who}", f"round {n}: part P-{n:05d} moved to shelf {n % 37}")
                times.append(time.perf_counter())
                client.recall(f"sync-{who}", f"part P-{n:05d} shelf", k=5)
                times.append(time.perf_counter())
                client.recall(f"sync-{who}", f"shelf {n % 37} part", k=5)
                times.append(time.perf_counter())
                client.retain(f"fast-{who}", f"round {n}: a fast note about part P-{n:05d}", fast=True)
                times.append(time.perf_counter())
                for kind, begin, end in zip(kinds, times[:-1], times[1:], strict=True):
                    samples[(who, kind)].append(end - begin)
        for client in clients.values():
            client.close()
    results = {f"{who}: {kind}": percentiles(s) for (who, kind), s in samples.items()}
    print_table(
        f"session consistency, {args.rounds} rounds interleaved",
        ["calls", "p50 ms", "p99 ms"],
        [(name, r["p50_ms"], r["p99_ms"]) for name, r in results.items()],
    )
    if args.out:
        write_json(args.out, {"machine": machine(), "rounds": args.rounds, "results": results})


if __name__ == "__main__":
    main()
