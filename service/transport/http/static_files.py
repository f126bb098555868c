"""A folder of built files served from memory under a path prefix of the HTTP port: the console's
(transport/http/console.py) and the API reference's (transport/http/api_docs.py).

The files are read once, from a flat folder the package ships, and served from memory:

* only a name that is one of those files is answered — a request for anything else (another
  folder, ``..``, an encoded slash, a directory) is 404 with the folder's own reason as
  ``google.rpc.Status`` JSON, never a listing;
* ``PREFIX`` redirects to ``PREFIX/``, which is ``index.html``;
* GET (and HEAD, as every GET of the port: transport/http/methods.py) only (405
  ``METHOD_NOT_ALLOWED`` with ``Allow``);
* every answer carries the folder's headers (its Content-Security-Policy above all).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from mnemosyne.errors import NotFound
from mnemosyne.transport.http.guard import send_error
from mnemosyne.transport.http.methods import method_not_allowed

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}
_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9]+)+")


def load(folder: Path) -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, content type) of each servable file of ``folder`` (flat: no subfolders)."""
    files = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and _NAME.fullmatch(path.name) and path.suffix in CONTENT_TYPES:
            files[path.name] = (path.read_bytes(), CONTENT_TYPES[path.suffix])
    if "index.html" not in files:
        raise FileNotFoundError(f"{folder}/index.html is missing: the built assets are not installed")
    return files


def folder_app(
    folder: Path, prefix: str, *, headers: Sequence[tuple[str, str]], what: str, missing_reason: str
) -> ASGIApp:
    """The files of ``folder`` at ``prefix``/NAME, each answer with ``headers``; ``what`` names
    them in errors ("the console"), ``missing_reason`` is the reason of a name that is none of them."""
    files = load(folder)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        always = list(headers)
        if scope.get("method", "GET") != "GET":  # a HEAD comes as its GET (methods.answering_head)
            error = method_not_allowed(f"{what}'s files", ["GET"])
            await send_error(send, error, [*always, ("allow", error.metadata["allow"])])
            return
        # The raw path: a percent-encoded "/" or "." is never decoded into a path here.
        raw = scope.get("raw_path") or scope["path"].encode()
        path = raw.decode("latin-1").split("?", 1)[0]
        if path == prefix:
            await send_bytes(send, 308, b"", [*always, ("location", prefix + "/")])
            return
        name = path[len(prefix) + 1 :] or "index.html"
        found = files.get(name)
        if found is None:
            missing = NotFound(f"{what} has no file {name[:120]!r}: open {prefix}/", reason=missing_reason)
            await send_error(send, missing, always)
            return
        body, content_type = found
        await send_bytes(send, 200, body, [*always, ("content-type", content_type)])

    return app


async def send_bytes(send: Send, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in [*headers, ("content-length", str(len(body)))]]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
