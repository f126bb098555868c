"""The Python MemoryHost as a racing peer of the Node host (client/node/test/host.test.js).

Usage: python python_host.py TARGET TENANT CONTENT. Assembles context for one agent, prints
{"event": "assembled"}, waits for a line on stdin, then calls memory_update with CONTENT and
prints {"event": "result", "result": ...}.
"""

import json
import sys

from mnemosyne.client import MemoryClient, MemoryHost


class Agent:
    pass


def main() -> None:
    target, tenant, content = sys.argv[1:4]
    agent = Agent()
    with MemoryClient(target) as client:
        host = MemoryHost(client, tenant)
        host.assemble_context(agent, "main")
        print(json.dumps({"event": "assembled"}), flush=True)
        sys.stdin.readline()  # "go": both hosts have observed the same generation
        result = host.call_tool(agent, "memory_update", {"content": content})
        print(json.dumps({"event": "result", "result": result}), flush=True)


if __name__ == "__main__":
    main()
