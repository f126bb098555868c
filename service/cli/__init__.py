"""The `mnemosyne` command and the client-side halves of its tools (backup, restore, export,
import, rebalance, drills), and the child server they and the tests start."""

from mnemosyne.cli.commands import main

__all__ = ["main"]
