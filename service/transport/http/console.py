"""The browser console's files (docs/console.md), mounted at ``/console`` on the HTTP port.

The page is static: it calls the HTTP/JSON API of the same origin and nothing else, so this
module serves bytes and knows no engine or store. The built assets are read once, from the flat
folder ``console_assets`` the package ships (built from ``console/`` with npm and committed), and
served from memory:

* only a name that is one of those files is answered — a request for anything else (another
  folder, ``..``, an encoded slash, a directory) is 404 ``CONSOLE_FILE_NOT_FOUND`` as
  ``google.rpc.Status`` JSON, never a listing;
* ``/console`` redirects to ``/console/``, which is ``index.html``;
* GET and HEAD only (405 ``METHOD_NOT_ALLOWED`` with ``Allow``);
* every answer carries ``Content-Security-Policy: default-src 'self'`` (no inline script or
  style, no other origin, no framing), ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: no-referrer`` and ``Cache-Control: no-cache`` (an upgraded server's page is
  never mixed with an old script).
"""

from __future__ import annotations

import re
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from mnemosyne.errors import InvalidArgument, NotFound
from mnemosyne.transport.http.guard import send_error

ASSETS = Path(__file__).resolve().parents[2] / "console_assets"
PREFIX = "/console"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}
SECURITY_HEADERS = (
    ("content-security-policy", "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-cache"),
)
_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9]+)+")


def load(folder: Path = ASSETS) -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, content type) of each servable file of ``folder`` (flat: no subfolders)."""
    files = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and _NAME.fullmatch(path.name) and path.suffix in CONTENT_TYPES:
            files[path.name] = (path.read_bytes(), CONTENT_TYPES[path.suffix])
    if "index.html" not in files:
        raise FileNotFoundError(f"{folder}/index.html is missing: the console's built assets are not installed")
    return files


def console_app(folder: Path = ASSETS) -> ASGIApp:
    files = load(folder)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = list(SECURITY_HEADERS)
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD"):
            error = InvalidArgument(
                f"the console's files take GET, not {method[:16]}",
                reason="METHOD_NOT_ALLOWED",
                metadata={"allow": "GET, HEAD"},
            )
            await send_error(send, error, [*headers, ("allow", "GET, HEAD")])
            return
        # The raw path: a percent-encoded "/" or "." is never decoded into a path here.
        raw = scope.get("raw_path") or scope["path"].encode()
        path = raw.decode("latin-1").split("?", 1)[0]
        if path == PREFIX:
            await _send(send, 308, b"", [*headers, ("location", PREFIX + "/")], head=method == "HEAD")
            return
        name = path[len(PREFIX) + 1 :] or "index.html"
        found = files.get(name)
        if found is None:
            missing = NotFound(
                f"the console has no file {name[:120]!r}: open {PREFIX}/", reason="CONSOLE_FILE_NOT_FOUND"
            )
            await send_error(send, missing, headers)
            return
        body, content_type = found
        await _send(send, 200, body, [*headers, ("content-type", content_type)], head=method == "HEAD")

    return app


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[str, str]], *, head: bool) -> None:
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in [*headers, ("content-length", str(len(body)))]]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": b"" if head else body})
