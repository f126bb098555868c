"""The ``mnemosyne`` command: its parser (``serve``: cli/serve.py; the commands that reach a server
as its client: cli/client_commands.py; those that work on this machine's files or start servers of
their own: cli/local_commands.py) and ``main``, which says a command's failure in one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mnemosyne.cli.client_commands import add_client_commands
from mnemosyne.cli.local_commands import add_local_commands
from mnemosyne.cli.serve import add_serve_command
from mnemosyne.client import MnemosyneClientError
from mnemosyne.errors import MnemosyneError
from mnemosyne.runtime.interpreter import tune_interpreter
from mnemosyne.version import VERSION


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mnemosyne", description="Mnemosyne: a memory service for AI agents")
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_command(commands)
    add_client_commands(commands)
    add_local_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    tune_interpreter()  # before numpy loads (runtime/interpreter.py): the serve flags' defaults load the engine
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except MnemosyneError as exc:
        print(f"mnemosyne: {exc.message} [{exc.reason}]", file=sys.stderr)
        return 2
    except MnemosyneClientError as exc:  # a client command's call the server refused, or no server answered
        print(f"mnemosyne {args.command}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file or directory of this machine the command cannot use: said, not traced
        where = "".join(f": {name}" for name in (exc.filename, exc.filename2) if name is not None)
        print(f"mnemosyne {args.command}: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
