"""The ``mnemosyne`` command: its parser (``serve``: cli/serve.py; the commands that reach a server
as its client: cli/client_commands.py; those that work on this machine's files or start servers of
their own: cli/local_commands.py) and ``main``, which says a command's failure in one line."""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from collections.abc import Sequence

from mnemosyne.cli.client_commands import add_client_commands
from mnemosyne.cli.local_commands import add_local_commands
from mnemosyne.cli.serve import add_serve_command
from mnemosyne.client import MnemosyneClientError
from mnemosyne.errors import MnemosyneError
from mnemosyne.runtime.files import kind_of
from mnemosyne.runtime.interpreter import tune_interpreter
from mnemosyne.version import VERSION


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; given the ``command`` a command line runs, ``serve``'s and ``members``'
    flags only for themselves: their defaults load the engine."""
    parser = argparse.ArgumentParser(prog="mnemosyne", description="Mnemosyne: a memory service for AI agents")
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_command(commands, flags=command in (None, "serve"))
    add_client_commands(commands)
    add_local_commands(commands, flags=command in (None, "members"))
    return parser


# What Python makes of bytes of the command line (or the environment) that are not UTF-8
# (surrogateescape): no request, file name of ours or log line can carry it.
_NOT_UTF8 = re.compile("[\ud800-\udfff]")


def command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of the command ``name`` (serve, backup, ...) within ``build_parser``'s."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command: argparse.ArgumentParser = commands.choices[name]
    return command


def refuse_text_that_is_not_utf8(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every text the command was given, flags and the variables behind them, must be UTF-8:
    said in one line (the command's usage error, exit 2) instead of a traceback where it is used."""
    command = command_parser(parser, args.command)
    flags = {action.dest: (action.option_strings or [action.dest])[0] for action in command._actions}
    for name, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and _NOT_UTF8.search(text):
                command.error(f"{flags.get(name, name)} is not UTF-8 text: give it in UTF-8 (file names too)")


# The flags that name a file or directory to read or write: an empty one would be the current
# directory (a backup, a server's data, a drill's servers written where the command was run).
PATH_FLAGS = ("data_dir", "from_dir", "from_file", "to")


def refuse_empty_paths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every file or directory the command names is a path: an empty one is said in one line
    (the command's usage error, exit 2), never taken for the current directory."""
    command = command_parser(parser, args.command)
    flags = {action.dest: (action.option_strings or [action.dest])[0] for action in command._actions}
    for name in PATH_FLAGS:
        if getattr(args, name, None) == "":
            command.error(f"{flags.get(name, name)} is empty: give a path (not the current directory by default)")


def main(argv: Sequence[str] | None = None) -> int:
    tune_interpreter()  # before numpy loads (runtime/interpreter.py): the serve flags' defaults load the engine
    words = sys.argv[1:] if argv is None else list(argv)
    # The command is the first word that is no option: the top level has no option with a value.
    parser = build_parser(next((word for word in words if not word.startswith("-")), ""))
    args = parser.parse_args(words)
    refuse_text_that_is_not_utf8(parser, args)
    refuse_empty_paths(parser, args)
    try:
        return int(args.run(args))
    except MnemosyneError as exc:
        print(f"mnemosyne: {exc.message} [{exc.reason}]", file=sys.stderr)
        return 2
    except MnemosyneClientError as exc:  # a client command's call the server refused, or no server answered
        print(f"mnemosyne {args.command}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file or directory of this machine the command cannot use: said, not traced
        print(f"mnemosyne {args.command}: {unusable_path(exc)}", file=sys.stderr)
        return 2


# The reason of a path a command cannot use, by what the system said of it.
_PATH_REASONS = {
    errno.ENOENT: "PATH_NOT_FOUND",
    errno.EACCES: "PATH_NOT_PERMITTED",
    errno.EPERM: "PATH_NOT_PERMITTED",
    errno.EROFS: "PATH_NOT_PERMITTED",
    errno.EEXIST: "PATH_WRONG_KIND",
    errno.ENOTDIR: "PATH_WRONG_KIND",
    errno.EISDIR: "PATH_WRONG_KIND",
    errno.ENOSPC: "DISK_FULL",
}


def unusable_path(error: OSError) -> str:
    """One line of what the system said of a path a command cannot use, naming the path and the
    reason; a file (or a link to nothing) where a directory goes says so, not "File exists"."""
    said = error.strerror or str(error)
    if error.errno == errno.EEXIST and error.filename is not None and not os.path.isdir(error.filename):
        if os.path.exists(error.filename):
            said = f"it is {kind_of(os.stat(error.filename).st_mode)}, where a directory goes"
        else:  # a symbolic link that resolves to nothing
            said = "it is a symbolic link that leads to no directory (a loop, or a link to nothing)"
    where = "".join(f": {name}" for name in (error.filename, error.filename2) if name is not None)
    return f"{said}{where} [{_PATH_REASONS.get(error.errno or 0, 'PATH_UNUSABLE')}]"


if __name__ == "__main__":
    sys.exit(main())
