"""One delivery attempt: a signed POST to a subscription's URL, within a deadline.

* The URL is read by urls.py ``parse``, as CreateWebhook read it when it accepted it: one that
  cannot be sent fails the attempt saying why, and no part of it (a port) is guessed.
* The host is resolved here and every address it resolves to is judged (addresses.py) before
  any connection; the connection goes to a judged address, so a name cannot be re-resolved
  elsewhere in between (DNS rebinding). A name with any refused address is refused whole.
* The whole attempt (connect, TLS, request, the answer's status line and headers) ends at its
  deadline: a watchdog shuts the socket down then, so a receiver that answers slowly, or a byte
  at a time, holds the worker no longer than the timeout.
* Redirects are not followed: a 3xx is a failed attempt (a receiver cannot send the delivery on
  to an address that was never judged).
* Signed per the Standard Webhooks specification: ``webhook-id`` (the delivery's, the same on
  every attempt), ``webhook-timestamp`` (this attempt's, in seconds), ``webhook-signature``: a
  ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` per active secret, space-separated, so a
  receiver holding either secret of a rotation verifies it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from mnemosyne.engine.webhooks.addresses import RefusedAddress, resolve
from mnemosyne.engine.webhooks.urls import UnusableURL, parse
from mnemosyne.version import VERSION

SECRET_PREFIX = "whsec_"
# Of the answer, only the status matters; a body is read up to this much so the connection closes cleanly.
_ANSWER_BYTES = 4096


@dataclass(frozen=True)
class Attempt:
    """How an attempt ended: delivered (a 2xx), or the error to log."""

    status_code: int  # 0: no HTTP answer
    error: str  # "" when delivered

    @property
    def delivered(self) -> bool:
        return not self.error


def secret_key(secret: str) -> bytes:
    """The key of a ``whsec_<base64>`` secret."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX) + "==")


def signature(secrets: Sequence[str], delivery_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header: one ``v1,`` signature per secret."""
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(secret_key(s), signed, hashlib.sha256).digest()).decode() for s in secrets
    )


def _connect(host: str, port: int, deadline: float, *, allow_private: bool) -> socket.socket:
    last: OSError | None = None
    for family, ip in resolve(host, port, allow_private=allow_private):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            sock.connect((str(ip), port))
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last or OSError(f"{host} has no address")


def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout: float,
    allow_private: bool,
) -> Attempt:
    """POST ``body`` to ``url`` within ``timeout`` seconds; never raises for what the network or
    the receiver did."""
    deadline = time.monotonic() + timeout
    try:
        # The same reading CreateWebhook refused by; a subscription made before it learnt a
        # refusal fails here, saying why, and never goes to a port or host it did not name.
        target = parse(url)
    except UnusableURL as exc:
        return Attempt(0, f"the url cannot be delivered to: {exc}")
    host, port, path = target.host, target.port, target.path
    sock: socket.socket | None = None
    watchdog: threading.Timer | None = None
    try:
        sock = _connect(host, port, deadline, allow_private=allow_private)
        if target.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), _shut, (sock,))
        watchdog.daemon = True
        watchdog.start()
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
        connection.sock = sock  # already connected to the judged address: http.client never resolves
        connection.request(
            "POST",
            path,
            body=body,
            headers={
                **headers,
                "content-type": "application/json",
                "user-agent": f"mnemosyne-webhooks/{VERSION}",
                "connection": "close",
            },
        )
        answer = connection.getresponse()
        answer.read(_ANSWER_BYTES)
        if time.monotonic() > deadline:
            return Attempt(answer.status, f"no answer within {timeout:g} s")
        if 200 <= answer.status < 300:
            return Attempt(answer.status, "")
        if 300 <= answer.status < 400:
            return Attempt(answer.status, f"HTTP {answer.status}: redirects are not followed")
        return Attempt(answer.status, f"HTTP {answer.status}")
    except RefusedAddress as exc:
        return Attempt(0, str(exc))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if time.monotonic() >= deadline:
            return Attempt(0, f"no answer within {timeout:g} s")
        return Attempt(0, f"{type(exc).__name__}: {exc}"[:500])
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if sock is not None:
            sock.close()


def _shut(sock: socket.socket) -> None:
    """The deadline passed: whatever the attempt waits for returns at once."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
