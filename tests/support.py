"""Helpers shared by the tests: the real server in a child process, token documents."""

from __future__ import annotations

import json

from mnemosyne.server_process import ServerProcess

__all__ = ["ServerProcess", "tokens_json"]


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
