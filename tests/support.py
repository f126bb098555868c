"""Helpers shared by the tests: the real server in a child process, token documents."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from mnemosyne.server_process import ServerProcess

__all__ = ["ServerProcess", "gauge", "tokens_json", "wait_until"]


def tokens_json(tokens: dict[str, list[str]]) -> str:
    """A tokens document (for MNEMOSYNE_TOKENS) granting each token (its own name) the tenants
    listed; ``["*"]`` makes an admin token."""
    from mnemosyne.transport.auth import hash_token

    return json.dumps(
        {
            "tokens": [
                {"name": f"tok{i}", "sha256": hash_token(t), "tenants": ts} for i, (t, ts) in enumerate(tokens.items())
            ]
        }
    )


def gauge(server: ServerProcess, name: str) -> float:
    """A gauge's value from the server's /metrics (start it with metrics=True)."""
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == name:
            return float(family.samples[0].value)
    raise AssertionError(f"{name} is not exposed")


def wait_until(predicate: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
