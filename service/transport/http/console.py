"""The browser console's files (docs/console.md), mounted at ``/console`` on the HTTP port.

The page is static: it calls the HTTP/JSON API of the same origin and nothing else, so this
module serves bytes and knows no engine or store. The built assets are the flat folder
``console_assets`` the package ships (built from ``console/`` with npm and committed), served from
memory as transport/http/static_files.py serves a folder: a name that is none of its files is 404
``CONSOLE_FILE_NOT_FOUND``; ``/console`` redirects to ``/console/``, which is ``index.html``.

Every answer carries ``Content-Security-Policy: default-src 'self'`` (no inline script or
style, no other origin, no framing), ``X-Content-Type-Options: nosniff``,
``Referrer-Policy: no-referrer`` and ``Cache-Control: no-cache`` (an upgraded server's page is
never mixed with an old script).
"""

from __future__ import annotations

from pathlib import Path

from starlette.types import ASGIApp

from mnemosyne.transport.http.paths import CONSOLE_PATH
from mnemosyne.transport.http.static_files import folder_app

ASSETS = Path(__file__).resolve().parents[2] / "console_assets"
PREFIX = CONSOLE_PATH
SECURITY_HEADERS = (
    ("content-security-policy", "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-cache"),
)


def console_app(folder: Path = ASSETS) -> ASGIApp:
    return folder_app(
        folder, PREFIX, headers=SECURITY_HEADERS, what="the console", missing_reason="CONSOLE_FILE_NOT_FOUND"
    )
