"""Reading a file a person named (a flag's, an ``@FILE``'s): only a regular file is read.

A FIFO with no writer (or a terminal) would make the read wait for ever, a device such as
/dev/zero never end it; the command or server would hang before saying a word. Such a file is
refused at once with an ``OSError`` naming what it is, which the callers report as they report a
file that cannot be read."""

from __future__ import annotations

import errno
import os
import stat


def read_named_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the regular file at ``path``; an ``OSError`` for anything else (a directory:
    ``IsADirectoryError``; a FIFO, a device, a socket: strerror says which)."""
    # O_NONBLOCK: opening a FIFO without a writer does not wait.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"it is {kind_of(mode)}, not a regular file", os.fspath(path))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as file:
            fd = -1  # the file object closes it
            return file.read()
    finally:
        if fd >= 0:
            os.close(fd)


def kind_of(mode: int) -> str:
    """What a file of ``mode`` (its ``st_mode``) is, in a refusal's words: "a FIFO", "a socket",
    "a device", "a directory", else "a file" (/dev/null given for a directory was "a file")."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a file"
