"""The progress of a long command (backup, restore, export, import, rebalance, drill) on stderr,
made for where stderr goes:

* a terminal: a tqdm bar (steps done, or bytes moved, with the rate and what is left when the
  total is known), each step's line written above it as the step ends;
* a pipe or a file: one plain line per step (``backup: acme: copied (...)``), nothing else — no
  bar, no carriage return — so a log keeps what happened and a script can read it line by line.

A command whose report already says each step on stdout (rebalance's moves, drill's verdicts)
passes ``echo=False`` and writes its report through ``report``: its lines stay on stdout, and a
terminal gets the bar besides, below them.
"""

from __future__ import annotations

import io
import shutil
import sys
from types import TracebackType
from typing import Never, TextIO

from tqdm import tqdm


class Progress:
    """What ``command`` has done so far. ``total``: the steps (or bytes, with ``unit="B"``) it will
    take when known; ``stream``: stderr unless given. Call it with a step's line when a step ends;
    ``advance`` moves the bar without a line (bytes sent); ``close`` (or the ``with`` block) ends it."""

    def __init__(
        self,
        command: str,
        *,
        total: float | None = None,
        unit: str = "step",
        echo: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        self.command = command
        self.stream = stream or sys.stderr
        self.echo = echo
        self.counts_steps = unit != "B"
        self._bar: tqdm[Never] | None = None  # a bar over no iterable: updated by hand
        if self.stream.isatty():
            size = shutil.get_terminal_size()
            self._bar = tqdm(
                total=total,
                desc=command,
                unit=unit,
                unit_scale=unit == "B",
                unit_divisor=1024 if unit == "B" else 1000,
                file=self.stream,
                # The terminal's size, 80x24 when it tells none (tqdm draws nothing on a screen
                # of 0 columns or 0 rows).
                ncols=size.columns,
                nrows=size.lines,
                leave=True,
            )

    @classmethod
    def silent(cls, command: str) -> Progress:
        """One that says nothing anywhere (a caller that asked for no progress)."""
        return cls(command, echo=False, stream=io.StringIO())

    @property
    def on_terminal(self) -> bool:
        return self._bar is not None

    def set_total(self, total: float) -> None:
        """The total, once the command learns it (an export's bytes, from its manifest), counted
        from nothing (an export copied again starts over)."""
        if self._bar is not None:
            self._bar.reset(total=total)

    def __call__(self, line: str) -> None:
        """A step ended: ``line`` says which (a step of a command that counts steps moves its bar)."""
        if self._bar is not None:
            if self.echo:
                self._bar.write(f"{self.command}: {line}", file=self.stream)
            else:  # no line above the bar: the last step beside it
                self._bar.set_postfix_str(line[:40], refresh=False)
            self._bar.update(1 if self.counts_steps else 0)
        elif self.echo:
            print(f"{self.command}: {line}", file=self.stream, flush=True)

    def report(self, line: str, file: TextIO) -> None:
        """A line of the command's own report (on ``file``, stdout): above the bar on a terminal."""
        if self._bar is not None:
            self._bar.write(line, file=file)
            file.flush()
        else:
            print(line, file=file, flush=True)

    def advance(self, amount: float) -> None:
        """``amount`` more done (bytes moved), no line."""
        if self._bar is not None:
            self._bar.update(amount)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
