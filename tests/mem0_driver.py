"""Runs INSIDE the separate mem0ai virtual environment (tests/mem0_support.py): the official
``mem0.MemoryClient``, driven line by line. Argument: a JSON object {"host", "api_key", "headers",
"helper"}; "helper", when set, is the path of Mnemosyne's session-consistency helper
(client/mem0.py), loaded from its file as a user who copied it would, and applied to the client.
Then each line of standard input is a JSON [method, kwargs]; each answer is one line of JSON,
{"ok": result} or {"error": exception class, "message": ..., "status": HTTP status or null}.
The method "set_headers" sets headers of the client's later requests (one client for many tenants
of an admin key: Mnemosyne-Tenant). The first line answered is the construction's ({"ok": "ready"}
or its error)."""

import json
import sys
from typing import Any


def _error(exc: Exception) -> dict[str, Any]:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    debug = getattr(exc, "debug_info", None) or {}
    return {
        "error": type(exc).__name__,
        "message": str(exc),
        "status": status if status is not None else debug.get("status_code"),
        "retry_after": debug.get("retry_after"),
    }


def main() -> None:
    settings = json.loads(sys.argv[1])
    try:
        import httpx
        from mem0 import MemoryClient

        http = httpx.Client(headers=settings.get("headers") or {}, timeout=60) if settings.get("headers") else None
        client = MemoryClient(api_key=settings["api_key"], host=settings["host"], client=http)
        if settings.get("helper"):
            import importlib.util

            spec = importlib.util.spec_from_file_location("mnemosyne_mem0", settings["helper"])
            assert spec is not None and spec.loader is not None, settings["helper"]
            helper = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(helper)
            client = helper.session_consistency(client)
        print(json.dumps({"ok": "ready"}), flush=True)
    except Exception as exc:  # the construction's own error (ping refused, a bad key...)
        print(json.dumps(_error(exc)), flush=True)
        return
    for line in sys.stdin:
        method, kwargs = json.loads(line)
        try:
            if method == "set_headers":
                client.client.headers.update(kwargs)
                answer = {"ok": None}
            else:
                answer = {"ok": getattr(client, method)(**kwargs)}
        except Exception as exc:
            answer = _error(exc)
        print(json.dumps(answer), flush=True)


main()
