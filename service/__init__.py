"""Mnemosyne: a memory service for AI agents.

The public surface is deliberately small: the client (``MemoryClient``), its error base, and
``MemoryBrain`` (the seed's API, in process on a directory or against a server).
The server is started with the ``mnemosyne serve`` command; its parts live in
``mnemosyne.transport`` (gRPC), ``mnemosyne.engine`` (memory logic) and ``mnemosyne.store``
(per-tenant SQLite files).
"""

from mnemosyne.client import MemoryClient, MnemosyneClientError

__all__ = ["MemoryBrain", "MemoryClient", "MnemosyneClientError"]


def __getattr__(name: str) -> object:
    # MemoryBrain pulls in the engine (numpy, SQLite); load it only when asked for, so importing
    # the client stays light.
    if name == "MemoryBrain":
        from mnemosyne.brain import MemoryBrain

        return MemoryBrain
    raise AttributeError(f"module 'mnemosyne' has no attribute {name!r}")
__version__ = "0.1.0"
