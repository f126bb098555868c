"""Many ``mnemosyne`` commands run in one CLI process, one after another, for a test that checks
what each says and how it exits, not how a process starts: a process of its own for each took
about 0.5 s of starting (imports) per command. Each command is ``mnemosyne.cli.commands.main``
with the process's stdout and stderr (its file descriptors, so whatever writes to them is caught)
sent to a file of its own; what escapes ``main`` is printed as Python would print it, exit 1.
Its stdin carries the commands: not for a command that reads stdin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# Reads one command (a JSON list of words) a line, answers one JSON line on the descriptor that
# was stdout before it was taken over: [exit code, stdout, stderr].
_RUNNER = r"""
import json, os, sys, tempfile, traceback
from mnemosyne.cli.commands import main
answers = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    words = json.loads(line)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            code = main(words)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
        said = []
        for file in (out, err):
            file.seek(0)
            said.append(file.read().decode("utf-8", "replace"))
    answers.write(json.dumps([code, *said]) + "\n")
    answers.flush()
"""


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


class CliSession:
    """One CLI process; ``run`` sends it a command and waits for how it ended."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._process = process

    def run(self, *args: str) -> Ran:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(list(args)) + "\n")
        self._process.stdin.flush()
        answer = self._process.stdout.readline()
        assert answer, f"the CLI process ended (exit {self._process.wait(timeout=10)})"
        code, stdout, stderr = json.loads(answer)
        return Ran(int(code), stdout, stderr)


@contextmanager
def cli_session(env: dict[str, str] | None = None) -> Iterator[CliSession]:
    """A CLI process with ``env`` added to this one's, ended when the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-c", _RUNNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        yield CliSession(process)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
