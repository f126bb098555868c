"""Mnemosyne: a memory service for AI agents.

The public surface is deliberately small: the client (``MemoryClient``), its error base, and
``MemoryBrain`` (the specification's API, in process on a directory or against a server).
The server is started with the ``mnemosyne serve`` command; its parts live in
``mnemosyne.transport`` (gRPC), ``mnemosyne.engine`` (memory logic) and ``mnemosyne.store``
(per-tenant SQLite files).
"""

from __future__ import annotations

import typing

from mnemosyne import version as _version

__version__ = _version.VERSION  # the conventional attribute

if typing.TYPE_CHECKING:
    from mnemosyne.brain import MemoryBrain
    from mnemosyne.client import MemoryClient, MnemosyneClientError

__all__ = ["MemoryBrain", "MemoryClient", "MnemosyneClientError"]


def __getattr__(name: str) -> typing.Any:
    """The public names, loaded on first use: importing any part of the package (``mnemosyne
    serve`` above all, which sets the interpreter up before numpy loads) loads none of them."""
    if name == "MemoryBrain":
        from mnemosyne.brain import MemoryBrain  # noqa: PLC0415 - loaded on first use (PEP 562)

        return MemoryBrain
    if name in ("MemoryClient", "MnemosyneClientError"):
        from mnemosyne import client  # noqa: PLC0415 - loaded on first use (PEP 562)

        return getattr(client, name)
    raise AttributeError(f"module 'mnemosyne' has no attribute {name!r}")
