"""The browser console (docs/console.md): its files as the server serves them, its build, and the
page itself in a real headless Chromium (Debian's, driven by Playwright) against a real server
with tokens. One server and one browser for the module; each test opens its own browser context
(its own tabs and session storage).

Every view on a deterministic fixture (tests/console_views.py) passes axe-core, is walked by the
keyboard and compared with its accessibility-tree snapshot (tests/console_snapshots/, rewritten
with ``MNEMOSYNE_UPDATE_SNAPSHOTS=1``); docs/console-*.png come from the same fixture
(``scripts/console-screenshots``), never from these tests, which compare no pixels.
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemosyne.client import MemoryClient, RecordChange, ThreadRef
from tests import console_views
from tests.http_support import request
from tests.support import ServerProcess, tokens_json

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
ADMIN = "admin-console-token"
USER = "acme-console-token"
USER_TENANT = "acme"
UPDATE_SNAPSHOTS = os.environ.get("MNEMOSYNE_UPDATE_SNAPSHOTS") == "1"
SNAPSHOTS = ROOT / "tests" / "console_snapshots"
AXE = ROOT / "console" / "node_modules" / "axe-core" / "axe.min.js"
WAIT_MS = 15_000
POISON = "POISON-7f3a"
# What docs/console.md tells to add to `chromium --headless --screenshot`: the capture waits
# until the page's requests are answered (virtual time), not just for the page's load event.
HEADLESS_FLAGS = ("--headless", "--disable-gpu", "--virtual-time-budget=10000")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("console") / "data",
        http=True,
        # POISON: the extractor fails on a text with the marker (a failed event for the events view).
        env={
            "MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"], USER: [USER_TENANT]}),
            "MNEMOSYNE_TEST_POISON_MARKER": POISON,
        },
    )
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> Iterator[MemoryClient]:
    with MemoryClient(server.target, token=ADMIN) as client:
        yield client


def _tenant() -> str:
    return f"c{uuid.uuid4().hex[:10]}"


# -- the files ------------------------------------------------------------------------------------


def test_the_console_is_served_with_a_strict_policy_and_nothing_else(server: ServerProcess) -> None:
    port = server.http_port
    moved = request(port, "GET", "/console")
    assert (moved.status, moved.headers["location"]) == (308, "/console/")
    page = request(port, "GET", "/console/")
    assert page.status == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.body == (ROOT / "service" / "console_assets" / "index.html").read_bytes()
    policy = page.headers["content-security-policy"]
    assert policy.startswith("default-src 'self'") and "unsafe" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert b"<script>" not in page.body and b" on" not in page.body.lower().replace(b" one", b"")  # no inline script
    script = request(port, "GET", "/console/console.js")
    assert script.status == 200 and script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert script.headers["content-security-policy"] == policy
    assert request(port, "GET", "/console/console.css").headers["content-type"] == "text/css; charset=utf-8"
    assert request(port, "HEAD", "/console/console.js").body == b""
    # No other file, no listing, no way out of the folder, however the path is spelled.
    for path in (
        "/console/missing.js",
        "/console/../pyproject.toml",
        "/console/%2e%2e/pyproject.toml",
        "/console/..%2f..%2fpyproject.toml",
        "/console/%2e%2e%2f__init__.py",
        "/console/console_assets/index.html",
        "/console//etc/passwd",
        "/console/./index.html",
        "/console/index.html/",
        "/console/.",
        "/console/..",
        "/console/%00index.html",
    ):
        reply = request(port, "GET", path)
        assert (reply.status, reply.reason) == (404, "CONSOLE_FILE_NOT_FOUND"), path
        assert reply.headers["content-type"] == "application/json", path
        assert reply.headers["x-content-type-options"] == "nosniff", path
    refused = request(port, "POST", "/console/", json_body={})
    assert (refused.status, refused.reason, refused.headers["allow"]) == (405, "METHOD_NOT_ALLOWED", "GET, HEAD")
    # The port's guard still runs first: a foreign origin is refused before the console answers.
    foreign = request(port, "GET", "/console/", headers={"origin": "http://evil.example"})
    assert (foreign.status, foreign.reason) == (403, "ORIGIN_FORBIDDEN")


def test_the_committed_assets_are_the_build_of_the_source(tmp_path: Path) -> None:
    """npm's TypeScript (console/node_modules, from scripts/setup) rebuilds the committed files
    byte for byte."""
    source = ROOT / "console"
    tsc = source / "node_modules" / "typescript" / "bin" / "tsc"
    assert tsc.is_file(), "run scripts/setup (it runs `npm ci` in console/)"
    out = tmp_path / "assets"
    subprocess.run(["node", str(source / "build.mjs"), str(out)], check=True, cwd=source, timeout=120)
    committed = ROOT / "service" / "console_assets"
    names = sorted(p.name for p in committed.iterdir())
    assert sorted(p.name for p in out.iterdir()) == names
    match, mismatch, errors = filecmp.cmpfiles(committed, out, names, shallow=False)
    assert (mismatch, errors) == ([], []), "rebuild: cd console && npm run build"


def test_the_three_way_merge_keeps_what_does_not_overlap() -> None:
    """console/tests/merge.test.mjs under node's test runner: the merge of src/merge.ts keeps
    both sides' changes where they do not overlap and asks about each overlap."""
    run = subprocess.run(
        ["node", "--test", "tests/"], cwd=ROOT / "console", capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"^# pass [1-9]", run.stdout, re.M) and re.search(r"^# fail 0$", run.stdout, re.M)


def test_the_wheel_ships_the_assets(tmp_path: Path) -> None:
    """The package built from a copy of the sources holds every built file, so a server installed
    from it serves the console and the API reference without Node."""
    tree = tmp_path / "src"
    skip = shutil.ignore_patterns("node_modules", "__pycache__", "build", "*.egg-info")
    for name in ("service", "client", "protos", "build_support"):  # build_support: the build backend
        shutil.copytree(ROOT / name, tree / name, ignore=skip)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(tree),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    for folder in ("console_assets", "api_docs_assets"):  # the console's and the API reference's
        shipped = {n.removeprefix(f"mnemosyne/{folder}/") for n in names if n.startswith(f"mnemosyne/{folder}/")}
        assert shipped == {p.name for p in (ROOT / "service" / folder).iterdir()}, folder


def test_whoami_names_the_token_and_its_tenants_and_scopes_list_the_records(server: ServerProcess) -> None:
    with MemoryClient(server.target, token=USER) as user, MemoryClient(server.target, token=ADMIN) as admin:
        me = user.whoami()
        assert (me.name, me.tenants, me.admin) == ("tok1", [USER_TENANT], False)
        boss = admin.whoami()
        assert (boss.name, boss.tenants, boss.admin) == ("tok0", [], True)
        tenant = _tenant()
        assert [(s.scope, s.generation, s.records) for s in admin.list_scopes(tenant)] == [("global", 0, 0)]
        admin.edit_records(tenant, "workspace/b", [RecordChange("put", "x.md", "x")], 0)
        admin.edit_records(tenant, "workspace/a", [RecordChange("put", "y.md", "y"), RecordChange("put", "z", "z")], 0)
        admin.update_global(tenant, "# Memory", 0)
        assert [(s.scope, s.generation, s.records) for s in admin.list_scopes(tenant)] == [
            ("global", 1, 1),
            ("workspace/a", 1, 2),
            ("workspace/b", 1, 1),
        ]


# -- the page in a browser ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), "install Debian's chromium (apt-get install -y chromium; scripts/setup names it)"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"], headless=True)
        yield chromium
        chromium.close()


class Tab:
    """A browser tab on the console, recording every dialog and console error it sees."""

    def __init__(self, context: Any, server: ServerProcess) -> None:
        self.page = context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.server = server
        self.dialogs: list[str] = []
        self.requests: list[str] = []

        def on_dialog(dialog: Any) -> None:
            self.dialogs.append(dialog.message)
            dialog.dismiss()

        self.page.on("dialog", on_dialog)
        self.page.on("request", lambda sent: self.requests.append(sent.url))

    def open(self, query: str = "") -> Any:
        self.page.goto(f"{self.server.http_url}/console/{query}")
        return self.page


@pytest.fixture
def tabs(browser: Any, server: ServerProcess) -> Iterator[Callable[..., Tab]]:
    """New tabs in one fresh browser context; ``signed_in`` puts the token in the tab's session
    storage, as the sign-in form does."""
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    opened: list[Tab] = []

    def tab(signed_in: str | None = ADMIN) -> Tab:
        t = Tab(context, server)
        if signed_in:
            t.page.add_init_script(f"sessionStorage.setItem('mnemosyne-console-token', {signed_in!r})")
        opened.append(t)
        return t

    yield tab
    for t in opened:
        origin = t.server.http_url
        assert all(u.startswith(origin + "/") for u in t.requests), "a request left the server's origin"
    context.close()


def _texts(page: Any, selector: str) -> list[str]:
    return [str(t) for t in page.locator(selector).all_text_contents()]


def test_a_retained_memory_appears_newest_first_and_search_finds_it(
    tabs: Callable[..., Tab], admin: MemoryClient
) -> None:
    tenant = _tenant()
    admin.retain(tenant, "The office plants are watered on Fridays")
    admin.retain(tenant, "Ada's night train to Lyon leaves at 22:40 from platform 9")
    tab = tabs()
    page = tab.open(f"?tenant={tenant}")
    page.locator("#memory-list .memory").first.wait_for()
    assert _texts(page, "#memory-list .memory .text") == [
        "Ada's night train to Lyon leaves at 22:40 from platform 9",
        "The office plants are watered on Fridays",
    ]
    page.fill("#search-query", "when does the train to Lyon leave")
    page.press("#search-query", "Enter")
    page.locator("#search-results .memory").first.wait_for()
    first = page.locator("#search-results .memory").first
    assert first.locator(".text").text_content() == "Ada's night train to Lyon leaves at 22:40 from platform 9"
    assert re.fullmatch(r"score \d\.\d{3}", first.locator(".score").text_content() or "")


def test_search_folds_weaker_matches_marks_the_words_and_filters(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    tenant = _tenant()
    console_views.retain_trip(admin, tenant)
    hits = admin.recall(tenant, "train to Lyon", k=50)
    best = hits[0].score
    strong = [h.memory.text for h in hits if h.score >= best / 2]
    weak = [h.memory.text for h in hits if h.score < best / 2]
    assert strong and weak, "the fixture needs hits on both sides of the floor"
    tab = tabs()
    page = tab.open(f"?tenant={tenant}")
    page.fill("#search-query", "train to Lyon")
    page.press("#search-query", "Enter")
    page.locator("#search-results .memory").first.wait_for()
    assert _texts(page, "#search-results .memory .text") == strong
    assert page.locator("#show-weaker").text_content() == f"{len(weak)} weaker match{'es' if len(weak) > 1 else ''}"
    # Only the query's words are marked (not "to"), each in its own <mark>, the text unchanged.
    first = page.locator("#search-results .memory").first
    assert {m.lower() for m in _texts(first, "mark")} == {"train", "lyon"}
    # Speaker, thread, metadata and both times are on the card.
    ada = page.locator("#search-results .memory", has_text="night train")
    assert ada.locator("button.chip", has_text="said by ada").count() == 1
    assert ada.locator("button.chip", has_text="thread trip-42 #1").count() == 1
    assert ada.locator("button.chip", has_text="topic=travel").count() == 1
    assert ada.locator("time").first.get_attribute("datetime") == "2026-03-02T08:00:00Z"
    page.click("#show-weaker")
    page.locator("#weaker-matches .memory").first.wait_for()
    assert _texts(page, "#weaker-matches .memory .text") == weak
    # The memory opened shows beside the cards, and the layout uses the window's width.
    ada.locator("button.link").first.click()
    page.locator("#memory-heading").wait_for()
    cards, detail = page.locator(".cards").bounding_box(), page.locator("#memory-detail").bounding_box()
    assert cards and detail and detail["x"] >= cards["x"] + cards["width"] and abs(detail["y"] - cards["y"]) < 5
    assert page.locator("main").bounding_box()["width"] >= 1100 - 20
    page.click("#show-thread")
    page.locator("#memory-thread li").nth(2).wait_for()
    assert _texts(page, "#memory-thread li") == [
        "ada: Ada's night train to Lyon leaves at 22:40 from platform 9",
        "bob: The train to Lyon was delayed by an hour",
        "ada: Ada booked the hotel by the Lyon station for two nights",
    ]
    # A speaker's chip narrows the hits to that speaker; metadata narrows them on the server.
    ada.locator("button.chip", has_text="said by ada").click()
    page.locator("#filter-speaker[value=ada]").wait_for()
    page.locator("#search-results .memory", has_text="delayed").wait_for(state="detached")
    assert set(_texts(page, "#search-results .memory .text")) == {
        "Ada's night train to Lyon leaves at 22:40 from platform 9",
        "Ada booked the hotel by the Lyon station for two nights",
    }
    page.click("#clear-filters")
    page.fill("#filter-metadata", "topic=office")
    page.press("#filter-metadata", "Enter")
    page.locator("#search-results .memory", has_text="night train").wait_for(state="detached")
    assert _texts(page, "#search-results .memory .text") == ["Lyon's office opens at nine"]
    assert page.evaluate("document.activeElement.id") == "filter-metadata"  # the keyboard stays there
    assert page.locator("#weaker-matches .memory, #show-weaker").count() == 0
    # Times: only what happened from March 4 on (one retained without a time: the day it was).
    page.click("#clear-filters")
    page.fill("#filter-from", "2026-03-04")
    page.locator("#filter-from").dispatch_event("change")
    # This filter's own answer: the clear's unfiltered answer, if it was drawn before the date was
    # set, shows "booked the hotel" too (with "delayed"), so wait for both sides of the filter at once
    # (a search started later drops an earlier one's answer: nothing redraws after it).
    page.wait_for_function(
        """() => {
            const texts = [...document.querySelectorAll('#search-results .memory .text')].map((e) => e.textContent);
            return texts.some((t) => t.includes('booked the hotel')) && !texts.some((t) => t.includes('delayed'));
        }"""
    )
    texts = _texts(page, "#search-results .memory .text")
    assert "The train to Lyon was delayed by an hour" not in texts
    assert "Ada booked the hotel by the Lyon station for two nights" in texts


def test_the_memory_list_pages_from_the_newest_to_the_oldest(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    tenant = _tenant()
    admin.retain_batch(tenant, [f"numbered note {n:02d}" for n in range(25)])  # two pages of twenty
    page = tabs().open(f"?tenant={tenant}")
    page.locator("#memory-list .memory").first.wait_for()
    first_page = _texts(page, "#memory-list .memory .text")
    assert first_page == [f"numbered note {n:02d}" for n in range(24, 4, -1)]
    page.click("#older-memories")
    page.locator("#memory-list .memory .text", has_text="numbered note 00").wait_for()
    assert _texts(page, "#memory-list .memory .text") == [f"numbered note {n:02d}" for n in range(4, -1, -1)]
    assert page.locator("#older-memories").count() == 0
    page.click("#newer-memories")
    page.locator("#memory-list .memory .text", has_text="numbered note 24").wait_for()
    assert _texts(page, "#memory-list .memory .text") == first_page


def test_a_fast_write_appears_live_and_turns_succeeded(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    tenant = _tenant()
    admin.hot_path(tenant, "enable")
    tab = tabs()
    page = tab.open(f"?tenant={tenant}&view=events")
    page.locator("#watch-state", has_text="live").wait_for()
    # Statuses the row showed, recorded by the page itself as they change (no reload).
    page.evaluate(
        """() => { window.seen = [];
        new MutationObserver(() => document.querySelectorAll('#events tr').forEach(
          r => { const s = r.dataset.status; if (window.seen[window.seen.length - 1] !== s) window.seen.push(s); }))
        .observe(document.querySelector('#events'), {childList: true, subtree: true}); }"""
    )
    written = admin.retain(tenant, "a fast note: the standup moved to 09:15", fast=True)
    assert written.status == "enqueued"
    row = page.locator(f'#events tr[data-event-id="{written.event_id}"]')
    row.and_(page.locator('[data-status="SUCCEEDED"]')).wait_for()
    assert row.locator("td").nth(1).text_content() == "succeeded"
    seen = page.evaluate("window.seen")
    assert seen[-1] == "SUCCEEDED" and set(seen) <= {"PENDING", "RUNNING", "SUCCEEDED"}
    # A write the extractor fails on turns failed, with its reason.
    poisoned = admin.retain(tenant, f"a fast note the model chokes on {POISON}", fast=True)
    failed = page.locator(f'#events tr[data-event-id="{poisoned.event_id}"]')
    failed.and_(page.locator('[data-status="FAILED"]')).wait_for()
    reason = admin.get_event(tenant, poisoned.event_id).error_reason
    assert reason and (failed.locator("td").nth(5).text_content() or "").startswith(f"{reason}: ")
    # The status filter hides what is not asked for.
    page.select_option("#event-status", "FAILED")
    assert row.is_hidden() and failed.is_visible()
    page.select_option("#event-status", "SUCCEEDED")
    assert row.is_visible() and failed.is_hidden()
    page.select_option("#event-status", "")
    assert row.is_visible() and failed.is_visible()


def _open_global_record(page: Any) -> None:
    page.locator('[data-scope="global"]').click()
    page.locator('[data-key="MEMORY.md"]').click()
    page.locator("#record-content").wait_for()


BASE_RECORD = "# Memory\n- one\n- two\n- three\n- four\n- five"


def _stored(admin: MemoryClient, tenant: str) -> tuple[str, int]:
    record, generation = admin.get_record(tenant, "global", "MEMORY.md")
    return record.content, generation


def test_a_conflicting_save_merges_both_sides_and_a_stale_merge_is_refused(
    tabs: Callable[..., Tab], admin: MemoryClient
) -> None:
    """Two tabs edit different lines: the second's save meets the first's generation, writes
    nothing, and shows base, theirs and mine; the merge keeps the first tab's line and the
    second's. A merge saved after a third writer moved on is refused again (never applied), then
    merged once more with the third writer's change kept too."""
    tenant = _tenant()
    admin.update_global(tenant, BASE_RECORD, 0)
    first, second = tabs(), tabs()
    for tab in (first, second):
        _open_global_record(tab.open(f"?tenant={tenant}&view=records"))
    first.page.fill("#record-content", BASE_RECORD.replace("- two", "- two, from the first tab"))
    first.page.click("#save")
    first.page.locator("#saved").wait_for()
    mine = BASE_RECORD.replace("- four", "- four, from the second tab")
    second.page.fill("#record-content", mine)
    second.page.click("#save")
    second.page.locator("#conflict").wait_for()
    assert _stored(admin, tenant) == (BASE_RECORD.replace("- two", "- two, from the first tab"), 2)
    page = second.page
    assert page.locator("#base").text_content() == BASE_RECORD.replace("\n", "")
    assert _texts(page, "#theirs ins") == ["- two, from the first tab"]
    assert _texts(page, "#theirs del") == ["- two"]
    assert _texts(page, "#yours ins") == ["- four, from the second tab"]
    assert "do not overlap" in (page.locator("#merge-summary").text_content() or "")
    both = BASE_RECORD.replace("- two", "- two, from the first tab").replace("- four", "- four, from the second tab")
    assert page.locator("#merged").text_content() == both
    # A third writer saves before the merge is: the merge is stale, refused, and nothing changes.
    third = BASE_RECORD.replace("- two", "- two, from the first tab").replace("- five", "- five, from an agent")
    admin.update_global(tenant, third, 2)
    page.click("#save-merge")
    page.locator("#conflict", has_text="Not saved").wait_for()
    assert _stored(admin, tenant) == (third, 3)
    assert page.locator("#base").text_content() == BASE_RECORD.replace("- two", "- two, from the first tab").replace(
        "\n", ""
    )
    everything = both.replace("- five", "- five, from an agent")
    assert page.locator("#merged").text_content() == everything
    page.click("#save-merge")
    page.locator("#saved").wait_for()
    assert _stored(admin, tenant) == (everything, 4)


def test_an_overlap_asks_and_overwriting_theirs_needs_its_confirmation(
    tabs: Callable[..., Tab], admin: MemoryClient
) -> None:
    tenant = _tenant()
    admin.update_global(tenant, BASE_RECORD, 0)
    tab = tabs()
    page = tab.open(f"?tenant={tenant}&view=records")
    _open_global_record(page)
    theirs = BASE_RECORD.replace("- three", "- three (theirs)")
    admin.update_global(tenant, theirs, 1)
    page.fill("#record-content", BASE_RECORD.replace("- three", "- three (mine)").replace("- one", "- one (mine)"))
    page.click("#save")
    page.locator("#conflict").wait_for()
    assert page.locator("fieldset.overlap").count() == 1
    assert page.locator("#save-merge").is_disabled()  # nothing is saved before the overlap is settled
    assert page.evaluate("document.activeElement.id") == "overlap-0-theirs"
    page.check("#overlap-0-both")
    kept = BASE_RECORD.replace("- one", "- one (mine)").replace("- three", "- three (theirs)\n- three (mine)")
    assert page.locator("#merged").text_content() == kept
    # Overwriting theirs is its own action, and asks first: Cancel writes nothing.
    page.click("#overwrite")
    page.get_by_role("button", name="Cancel").click()
    assert _stored(admin, tenant) == (theirs, 2)
    page.click("#save-merge")
    page.locator("#saved").wait_for()
    assert _stored(admin, tenant) == (kept, 3)
    # Overwrite, confirmed, from another conflict.
    admin.update_global(tenant, "# Memory\n- replaced by an agent", 3)
    page.fill("#record-content", "# Memory\n- mine only")
    page.click("#save")
    page.locator("#overwrite").click()
    page.locator("#confirm-overwrite").click()
    page.locator("#saved").wait_for()
    assert _stored(admin, tenant) == ("# Memory\n- mine only", 5)


def test_an_unsaved_edit_and_its_base_survive_a_reload(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    """The base is kept in the tab with its generation: after a reload the draft comes back, and
    its conflict still merges against the version it started from."""
    tenant = _tenant()
    admin.update_global(tenant, BASE_RECORD, 0)
    tab = tabs()
    page = tab.open(f"?tenant={tenant}&view=records")
    _open_global_record(page)
    page.fill("#record-content", BASE_RECORD.replace("- five", "- five (mine)"))
    admin.update_global(tenant, BASE_RECORD.replace("- one", "- one (theirs)"), 1)
    page.reload()
    _open_global_record(page)
    page.locator("#draft-restored").wait_for()
    assert page.locator("#record-content").input_value() == BASE_RECORD.replace("- five", "- five (mine)")
    page.click("#save")
    page.locator("#conflict").wait_for()
    assert page.locator("#base").text_content() == BASE_RECORD.replace("\n", "")
    page.click("#save-merge")
    page.locator("#saved").wait_for()
    assert _stored(admin, tenant) == (
        BASE_RECORD.replace("- one", "- one (theirs)").replace("- five", "- five (mine)"),
        3,
    )


def test_sign_out_drops_the_records_kept_in_the_tab(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    """Sign out dropped the token but kept every record opened in the tab (its text and its base,
    the unsaved edit's too) in its session storage: the next to sign in there, with a token of
    another tenant, could read them with the browser's tools. Sign out drops them as well."""
    tenant = _tenant()
    admin.update_global(tenant, BASE_RECORD, 0)
    page = tabs().open(f"?tenant={tenant}&view=records")
    _open_global_record(page)
    page.fill("#record-content", BASE_RECORD + "\n- unsaved")
    kept = "Object.values(sessionStorage).filter((value) => value.includes('- unsaved')).length"
    assert page.evaluate(kept) == 1
    page.get_by_role("button", name="Sign out").click()
    page.locator("#token").wait_for()
    assert page.evaluate(kept) == 0
    assert page.evaluate("Object.keys(sessionStorage).filter((key) => key.includes('draft'))") == []


def test_the_merge_base_comes_from_the_revisions_after_a_reload(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    """After a reload the base is read from the record's revisions by the generation the edit
    started from, not from the tab: a tab whose kept base is wrong still merges against the true
    one. The tab's copy is used only when the revisions no longer go back that far."""
    tenant = _tenant()
    admin.update_global(tenant, BASE_RECORD, 0)
    tab = tabs()
    page = tab.open(f"?tenant={tenant}&view=records")
    _open_global_record(page)
    mine = BASE_RECORD.replace("- five", "- five (mine)")
    page.fill("#record-content", mine)
    admin.update_global(tenant, BASE_RECORD.replace("- one", "- one (theirs)"), 1)
    page.reload()
    # The tab's copy of the base is not the version the edit started from.
    page.evaluate(
        """() => { for (const key of Object.keys(sessionStorage)) if (key.includes('draft')) {
             const d = JSON.parse(sessionStorage.getItem(key)); d.base = '# Memory\\n- not the base';
             sessionStorage.setItem(key, JSON.stringify(d)); } }"""
    )
    _open_global_record(page)
    page.locator("#draft-restored").wait_for()
    page.click("#save")
    page.locator("#conflict").wait_for()
    assert page.locator("#base-source").text_content() == "from the record's revisions"
    assert page.locator("#base").text_content() == BASE_RECORD.replace("\n", "")
    assert _texts(page, "#theirs ins") == ["- one (theirs)"]
    both = BASE_RECORD.replace("- one", "- one (theirs)").replace("- five", "- five (mine)")
    assert page.locator("#merged").text_content() == both
    page.click("#save-merge")
    page.locator("#saved").wait_for()
    assert _stored(admin, tenant) == (both, 3)
    # The revisions pruned past the edit's generation (retention keeps 100): the tab's copy is the base.
    page.fill("#record-content", both.replace("- three", "- three (mine)"))
    for generation in range(3, 104):
        admin.update_global(tenant, f"{both}\n- agent note {generation}", generation)
    assert min(r.generation for r in admin.list_record_revisions(tenant, "global", "MEMORY.md")[0]) > 3
    page.click("#save")
    page.locator("#conflict").wait_for()
    assert "kept in this tab" in (page.locator("#base-source").text_content() or "")
    assert page.locator("#base").text_content() == both.replace("\n", "")
    assert page.locator("#merged").text_content() == f"{both.replace('- three', '- three (mine)')}\n- agent note 103"


def test_history_lists_a_memorys_revisions_and_its_fast_write_and_a_revert_adds_one(
    tabs: Callable[..., Tab], admin: MemoryClient
) -> None:
    tenant = _tenant()
    admin.hot_path(tenant, "enable")
    written = admin.retain(tenant, "The standup moved to 09:15 on Mondays", fast=True)
    admin.hot_path(tenant, "flush")
    memory_id = admin.get_event(tenant, written.event_id).created_memory_ids[0]
    admin.update_memory(tenant, memory_id, "The standup moved to 09:30 on Mondays")
    admin.update_memory(tenant, memory_id, "The standup moved to 09:45 on Mondays")
    tab = tabs()
    page = tab.open(f"?tenant={tenant}")
    page.locator(f'[aria-label="Open memory {memory_id}"]').first.click()
    page.click("#memory-history")
    page.locator("#memory-revisions li").nth(2).wait_for()
    assert [page.locator("#memory-revisions > li").nth(i).get_attribute("data-kind") for i in range(3)] == [
        "retained",
        "updated",
        "updated",
    ]
    third = page.locator('#memory-revisions li[data-revision="3"]')
    assert _texts(page, '#memory-revisions li[data-revision="3"] ins') == ["45"]  # jsdiff's words: "09", ":", "45"
    assert _texts(page, '#memory-revisions li[data-revision="3"] del') == ["30"]
    assert "through grpc" in (third.text_content() or "")
    ledger = [r.ledger_seq for r in admin.list_memory_revisions(tenant, memory_id)]
    assert f"audit entry {ledger[2]}" in (third.text_content() or "")
    page.locator("#event-steps li").nth(1).wait_for()
    assert page.locator("#memory-events h2").text_content() == f"Its fast write: event {written.event_id}"
    assert [page.locator("#event-steps li").nth(i).get_attribute("data-step") for i in range(2)] == [
        "accepted",
        "succeeded",
    ]
    # No revert of the newest revision; a revert to the first asks, then adds revision 4.
    assert third.locator("[data-revert]").count() == 0
    page.click('[data-revert="1"]')
    page.get_by_role("button", name="Cancel").click()
    assert len(admin.list_memory_revisions(tenant, memory_id)) == 3
    page.click('[data-revert="1"]')
    page.click("#confirm-revert")
    page.locator("#reverted").wait_for()
    page.locator('#memory-revisions li[data-revision="4"]').wait_for()
    assert page.locator("#memory-revisions > li").count() == 4
    assert page.locator('#memory-revisions li[data-revision="4"]').get_attribute("data-kind") == "reverted"
    assert admin.get_memory(tenant, memory_id).text == "The standup moved to 09:15 on Mondays"
    assert [r.kind for r in admin.list_memory_revisions(tenant, memory_id)] == [
        "retained",
        "updated",
        "updated",
        "reverted",
    ]


def test_history_lists_a_records_generations_and_a_revert_keeps_to_the_generation_read(
    tabs: Callable[..., Tab], admin: MemoryClient
) -> None:
    tenant = _tenant()
    admin.update_global(tenant, BASE_RECORD, 0)
    admin.update_global(tenant, BASE_RECORD.replace("- two", "- two, edited"), 1)
    admin.update_global(tenant, BASE_RECORD.replace("- two", "- two, edited").replace("- five", "- five, edited"), 2)
    tab = tabs()
    page = tab.open(f"?tenant={tenant}&view=records")
    _open_global_record(page)
    page.click("#record-history")
    page.locator("#record-revisions li").nth(2).wait_for()
    assert [page.locator("#record-revisions > li").nth(i).get_attribute("data-generation") for i in range(3)] == [
        "1",
        "2",
        "3",
    ]
    assert _texts(page, '#record-revisions li[data-generation="3"] ins') == ["- five, edited"]
    assert _texts(page, '#record-revisions li[data-generation="3"] del') == ["- five"]
    # A revert from a stale history is refused and writes nothing.
    admin.update_global(tenant, BASE_RECORD.replace("- one", "- one, by an agent"), 3)
    page.click('[data-revert="1"]')
    page.click("#confirm-revert")
    page.locator("#revert-refused").wait_for()
    page.locator('#record-revisions li[data-generation="4"]').wait_for()
    assert _stored(admin, tenant) == (BASE_RECORD.replace("- one", "- one, by an agent"), 4)
    assert page.locator("#record-revisions > li").count() == 4
    # From the history read again: the revert is generation 5, with generation 1's content.
    page.click('[data-revert="1"]')
    page.click("#confirm-revert")
    page.locator("#reverted").wait_for()
    page.locator('#record-revisions li[data-generation="5"]').wait_for()
    assert _stored(admin, tenant) == (BASE_RECORD, 5)
    assert page.locator("#record-revisions > li").count() == 5
    last = page.locator('#record-revisions li[data-generation="5"]')
    assert "by revert_record" in (last.text_content() or "")


def test_a_workspace_record_is_deleted_after_confirmation(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    tenant = _tenant()
    admin.edit_records(
        tenant, "workspace/w1", [RecordChange("put", "plan.md", "ship it"), RecordChange("put", "x", "y")], 0
    )
    tab = tabs()
    page = tab.open(f"?tenant={tenant}&view=records")
    page.locator('[data-scope="workspace/w1"]').click()
    page.locator('[data-key="plan.md"]').click()
    page.click("#delete")
    page.get_by_role("button", name="Keep it").click()  # nothing is deleted before the confirmation
    assert admin.list_scopes(tenant)[1].records == 2
    page.click("#delete")
    page.click("#confirm-delete")
    page.locator("#deleted").wait_for()
    assert page.locator('[data-key="plan.md"]').count() == 0
    assert [(r.key, r.content) for r in admin.list_records(tenant, "workspace/w1").records] == [("x", "y")]


def test_a_double_click_saves_and_forgets_once(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    """A second click while the save is out sent a second save at the same generation: it met the
    first's and showed a conflict with "someone else". The button sends its request once."""
    tenant = _tenant()
    admin.update_global(tenant, BASE_RECORD, 0)
    gone = admin.retain(tenant, "a note to forget with a double click")
    tab = tabs()
    page = tab.open(f"?tenant={tenant}&view=records")
    _open_global_record(page)
    page.fill("#record-content", BASE_RECORD + "\n- six")
    page.dblclick("#save")
    page.locator("#saved").wait_for()
    assert page.locator("#conflict").count() == 0
    assert _stored(admin, tenant) == (BASE_RECORD + "\n- six", 2)
    page = tab.open(f"?tenant={tenant}")
    page.click(f'[aria-label="Open memory {gone.memory_id}"]')
    page.click("#forget")
    page.dblclick("#confirm-forget")
    page.locator("#forgotten").wait_for()
    assert sum(url.endswith(f"/memories/{gone.memory_id}:forget") for url in tab.requests) == 1


def test_hostile_memory_text_shows_literally_and_runs_nothing(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    tenant = _tenant()
    hostile = [
        '<img src=x onerror="window.pwned=1;alert(1)">',
        "<script>window.pwned=2;alert(2)</script>",
        '<a href="javascript:alert(3)" id="bad">click</a><style>body{display:none}</style>',
    ]
    for text in hostile:
        admin.retain(tenant, text)
    tab = tabs()
    page = tab.open(f"?tenant={tenant}")
    page.locator("#memory-list .memory").nth(2).wait_for()
    page.fill("#search-query", "img script alert")
    page.press("#search-query", "Enter")
    page.locator("#search-results .memory").first.wait_for()
    assert _texts(page, "#memory-list .memory .text") == hostile[::-1]
    for element in ("img", "script", "style", "a#bad"):
        assert page.locator(f"#main {element}").count() == 0, element
    assert page.evaluate("window.pwned") is None
    assert tab.dialogs == []
    assert page.locator("body").is_visible()


def test_a_word_of_thousands_of_letters_wraps_within_the_window(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    """A word of a thousand letters in a memory's speaker or metadata, or a long tenant name in the
    URL, widened the page to thousands of pixels (a scroll bar under everything): it wraps."""
    tenant = _tenant()
    memory = admin.retain(tenant, "a memory with a long speaker", metadata={"k": "V" * 1000}, speaker="S" * 200)
    tab = tabs()
    page = tab.open(f"?tenant={tenant}")
    page.click(f'[aria-label="Open memory {memory.memory_id}"]')
    page.locator("#memory-heading").wait_for()
    wide = "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    width, window = page.evaluate(wide)
    assert width <= window
    page = tab.open(f"?tenant={'a' * 3000}")
    page.locator("#memory-list .error").wait_for()
    width, window = page.evaluate(wide)
    assert width <= window


def test_a_view_named_after_an_object_property_shows_the_tenants(tabs: Callable[..., Tab]) -> None:
    """?view=constructor (or __proto__), edited by hand, was looked up among the object's inherited
    properties: the page stayed at "Loading…" (or threw). An unknown view shows the tenants, under
    their own header: the tenant's tabs, none of them current, stood above the list."""
    tab = tabs()
    errors: list[str] = []
    tab.page.on("pageerror", lambda error: errors.append(str(error)))
    for view in ("constructor", "__proto__", "toString", "bogus"):
        page = tab.open(f"?tenant={USER_TENANT}&view={view}")
        page.locator("#tenants > *").first.wait_for()
        assert page.locator("main h1").text_content() == "Tenants", view
        assert _texts(page, "nav button") == ["Tenants"], view
        assert page.locator('nav [aria-current="page"]').text_content() == "Tenants", view
    assert errors == []


def _tab_to(page: Any, matches: Callable[[dict[str, str]], bool], key: str = "Tab", limit: int = 40) -> None:
    for _ in range(limit):
        page.keyboard.press(key)
        focused = page.evaluate(
            "() => ({text: document.activeElement.textContent.trim(), id: document.activeElement.id,"
            " scope: document.activeElement.dataset.scope || '', key: document.activeElement.dataset.key || ''})"
        )
        if matches(focused):
            return
    raise AssertionError("never reached by the keyboard")


def test_keyboard_alone_signs_in_searches_edits_and_saves(
    tabs: Callable[..., Tab], server: ServerProcess, admin: MemoryClient
) -> None:
    admin.retain(USER_TENANT, "The deploy freeze starts on December 20")
    admin.update_global(USER_TENANT, "# Memory", admin.list_scopes(USER_TENANT)[0].generation)
    tab = tabs(signed_in=None)
    page = tab.open(f"?tenant={USER_TENANT}")
    page.locator("#token").wait_for()
    assert page.evaluate("document.activeElement.id") == "token"
    page.keyboard.type(USER)
    page.keyboard.press("Enter")
    page.locator("#search-query").wait_for()
    assert page.evaluate("document.activeElement.id") == "search-query"
    page.keyboard.type("deploy freeze")
    page.keyboard.press("Enter")
    page.locator("#search-results .memory").first.wait_for()
    assert "The deploy freeze starts on December 20" in _texts(page, "#search-results .memory .text")
    _tab_to(page, lambda f: f["text"] == "Records", key="Shift+Tab")
    page.keyboard.press("Enter")
    page.locator('[data-scope="global"]').wait_for()
    page.wait_for_function("document.activeElement.dataset.scope === 'global'")  # the first scope
    page.keyboard.press("Enter")
    _tab_to(page, lambda f: f["key"] == "MEMORY.md")
    page.keyboard.press("Enter")
    page.locator("#record-content").wait_for()
    assert page.evaluate("document.activeElement.id") == "record-content"
    page.keyboard.press("Control+End")
    page.keyboard.type("\n- typed with the keyboard")
    _tab_to(page, lambda f: f["id"] == "save")
    page.keyboard.press("Enter")
    page.locator("#saved").wait_for()
    record, _ = admin.get_record(USER_TENANT, "global", "MEMORY.md")
    assert record.content == "# Memory\n- typed with the keyboard"


def test_an_admin_pages_through_two_pages_of_tenants(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    for _ in range(11):
        admin.retain(_tenant(), "a tenant for paging")
    expected = admin.list_tenants(page_size=10)
    second = admin.list_tenants(page_size=10, page_token=expected.next_page_token)
    tab = tabs()
    page = tab.open()
    page.locator("#tenants tr[data-tenant]").first.wait_for()
    rows = page.locator("#tenants tr[data-tenant]")
    assert [rows.nth(i).get_attribute("data-tenant") for i in range(rows.count())] == expected.tenants
    page.locator("#tenants .valid").first.wait_for()
    page.click("#next-tenants")
    page.locator(f'#tenants tr[data-tenant="{second.tenants[0]}"]').wait_for()
    assert [rows.nth(i).get_attribute("data-tenant") for i in range(rows.count())] == second.tenants
    page.click("#previous-tenants")
    page.locator(f'#tenants tr[data-tenant="{expected.tenants[0]}"]').wait_for()


def test_a_bad_token_shows_the_sign_in_error(tabs: Callable[..., Tab]) -> None:
    tab = tabs(signed_in=None)
    page = tab.open()
    page.fill("#token", "not-the-token")
    page.press("#token", "Enter")
    error = page.locator("#sign-in-error")
    error.wait_for()
    assert "The server does not know this token" in (error.text_content() or "")
    assert "TOKEN_UNKNOWN" in (error.text_content() or "")
    assert page.evaluate("sessionStorage.getItem('mnemosyne-console-token')") is None
    # A token that is no admin's sees its own tenants; one it may not open says so in words.
    user = tabs(signed_in=USER)
    page = user.open()
    page.locator("#tenants tr[data-tenant]").first.wait_for()
    assert [r.get_attribute("data-tenant") for r in page.locator("#tenants tr[data-tenant]").all()] == [USER_TENANT]
    page = user.open("?tenant=beta")
    page.locator("#memory-list .error").wait_for()
    assert "Your token may not open this tenant" in (page.locator("#memory-list .error").text_content() or "")


def test_a_token_with_a_character_no_header_carries_is_refused_as_malformed(tabs: Callable[..., Tab]) -> None:
    """A pasted token with a character outside printable ASCII made fetch throw before sending:
    the page said the server could not be reached. It names the character, as TOKEN_MALFORMED."""
    page = tabs(signed_in=None).open()
    page.fill("#token", f"{ADMIN}\u20ac")
    page.press("#token", "Enter")
    error = page.locator("#sign-in-error")
    error.wait_for()
    said = error.text_content() or ""
    assert "TOKEN_MALFORMED" in said and "'\u20ac' (U+20AC)" in said and "could not be reached" not in said
    assert page.evaluate("sessionStorage.getItem('mnemosyne-console-token')") is None


def test_a_server_that_never_answers_is_said_so_not_loading_for_ever(tabs: Callable[..., Tab]) -> None:
    """A request the server never answered (a frozen server, a proxy holding the connection) left
    the view at "Loading…" for ever: the page gives up after ANSWER_SECONDS (30) and says so. The
    page's clock is Playwright's, run ahead; the tenant's requests are held, never answered."""
    tab = tabs()
    page = tab.page
    page.clock.install()
    page.route("**/v1/tenants/**", lambda route: None)  # neither answered nor let through
    with page.expect_request("**/v1/tenants/**"):
        tab.open(f"?tenant={_tenant()}")
    page.clock.run_for(29_000)
    assert page.locator("#memory-list .error").count() == 0
    page.clock.run_for(2_000)
    page.locator("#memory-list .error").wait_for()
    said = page.locator("#memory-list .error").text_content() or ""
    assert "did not answer within 30 seconds" in said and "could not be reached" not in said, said


def test_forget_removes_a_memory_from_search(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    tenant = _tenant()
    kept = admin.retain(tenant, "The zebra crossing by the office is repainted")
    gone = admin.retain(tenant, "The zebra in the logo is striped blue")
    tab = tabs()
    page = tab.open(f"?tenant={tenant}")
    page.fill("#search-query", "zebra")
    page.press("#search-query", "Enter")
    page.locator(f'#search-results [data-memory-id="{gone.memory_id}"]').wait_for()
    page.click(f'#search-results [aria-label="Open memory {gone.memory_id}"]')
    page.click("#forget")
    page.locator("#confirm-forget").wait_for()
    page.click("#confirm-forget")
    page.locator("#forgotten").wait_for()
    page.locator(f'#search-results [data-memory-id="{gone.memory_id}"]').wait_for(state="detached")
    assert page.locator(f'#search-results [data-memory-id="{kept.memory_id}"]').count() == 1
    assert [hit.memory.id for hit in admin.recall(tenant, "zebra", k=5)] == [kept.memory_id]


def test_hot_path_and_integrity_views(tabs: Callable[..., Tab], admin: MemoryClient) -> None:
    tenant = _tenant()
    admin.retain(tenant, "something to verify")
    tab = tabs()
    page = tab.open(f"?tenant={tenant}&view=hotpath")
    page.locator("#hot-path-status dd").first.wait_for()
    assert page.locator("#hot-path-status dd").first.text_content() == "no"
    page.get_by_role("button", name="Enable").click()
    page.locator("#hot-path-status dd", has_text="yes").wait_for()
    admin.retain(tenant, "a fast one", fast=True)
    page.get_by_role("button", name="Flush").click()
    page.locator("#hot-path-result", has_text="Flushed").wait_for()
    assert re.fullmatch(
        r"Flushed \d+ event\(s\): \d+ succeeded, 0 failed\.", page.locator("#hot-path-result").text_content() or ""
    )
    report = admin.verify_integrity(tenant)
    page = tab.open(f"?tenant={tenant}&view=integrity")
    page.locator("#integrity-verdict").wait_for()
    assert page.locator("#integrity-verdict").text_content() == "valid"
    # A valid chain has no first broken entry (the API's 0 means none).
    assert page.locator("#integrity-first-broken").text_content() == "none: every entry checks"
    assert not re.search(r"broken at\D*0", page.locator("#integrity").inner_text())
    assert page.locator("#head-hash").input_value() == report.head_hash and report.head_hash


# Pixels of a chart's canvas near a colour (the series' stroke): the series was drawn, not only
# the axes and the grid.
_STROKE_PIXELS = """([id, rgb]) => {
  const canvas = document.querySelector(`#${id} canvas`);
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let n = 0;
  for (let i = 0; i < data.length; i += 4)
    if (data[i + 3] > 200 && Math.abs(data[i] - rgb[0]) + Math.abs(data[i + 1] - rgb[1]) + Math.abs(data[i + 2] - rgb[2]) < 40) n++;
  return n;
}"""
ACCENT_RGB = [0x1F, 0x5F, 0xA8]
BAD_RGB = [0xA8, 0x26, 0x1F]


def test_the_overview_charts_a_tenant_with_traffic_and_an_admin_sees_across_tenants(
    tabs: Callable[..., Tab], admin: MemoryClient
) -> None:
    tenant = _tenant()
    admin.retain_batch(tenant, [f"overview note {n}" for n in range(6)])
    for query in ("overview", "note", "nothing like it"):
        admin.recall(tenant, query)
    admin.hot_path(tenant, "enable")
    admin.retain(tenant, "a fast overview note", fast=True)
    admin.retain(tenant, f"a fast note that fails {POISON}", fast=True)
    admin.hot_path(tenant, "flush")
    figures = admin.tenant_figures(tenant)
    writes = sum(m.writes for m in figures.minutes)
    assert writes == 8 and sum(m.recalls for m in figures.minutes) == 3
    assert sum(m.failed_events for m in figures.minutes) == 1
    tab = tabs()
    page = tab.open(f"?tenant={tenant}&view=overview")
    for chart in ("memories", "traffic", "depth", "pending", "failed", "size"):
        page.locator(f"#chart-{chart} canvas").first.wait_for()
        assert int(page.locator(f"#chart-{chart}").get_attribute("data-points") or 0) > 0, chart
    # The series are drawn (the stroke's pixels), from the figures the API gives.
    assert page.evaluate(_STROKE_PIXELS, ["chart-traffic", ACCENT_RGB]) > 20
    assert page.evaluate(_STROKE_PIXELS, ["chart-memories", ACCENT_RGB]) > 20
    assert page.evaluate(_STROKE_PIXELS, ["chart-failed", BAD_RGB]) > 5
    writes_shown = page.evaluate(
        "[...document.querySelectorAll('#chart-traffic tbody tr')].reduce((n, r) => n + Number(r.cells[1].textContent), 0)"
    )
    assert writes_shown == writes
    last = page.evaluate("[...document.querySelectorAll('#chart-memories tbody tr')].at(-1).cells[1].textContent")
    assert last == str(admin.stats(tenant).memories)
    # An admin's tenants page: the largest, the busiest, the failing, with this tenant in each.
    across = admin.list_tenant_figures(limit=100)
    assert tenant in [r.tenant for r in across.failing]
    page = tab.open()
    page.locator(f'#failing tr[data-tenant="{tenant}"]').wait_for()
    assert page.locator(f'#busiest tr[data-tenant="{tenant}"]').count() == 1
    assert page.locator("#largest tr[data-tenant]").count() == min(10, across.tenants)


def test_a_server_without_tokens_needs_no_sign_in(tmp_path: Path, browser: Any) -> None:
    """On loopback without a tokens file the caller is an admin with no name: the console opens
    the tenants without asking for a token (one of two tests here with a second server)."""
    open_server = ServerProcess(tmp_path / "data", http=True).start()
    context = browser.new_context()
    try:
        with MemoryClient(open_server.target) as client:
            me = client.whoami()
            assert (me.name, me.tenants, me.admin) == ("", [], True)
            client.retain("alpha", "a memory on a server without tokens")
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{open_server.http_url}/console/")
        page.locator('#tenants tr[data-tenant="alpha"]').wait_for()
        assert page.locator("#token").count() == 0
        assert page.locator("#who").text_content() == "no tokens on this server (admin)"
        # The plain headless command of docs/console.md (its --dump-dom twin: the DOM a
        # --screenshot would capture) waits for the page's fetches: the list is filled in.
        dumped = subprocess.run(
            [str(CHROMIUM), *HEADLESS_FLAGS, "--no-sandbox", "--dump-dom", f"{open_server.http_url}/console/"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        row = re.search(r'<tr data-tenant="alpha">(.*?)</tr>', dumped)
        assert row and "<td>1</td>" in row.group(1) and 'class="valid"' in row.group(1), dumped[-2000:]
    finally:
        context.close()
        open_server.stop()


def test_a_server_with_lower_caps_serves_every_view_at_its_caps(tmp_path: Path, browser: Any) -> None:
    """The console asks for its own sizes (pages of 20 memories, of 1,000 events, 50 search hits);
    a server started with lower caps refused them (PAGE_SIZE_OUT_OF_RANGE, K_OUT_OF_RANGE) and the
    views showed the refusal. It names its cap in the ErrorInfo (``limit``): the console asks
    again at that cap and pages at it, a thread to its end (one small server: the module's has the
    default caps)."""
    capped = ServerProcess(tmp_path / "data", http=True, args=["--max-k", "3", "--max-page-size", "4"]).start()
    context = browser.new_context()
    try:
        with MemoryClient(capped.target) as client:
            client.hot_path("capped", "enable")
            written = [client.retain("capped", f"capped note {n}", fast=True) for n in range(6)]
            client.hot_path("capped", "flush")
            newest = client.get_event("capped", written[-1].event_id).created_memory_ids[0]
            turns = [f"turn {n} of the long thread" for n in range(1, 10)]  # three pages of 4
            last_turn = [client.retain("capped-thread", t, thread=ThreadRef("long", n)) for n, t in enumerate(turns, 1)]
            for more in ("capped-x", "capped-y", "capped-z"):  # five tenants: two pages of 4
                client.retain(more, "a tenant for the tenants' pages")
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{capped.http_url}/console/?tenant=capped")
        page.locator("#older-memories").wait_for()
        assert _texts(page, "#memory-list .memory .text") == [f"capped note {n}" for n in range(5, 1, -1)]
        page.fill("#search-query", "capped note")
        page.press("#search-query", "Enter")
        page.locator("#search-results .memory").first.wait_for()
        assert 1 <= page.locator("#search-results .memory").count() <= 3
        page.locator(f'[aria-label="Open memory {newest}"]').first.click()
        page.click("#memory-history")
        page.locator("#memory-events h2").wait_for()  # found on the second page of 4 events
        assert page.locator("#memory-events h2").text_content() == f"Its fast write: event {written[-1].event_id}"
        assert page.locator(".error").count() == 0
        # "Show the thread" pages on to the thread's end (it showed the first page of 4 only).
        page.goto(f"{capped.http_url}/console/?tenant=capped-thread")
        page.locator(f'[aria-label="Open memory {last_turn[-1].memory_id}"]').first.click()
        page.click("#show-thread")
        page.locator("#memory-thread h3").wait_for()
        assert _texts(page, "#memory-thread li") == turns
        assert page.locator(".error").count() == 0
        # The tenants (ListTenants keeps to --max-page-size as every list does): pages of 4.
        page.goto(f"{capped.http_url}/console/")
        page.locator("#next-tenants").wait_for()
        rows = page.locator("#tenants tr[data-tenant]")
        assert [rows.nth(i).get_attribute("data-tenant") for i in range(rows.count())] == [
            "capped",
            "capped-thread",
            "capped-x",
            "capped-y",
        ]
        page.click("#next-tenants")
        page.locator('#tenants tr[data-tenant="capped-z"]').wait_for()
        assert page.locator(".error").count() == 0
    finally:
        context.close()
        capped.stop()


# -- every view: axe, the keyboard, its accessibility tree ---------------------------------------------


@pytest.fixture(scope="module")
def fixture_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with console_views.fixture_server(tmp_path_factory.mktemp("views")) as server:
        yield server


# The visible elements the keyboard must reach, each marked with its place in the page; radio
# buttons of one name are one stop (Tab enters a group once, the arrows move inside it).
_MARK_STOPS = """() => {
  const stops = [...document.querySelectorAll(
    'header button, header a[href], main button, main input, main select, main textarea, main a[href], main summary, main [tabindex="0"]')]
    .filter((e) => !e.disabled && e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden');
  const groups = new Map();
  let n = 0;
  for (const e of stops) {
    const group = e.type === 'radio' ? e.name : '';
    if (group && groups.has(group)) { e.dataset.stop = groups.get(group); continue; }
    e.dataset.stop = String(n++);
    if (group) groups.set(group, e.dataset.stop);
  }
  return n;
}"""
_FOCUSED = """() => { const e = document.activeElement;
  return e && e.dataset.stop !== undefined ? {stop: e.dataset.stop, outline: getComputedStyle(e).outlineStyle} : null; }"""


def _walk_with_the_keyboard(page: Any) -> None:
    """Tab from the top reaches every stop of the page, each with a visible focus ring."""
    stops = page.evaluate(_MARK_STOPS)
    page.click(".brand")  # the top of the page: where the next Tab starts from
    reached: set[str] = set()
    for _ in range(2 * stops + 10):  # scrolling regions are stops too (Chromium's)
        page.keyboard.press("Tab")
        focused = page.evaluate(_FOCUSED)
        if focused:
            assert focused["outline"] != "none", f"stop {focused['stop']} has no focus ring"
            reached.add(focused["stop"])
    missing = sorted(set(map(str, range(stops))) - reached, key=int)
    labels = [page.locator(f'[data-stop="{m}"]').first.evaluate("e => e.outerHTML.slice(0, 120)") for m in missing]
    assert not missing, f"never reached by Tab: {labels}"


@pytest.mark.parametrize("view", console_views.VIEWS, ids=lambda v: v.name)
def test_each_view_passes_axe_the_keyboard_and_its_snapshot(
    browser: Any, fixture_server: ServerProcess, view: console_views.View
) -> None:
    """On the fixture: axe-core finds no violation (its script injected, so this context alone
    bypasses the page's Content-Security-Policy), the keyboard reaches every control, and the
    accessibility tree equals the committed snapshot (the run's times and sizes masked)."""
    context = console_views.new_context(browser, bypass_csp=True)
    try:
        page = console_views.open_view(context, fixture_server, view)
        tree = console_views.snapshot(page)
        expected = SNAPSHOTS / f"{view.name}.yaml"
        if UPDATE_SNAPSHOTS:
            expected.parent.mkdir(exist_ok=True)
            expected.write_text(tree)
        assert tree == expected.read_text(), f"{view.name}: the page changed; MNEMOSYNE_UPDATE_SNAPSHOTS=1 rewrites it"
        page.add_script_tag(path=str(AXE))
        violations = page.evaluate(
            """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
                 .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`)"""
        )
        assert violations == [], view.name
        _walk_with_the_keyboard(page)
    finally:
        context.close()
