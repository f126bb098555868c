"""Litestream's control socket (v0.5: HTTP over a Unix socket): ``/register``, ``/unregister``
and ``/sync`` of one database, ``/info``. Called on the replication's event loop
(replication/replicator.py), so a call waiting for object storage holds no thread."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

# Seconds Litestream may take for a /sync with wait (its upload to object storage) or an
# /unregister (its last sync); ours waits a little longer than we ask it to.
SYNC_TIMEOUT_SECONDS = 30
CALL_SLACK_SECONDS = 5.0


class ControlError(Exception):
    """Litestream refused or failed a control call (``status``: its HTTP status; 0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Control:
    """The control socket at ``socket``."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None, *, timeout: float) -> Any:
        """One request; its JSON answer. HTTP/1.0, so the answer is never chunked and ends with
        the connection. ControlError on an error status, a closed or missing socket, a timeout."""
        payload = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.0\r\nHost: litestream\r\nContent-Type: application/json\r\n"
        request = f"{head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(str(self.socket))
        except (OSError, TimeoutError) as exc:
            raise ControlError(0, f"Litestream's control socket does not answer: {exc}") from None
        try:
            writer.write(request)
            await writer.drain()
            async with asyncio.timeout(timeout):
                answer = await reader.read()
        except (OSError, TimeoutError) as exc:
            raise ControlError(0, f"Litestream did not answer {method} {path}: {exc or 'timed out'}") from None
        finally:
            writer.close()
        status_line, _, rest = answer.partition(b"\r\n")
        _, _, text = rest.partition(b"\r\n\r\n")
        try:
            status = int(status_line.split()[1])
            decoded = json.loads(text) if text.strip() else {}
        except (IndexError, ValueError):
            raise ControlError(0, f"Litestream answered {method} {path} with {answer[:200]!r}") from None
        if status >= 400:
            message = decoded.get("error", "") if isinstance(decoded, dict) else ""
            raise ControlError(status, f"Litestream refused {method} {path} ({status}): {message}")
        return decoded

    async def register(self, database: Path, replica_url: str) -> None:
        await self.call(
            "POST", "/register", {"path": str(database), "replica_url": replica_url}, timeout=CALL_SLACK_SECONDS
        )

    async def unregister(self, database: Path, timeout: int = SYNC_TIMEOUT_SECONDS) -> None:
        """Stop replicating the database, after a last sync of at most ``timeout`` whole seconds."""
        await self.call(
            "POST",
            "/unregister",
            {"path": str(database), "timeout": timeout},
            timeout=timeout + CALL_SLACK_SECONDS,
        )

    async def sync(self, database: Path, timeout: int = SYNC_TIMEOUT_SECONDS) -> dict[str, Any]:
        """Replicate what the database committed so far and wait (at most ``timeout`` whole seconds)
        for object storage to have it: its answer's ``txid`` and ``replicated_txid``."""
        answer: dict[str, Any] = await self.call(
            "POST",
            "/sync",
            {"path": str(database), "wait": True, "timeout": timeout},
            timeout=timeout + CALL_SLACK_SECONDS,
        )
        return answer

    async def info(self) -> dict[str, Any]:
        answer: dict[str, Any] = await self.call("GET", "/info", timeout=CALL_SLACK_SECONDS)
        return answer
