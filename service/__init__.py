"""Mnemosyne: a memory service for AI agents.

The public surface is deliberately small: the client (``MemoryClient``), its error base, and
``MemoryBrain`` (the specification's API, in process on a directory or against a server).
The server is started with the ``mnemosyne serve`` command; its parts live in
``mnemosyne.transport`` (gRPC), ``mnemosyne.engine`` (memory logic) and ``mnemosyne.store``
(per-tenant SQLite files).
"""

from mnemosyne.brain import MemoryBrain  # light: it loads the engine only for a local directory
from mnemosyne.client import MemoryClient, MnemosyneClientError
from mnemosyne.version import VERSION as __version__  # noqa: F401  (the conventional attribute)

__all__ = ["MemoryBrain", "MemoryClient", "MnemosyneClientError"]
