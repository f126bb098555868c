"""The bound on a client that takes none of its answer while more waits to be sent, the same on
both ports: the HTTP port drops such a connection (transport/http/server.py), the gRPC port ends
such a stream (transport/grpc/handlers.py). Unbounded, a client that stopped reading (a watch's
reader gone still, an export opened and never read) held its stream's place in
``--streams-per-tenant`` for good, and an export or a backup its scratch copy of the tenant too
(two exports of a tenant at most: its later exports refused for good)."""

from __future__ import annotations

import logging

from mnemosyne.errors import Unavailable
from mnemosyne.runtime.seams import Seams

log = logging.getLogger("mnemosyne.rpc")

# nginx's send_timeout is a minute. A client reading slowly takes some of its answer within it.
SEND_STALL_SECONDS = 30.0
# What a client told its stream ended waits before calling again.
RETRY_SECONDS = 1.0


def send_stall_seconds(seams: Seams) -> float:
    """The bound: SEND_STALL_SECONDS, or a test's (``MNEMOSYNE_TEST_SEND_STALL_SECONDS``)."""
    return seams.send_stall_seconds or SEND_STALL_SECONDS


class StreamNotRead(Unavailable):
    """A stream ended because its client took none of it (``not_read``)."""


def not_read(method: str, tenant: str, seconds: float) -> StreamNotRead:
    """A stream ended because its client took none of it for ``seconds``: logged once, and the
    status its client gets should it read on (after what was sent before)."""
    log.warning(
        "%s%s: its client took none of the stream for %g s; the stream is ended and what it held freed",
        method.rsplit("/", 1)[-1],
        f" of tenant {tenant}" if tenant else "",
        seconds,
    )
    return StreamNotRead(
        f"the stream was ended: its client took none of it for {seconds:g} s while more waited to be "
        "sent; read a stream as it comes, and call again",
        reason="STREAM_NOT_READ",
        retry_after_seconds=RETRY_SECONDS,
    )
