"""Latency of the host flow, end to end through MemoryHost: AssembleContext and the two tools.

    python -m bench.host_generations [--samples 300] [--records 20]

Starts its own server (synchronous=full, the default) in a temporary directory, gives Global a
MEMORY.md and a workspace ``--records`` records of about 2 KB, then times assemble_context,
memory_update and update_workspace (one put + one delete) for one agent, and Ping (the floor).
"""

from __future__ import annotations

import argparse

from bench.common import percentiles, running_server, timed
from mnemosyne.client import MemoryClient, MemoryHost, RecordChange


class Agent:
    pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--records", type=int, default=20)
    args = parser.parse_args()
    with running_server() as server, MemoryClient(server.target) as client:
        body = "line of notes about the project\n" * 64
        client.edit_records(
            "bench", "workspace/w", [RecordChange("put", f"r{i}.md", body) for i in range(args.records)], 0
        )
        client.edit_records("bench", "global", [RecordChange("put", "MEMORY.md", body)], 0)
        host = MemoryHost(client, "bench")
        agent = Agent()
        ping = timed(lambda i: client.ping(), args.samples)
        assemble = timed(lambda i: host.assemble_context(agent, "w"), args.samples)
        update = timed(lambda i: host.call_tool(agent, "memory_update", {"content": f"{body}{i}"}), args.samples)

        def batch(i: int) -> None:
            result = host.call_tool(
                agent,
                "update_workspace",
                {
                    "changes": [
                        {"op": "put", "key": f"n{i}.md", "content": body},
                        {"op": "delete", "key": f"r{i % args.records}.md"}
                        if i < args.records
                        else {"op": "delete", "key": f"n{i - 1}.md"},
                    ]
                },
            )
            assert result["ok"], result

        workspace = timed(batch, args.samples)
    print(f"{'operation':<34}{'p50 ms':>10}{'p99 ms':>10}   ({args.samples} samples, {args.records} records of 2 KB)")
    for name, samples in (
        ("Ping (gRPC floor)", ping),
        ("assemble_context", assemble),
        ("memory_update (sync, full)", update),
        ("update_workspace put+delete", workspace),
    ):
        p = percentiles(samples)
        print(f"{name:<34}{p['p50_ms']:>10.2f}{p['p99_ms']:>10.2f}")


if __name__ == "__main__":
    main()
