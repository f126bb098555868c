"""Mnemosyne: a memory service for AI agents.

The public surface is deliberately small: the client (``MemoryClient``) and its error base.
The server is started with the ``mnemosyne serve`` command; its parts live in
``mnemosyne.transport`` (gRPC), ``mnemosyne.engine`` (memory logic) and ``mnemosyne.store``
(per-tenant SQLite files).
"""

from mnemosyne.client import MemoryClient, MnemosyneClientError

__all__ = ["MemoryClient", "MnemosyneClientError"]
__version__ = "0.1.0"
