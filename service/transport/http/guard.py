"""What makes the HTTP port safe to open: browsers reach loopback, so a web page a user visits
must not be able to call the API on their machine (DNS rebinding, cross-site requests).

Every request, on every route, before anything else runs:

1. ``Host`` must be given once (RFC 9112 §3.2: more than one, or none in an HTTP/1.1 request, is
   400 HOST_INVALID; an HTTP/1.0 request without one is taken as Host "") and be in the
   allow-list (loopback names by default, plus the bound address and what
   ``--http-allowed-host`` adds; the chart adds the Service's names), else 403 HOST_FORBIDDEN —
   a rebound DNS name carries the attacker's host name. A request whose target is an absolute URL
   (``GET http://name/v1/ping``) is checked by that URL's host, which stands for its Host (RFC 9112
   §3.2.2);
2. an ``Origin`` header must be this server's own origin or one that ``--http-cors-origin`` names,
   else 403 ORIGIN_FORBIDDEN (a tool without a browser sends none);
3. a request with a body that may change state (POST, PUT, PATCH) must say
   ``Content-Type: application/json``, else 415 CONTENT_TYPE_UNSUPPORTED — a cross-site form or
   ``text/plain`` request cannot, without a CORS preflight that step 2 refuses; a ``charset``
   other than UTF-8 is refused the same way (JSON is read as UTF-8 only);
4. a request whose ``Content-Encoding`` is other than ``identity`` is 415
   CONTENT_ENCODING_UNSUPPORTED: no coding is read (a gzip body was "not UTF-8"); one whose
   ``Transfer-Encoding`` names a coding but ``chunked`` (``gzip, chunked``) is 501
   TRANSFER_ENCODING_UNSUPPORTED (RFC 9112 §6.1), for the same reason.

CORS headers are sent only for an origin ``--http-cors-origin`` names, and its preflight
(``OPTIONS``) is answered here. Refusals are ``google.rpc.Status`` JSON like every other error.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mnemosyne.errors import InvalidArgument, MnemosyneError, PermissionDenied
from mnemosyne.transport.errors import http_status, to_status_proto
from mnemosyne.transport.http.mapping import encode

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
ANY_HOST = "*"
# Methods whose body a cross-site page can send without a CORS preflight (a form, text/plain)
# are the ones that must declare JSON; PUT, PATCH and DELETE always need a preflight.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# What a browser page allowed by CORS may send and read.
_CORS_REQUEST_HEADERS = (
    "authorization, content-type, x-request-id, last-event-id, "
    "mnemosyne-global-generation, mnemosyne-workspace-generation, mnemosyne-tenant, mnemosyne-ask-server-time"
)
_CORS_EXPOSED_HEADERS = (
    "x-request-id, retry-after, mnemosyne-global-generation, mnemosyne-workspace-generation, mnemosyne-server-time-us"
)


# A host name as host_name gives it: letters, digits, '-', '_' and '.', or an IPv6 literal in brackets.
_HOST_NAME = re.compile(r"[a-z0-9_.-]+|\[[0-9a-f:.]+\]")


# The scope key under which the HTTP server (server.py) gives the host of a request target that is
# an absolute URL: the ASGI scope holds only its path.
TARGET_HOST = "mnemosyne.target_host"


def target_authority(target: bytes) -> str | None:
    """The host (and port) of a request target in absolute form (``http://name:80/path``), which
    stands for the request's Host (RFC 9112 §3.2.2); None for a target that is a path."""
    if target.startswith(b"/") or b"://" not in target:
        return None
    netloc = urlsplit(target.decode("latin-1")).netloc
    return netloc.rsplit("@", 1)[-1]


def _host(scope: Scope) -> str | InvalidArgument:
    """The host a request is for: its target's if the target is an absolute URL, else its one Host
    header ("" without one, which only HTTP/1.0 may lack); more than one Host header, or none in an
    HTTP/1.1 request, is an error (RFC 9112 §3.2)."""
    given = [value for name, value in scope["headers"] if name == b"host"]
    if len(given) > 1:
        shown = ", ".join(repr(value.decode("latin-1")[:60]) for value in given[:4])
        return InvalidArgument(f"the request has {len(given)} Host headers ({shown}): send one", reason="HOST_INVALID")
    if not given and scope.get("http_version") != "1.0":
        return InvalidArgument(
            f"an HTTP/{scope.get('http_version', '1.1')[:8]} request must have a Host header: send a Host header",
            reason="HOST_INVALID",
        )
    target: str | None = scope.get(TARGET_HOST)
    return target if target is not None else given[0].decode("latin-1") if given else ""


def host_name(host: str) -> str:
    """The name part of a Host header ("[::1]:8080" -> "[::1]", "Example.com:80" -> "example.com"),
    an IPv6 literal in its shortest form ("[FD00:0::5]" -> "[fd00::5]") and in brackets, as a Host
    header carries it, when given without ("fd00::5", an address bound)."""
    host = host.strip().lower()
    if host.startswith("["):
        host = host[: host.find("]") + 1] if "]" in host else host
    elif host.count(":") == 1:
        return host.rsplit(":", 1)[0]
    try:
        return f"[{ipaddress.IPv6Address(host.strip('[]')).compressed}]"
    except ValueError:
        return host


def allowed_host(value: str) -> str:
    """The host a ``--http-allowed-host`` value names, as ``host_name`` gives a Host header's
    ("*": any). CONFIG_INVALID for one no Host header carries: it was taken as written and matched
    nothing, without a word ("http://mem.example" allowed the host "http", "mem.example/" none)."""
    name = ANY_HOST if value.strip() == ANY_HOST else host_name(value)
    if name == ANY_HOST or (_HOST_NAME.fullmatch(name) and not any(c in value for c in "/@?#")):
        return name
    raise _unusable(
        "--http-allowed-host",
        value,
        "a host name: give the name a Host header carries, e.g. mem.example.com "
        "(a port may follow; no scheme, path or space)",
    )


def _unusable(flag: str, value: str, wanted: str) -> InvalidArgument:
    return InvalidArgument(f"{flag} {value[:100]!r} is not {wanted}", reason="CONFIG_INVALID")


def cors_origin(value: str) -> str:
    """The origin a ``--http-cors-origin`` value names, as a browser sends it in ``Origin``
    (scheme and host in lower case, no path). CONFIG_INVALID for one no browser sends: it matched
    no request, without a word ("console.example.com" without its scheme, "https://x/app")."""
    text = value.strip().rstrip("/")
    try:
        parts = urlsplit(text)
        port_valid = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_valid = urlsplit(""), False
    extra = parts.path or parts.query or parts.fragment or "@" in parts.netloc or "#" in text or "?" in text
    if parts.scheme not in ("http", "https") or not parts.hostname or extra or not port_valid:
        raise _unusable(
            "--http-cors-origin",
            value,
            "a web origin: give SCHEME://HOST[:PORT] as a browser sends it in "
            "Origin, e.g. https://console.example.com (http or https, no path)",
        )
    default = {"http": 80, "https": 443}[parts.scheme] == parts.port  # a browser leaves it out
    return f"{parts.scheme}://{parts.netloc.lower().rsplit(':', 1)[0] if default else parts.netloc.lower()}"


async def send_error(send: Send, error: MnemosyneError, headers: Iterable[tuple[str, str]] = ()) -> None:
    """Answer with ``error`` as google.rpc.Status JSON and its HTTP status."""
    status = to_status_proto(error)
    body = encode(status)
    raw = _raw([("content-type", "application/json"), ("content-length", str(len(body))), *headers])
    await send({"type": "http.response.start", "status": http_status(status, error.reason), "headers": raw})
    await send({"type": "http.response.body", "body": body})


class Guard:
    def __init__(self, app: ASGIApp, *, allowed_hosts: Iterable[str], cors_origins: Iterable[str]) -> None:
        self._app = app
        hosts = {allowed_host(h) for h in allowed_hosts}
        self._any_host = ANY_HOST in hosts
        self._hosts = frozenset(hosts | LOOPBACK_NAMES)
        self._cors = frozenset(cors_origin(origin) for origin in cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan is off; there are no websockets
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = _host(scope)
        if isinstance(host, InvalidArgument):
            await send_error(send, host)
            return
        if not self._any_host and host_name(host) not in self._hosts:
            named_by = "the request's target URL names host" if TARGET_HOST in scope else "Host"
            await send_error(
                send,
                PermissionDenied(
                    f"{named_by} {host[:100]!r} is not one this server answers to: add it with --http-allowed-host",
                    reason="HOST_FORBIDDEN",
                ),
            )
            return
        origin = headers.get("origin")
        cors = origin is not None and origin in self._cors
        if origin is not None and not cors and origin != f"{scope['scheme']}://{host}":
            await send_error(
                send,
                PermissionDenied(
                    f"requests from the web origin {origin[:100]!r} are refused: name it with --http-cors-origin "
                    "to allow a page there to call this server",
                    reason="ORIGIN_FORBIDDEN",
                ),
            )
            return
        if cors and scope["method"] == "OPTIONS":
            await self._preflight(send, origin or "")
            return
        unreadable = _unreadable_body(scope["method"], headers)
        if unreadable is not None:
            await send_error(send, unreadable, _cors_headers(origin or "") if cors else ())
            return
        if not cors:
            await self._app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_raw(_cors_headers(origin or ""))]}
            await send(message)

        await self._app(scope, receive, send_with_cors)

    @staticmethod
    async def _preflight(send: Send, origin: str) -> None:
        headers = [
            *_cors_headers(origin),
            ("access-control-allow-methods", "GET, POST"),
            ("access-control-allow-headers", _CORS_REQUEST_HEADERS),
            ("access-control-max-age", "600"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": _raw(headers)})
        await send({"type": "http.response.body", "body": b""})


def _unreadable_body(method: str, headers: Headers) -> InvalidArgument | None:
    """Why a request's body is not one this port reads (step 3 and 4), or None."""
    media_type, _, parameters = headers.get("content-type", "").partition(";")
    media_type = media_type.strip().lower()
    if method in _BODY_METHODS and media_type != "application/json":
        return InvalidArgument(
            f"a {method[:16]} request must have Content-Type: application/json (this one has {media_type[:60]!r})",
            reason="CONTENT_TYPE_UNSUPPORTED",
        )
    charset = _charset(parameters)
    if method in _BODY_METHODS and charset not in (None, "utf-8", "utf8"):
        # JSON is UTF-8 (RFC 8259 §8.1): a body said to be latin-1 was read as UTF-8, its bytes
        # taken for other characters than the client meant, or refused as "not UTF-8".
        return InvalidArgument(
            f"the body's charset is {charset[:40]!r}: JSON is read as UTF-8 only; encode the body as UTF-8 "
            "and send Content-Type: application/json (or charset=utf-8)",
            reason="CONTENT_TYPE_UNSUPPORTED",
        )
    coding = headers.get("content-encoding", "identity").strip().lower()
    if coding != "identity":  # read as it came: a gzip body was "not UTF-8", a mislabelled one taken
        return InvalidArgument(
            f"the body's Content-Encoding is {coding[:40]!r}: this server reads no content coding; "
            "send the body uncompressed, without Content-Encoding",
            reason="CONTENT_ENCODING_UNSUPPORTED",
        )
    codings = [c.partition(";")[0].strip().lower() for v in headers.getlist("transfer-encoding") for c in v.split(",")]
    if any(c not in ("", "chunked") for c in codings):  # the parser reads the chunks, what they hold taken as it is
        return InvalidArgument(
            f"the body's Transfer-Encoding is {', '.join(codings)[:60]!r}: this server reads no transfer coding but "
            "chunked; send the body uncompressed, chunked or with a Content-Length",
            reason="TRANSFER_ENCODING_UNSUPPORTED",
        )
    return None


def _charset(parameters: str) -> str | None:
    """The ``charset`` parameter of a media type's ``parameters`` (lower case, unquoted), or None."""
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return None


def _cors_headers(origin: str) -> list[tuple[str, str]]:
    return [
        ("access-control-allow-origin", origin),
        ("access-control-expose-headers", _CORS_EXPOSED_HEADERS),
        ("vary", "Origin"),
    ]


def _raw(headers: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
