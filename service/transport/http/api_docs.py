"""The HTTP/JSON API's reference page, mounted at ``/docs`` on the HTTP port: Swagger UI (npm's
swagger-ui-dist, vendored into the flat folder ``api_docs_assets`` the package ships, built by
``console/build-docs.mjs``) rendering the server's own ``/openapi.json``. Served from memory as
transport/http/static_files.py serves a folder: a name that is none of its files is 404
``DOCS_FILE_NOT_FOUND``; ``/docs`` redirects to ``/docs/``.

Its Content-Security-Policy is its own, the console's kept as strict as it was: Swagger UI draws
its icons from ``data:`` SVG images in its stylesheet, so this page allows ``img-src data:`` and
nothing else beyond the console's (no inline script or style, no other origin: its "try it out"
calls go to this origin only; tests/test_api_docs.py opens the page in Chromium and finds no
violation).
"""

from __future__ import annotations

from pathlib import Path

from starlette.types import ASGIApp

from mnemosyne.transport.http.paths import DOCS_PATH
from mnemosyne.transport.http.static_files import folder_app

ASSETS = Path(__file__).resolve().parents[2] / "api_docs_assets"
POLICY = "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
SECURITY_HEADERS = (
    ("content-security-policy", POLICY),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-cache"),
)


def api_docs_app(folder: Path = ASSETS) -> ASGIApp:
    return folder_app(
        folder, DOCS_PATH, headers=SECURITY_HEADERS, what="the API reference", missing_reason="DOCS_FILE_NOT_FOUND"
    )
