"""The HTTP port's own pages (transport/http/api_docs.py, home.py): the API reference at /docs/
(Swagger UI vendored from npm, rendering the served /openapi.json) with a policy of its own, the
console's policy unchanged, and the root / pointing to the console, the reference and the health
checks instead of a JSON 404. The reference is opened in a real headless Chromium (Debian's,
driven by Playwright): every operation of the document is drawn, a call made from the page is
answered, nothing is blocked by the policy and nothing is fetched from another origin."""

from __future__ import annotations

import filecmp
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.http_support import request
from tests.support import ServerProcess, module_server

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
ASSETS = ROOT / "service" / "api_docs_assets"
# The console's policy as it was before the reference page came: unchanged by it.
CONSOLE_POLICY = "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, "docs", http=True, metrics=True)


def test_the_reference_is_served_with_a_policy_of_its_own_and_the_console_keeps_its_own(
    server: ServerProcess,
) -> None:
    port = server.http_port
    moved = request(port, "GET", "/docs")
    assert (moved.status, moved.headers["location"]) == (308, "/docs/")
    page = request(port, "GET", "/docs/")
    assert page.status == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.body == (ASSETS / "index.html").read_bytes()
    policy = page.headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'self'" and directives["img-src"] == "'self' data:"
    assert "unsafe" not in policy and "script-src" not in directives and "style-src" not in directives
    assert (page.headers["x-content-type-options"], page.headers["referrer-policy"]) == ("nosniff", "no-referrer")
    bundle = request(port, "GET", "/docs/swagger-ui-bundle.js")
    assert bundle.status == 200 and bundle.headers["content-type"] == "text/javascript; charset=utf-8"
    assert bundle.headers["content-security-policy"] == policy and len(bundle.body) > 1_000_000
    assert request(port, "GET", "/docs/swagger-ui-LICENSE.txt").status == 200  # the licence travels with it
    assert b"<script>" not in page.body  # no inline script
    for path in ("/docs/missing.js", "/docs/../pyproject.toml", "/docs/%2e%2e/console/index.html", "/docs/.map"):
        reply = request(port, "GET", path)
        assert (reply.status, reply.reason) == (404, "DOCS_FILE_NOT_FOUND"), path
    refused = request(port, "POST", "/docs/", json_body={})
    assert (refused.status, refused.reason) == (405, "METHOD_NOT_ALLOWED")
    for path in ("/console/", "/console/console.js", "/console/missing.js"):
        assert request(port, "GET", path).headers["content-security-policy"] == CONSOLE_POLICY, path


def test_the_root_points_to_the_console_the_reference_and_the_health_checks(server: ServerProcess) -> None:
    port = server.http_port
    home = request(port, "GET", "/")
    assert home.status == 200 and home.headers["content-type"] == "text/html; charset=utf-8"
    assert home.headers["content-security-policy"].startswith("default-src 'none'")
    text = home.body.decode()
    for link in ('href="/console/"', 'href="/docs/"', 'href="/openapi.json"', 'href="/v1/ping"'):
        assert link in text, link
    assert f"metrics port ({server.metrics_port})" in text and "/healthz" in text
    assert request(port, "HEAD", "/").body == b""
    assert request(port, "DELETE", "/").reason == "METHOD_NOT_ALLOWED"
    # Only / itself: anything else that is no route is still the API's JSON 404.
    for path in ("//", "/index.html", "/v1/nothing"):
        missing = request(port, "GET", path)
        assert (missing.status, missing.reason, missing.headers["content-type"]) == (
            404,
            "ROUTE_NOT_FOUND",
            "application/json",
        ), path
    # The port's guard still runs first.
    foreign = request(port, "GET", "/", headers={"origin": "http://evil.example"})
    assert (foreign.status, foreign.reason) == (403, "ORIGIN_FORBIDDEN")


def test_the_committed_reference_is_the_build_of_npm_swagger_ui(tmp_path: Path) -> None:
    """console/build-docs.mjs copies swagger-ui-dist (console/node_modules, from scripts/setup's
    `npm ci`) and the page's own files: the committed folder is that, byte for byte."""
    source = ROOT / "console"
    assert (source / "node_modules" / "swagger-ui-dist").is_dir(), "run scripts/setup (npm ci in console/)"
    out = tmp_path / "assets"
    subprocess.run(["node", str(source / "build-docs.mjs"), str(out)], check=True, cwd=source, timeout=120)
    names = sorted(p.name for p in ASSETS.iterdir())
    assert sorted(p.name for p in out.iterdir()) == names
    match, mismatch, errors = filecmp.cmpfiles(ASSETS, out, names, shallow=False)
    assert (mismatch, errors) == ([], []), "rebuild: cd console && npm run build"
    locked = json.loads((source / "package-lock.json").read_text())["packages"]["node_modules/swagger-ui-dist"]
    assert locked["version"] == json.loads((source / "package.json").read_text())["devDependencies"]["swagger-ui-dist"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), "install Debian's chromium (apt-get install -y chromium; scripts/setup names it)"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"], headless=True)
        yield chromium
        chromium.close()


def test_the_reference_draws_every_operation_and_calls_the_api_under_its_policy(
    server: ServerProcess, browser: Any
) -> None:
    document = json.loads(request(server.http_port, "GET", "/openapi.json").body)
    operations = sum(len(methods) for methods in document["paths"].values())
    page = browser.new_page()
    page.set_default_timeout(20_000)
    complaints: list[str] = []
    page.on("console", lambda message: complaints.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: complaints.append(str(error)))
    fetched: list[str] = []
    page.on("request", lambda sent: fetched.append(sent.url))
    try:
        page.goto(f"{server.http_url}/docs/")
        page.wait_for_selector(".opblock")
        assert page.locator(".opblock").count() == operations > 30
        # A call from the page: expand Ping, try it out, execute; the API answers it.
        ping = page.locator(".opblock", has=page.locator('[data-path="/v1/ping"]'))
        ping.locator(".opblock-summary").click()
        ping.locator("button.try-out__btn").click()
        ping.locator("button.execute").click()
        answered = ping.locator(".live-responses-table tbody td.response-col_status")
        answered.wait_for()
        assert answered.inner_text().strip() == "200"
    finally:
        page.close()
    assert not complaints, complaints  # a policy violation is a console error
    origin = server.http_url + "/"
    assert fetched and all(url.startswith(origin) for url in fetched), fetched
    assert f"{server.http_url}/v1/ping" in fetched
