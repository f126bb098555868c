"""What a consistency token looks like (engine/consistency.py issues them): URL-safe base64, a dot,
URL-safe base64, at most ``MAX_TOKEN_CHARACTERS``. One check and one sentence for every place that
takes a token from a caller: the engine before it reads one (any surface: a request field, the
``mnemosyne-consistency-token`` metadata, an HTTP header), and the hosts before they put one into
request metadata (host/consistency.py: the Python client, ``mnemosyne mcp``, the server's MCP
endpoint), which cannot carry every text (gRPC sends printable ASCII only) and must refuse the
rest as the server does: TOKEN_INVALID, never gRPC's "Invalid metadata" (INTERNAL). It imports
nothing of Mnemosyne, so that the engine and the hosts may both import it."""

from __future__ import annotations

import re

TOKEN_INVALID = "TOKEN_INVALID"
MAX_TOKEN_CHARACTERS = 1024
NOT_ISSUED = (
    "consistency_token is not one this server issued for this tenant; pass the consistency_token of a write's "
    "response unchanged (or none)"
)
_FORM = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def well_formed(text: str) -> bool:
    """Whether ``text`` has a token's form (not whether it is one: its MAC is checked by the
    engine). No white space, no other letters: a token is passed back unchanged."""
    return len(text) <= MAX_TOKEN_CHARACTERS and _FORM.fullmatch(text) is not None
