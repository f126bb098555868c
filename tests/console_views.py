"""Every view of the console on a deterministic fixture: the same tenants, memories, records and
events on a fresh server (so the same ids), a browser with a fixed clock, viewport, locale and
time zone, and the console's bundled font. tests/test_console.py checks each view with it (axe,
the keyboard, an accessibility-tree snapshot); ``python -m tests.console_views`` (what
``scripts/console-screenshots`` runs) writes docs/console-*.png from it.

What stays the run's own: the times the server stamps (when a memory was retained, an event
accepted, the minutes of the charts) and the size of the files; the snapshots mask them.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mnemosyne.client import MemoryClient, RecordChange, ThreadRef
from tests.support import ServerProcess, tokens_json

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
ADMIN = "fixture-admin-token"
USER = "fixture-acme-token"
TENANT = "acme"
POISON = "POISON-fixture"
VIEWPORT = {"width": 1100, "height": 760}
# The browser's clock: the fixture's memories happened in the days before it.
NOW = datetime(2026, 3, 10, 9, 30, tzinfo=UTC)
MEMORY_MD = "# Memory\n- Ada leads the Lyon trip\n- budgets are due on Fridays\n- the office moves in May"
ROADMAP = "# Roadmap\n- March: the Lyon trip\n- April: budgets\n- May: the office moves\n- June: a quiet month\n- July: the summer party"
WAIT_MS = 15_000
# The fast write's memory (the fixture's seventh), whose history the fixture fills.
STANDUP = "The standup moved to 09:15"
STANDUP_ID = 7


def _at(day: int, hour: int) -> float:
    return datetime(2026, 3, day, hour, tzinfo=UTC).timestamp()


def retain_trip(admin: MemoryClient, tenant: str) -> None:
    """A thread of three memories (speakers, metadata, the days they happened), one more of the
    same speaker and two that barely match "train to Lyon"."""
    trip = [
        ("ada", "Ada's night train to Lyon leaves at 22:40 from platform 9", 2),
        ("bob", "The train to Lyon was delayed by an hour", 3),
        ("ada", "Ada booked the hotel by the Lyon station for two nights", 4),
    ]
    for position, (speaker, text, day) in enumerate(trip, 1):
        admin.retain(
            tenant,
            text,
            speaker=speaker,
            thread=ThreadRef("trip-42", position),
            metadata={"topic": "travel"},
            occurred_at=_at(day, 8),
        )
    admin.retain(tenant, "Lyon's office opens at nine", speaker="bob", metadata={"topic": "office"})
    for text in ("The office plants are watered on Fridays", "Quarterly budget review is on Thursday"):
        admin.retain(tenant, text, occurred_at=_at(5, 14))


def fill(target: str) -> None:
    """The fixture's data, written in a fixed order (so a fresh server gives the same ids)."""
    with MemoryClient(target, token=ADMIN) as admin:
        retain_trip(admin, TENANT)
        admin.update_global(TENANT, MEMORY_MD, 0)
        admin.edit_records(TENANT, "workspace/plans", [RecordChange("put", "roadmap.md", ROADMAP)], 0)
        for query in ("train to Lyon", "budget", "office"):
            admin.recall(TENANT, query)
        admin.hot_path(TENANT, "enable")
        admin.retain(TENANT, STANDUP, fast=True)
        admin.retain(TENANT, f"A note the extractor fails on {POISON}", fast=True)
        admin.hot_path(TENANT, "flush")
        # Histories: the standup moved, then back (a revert); MEMORY.md edited, then restored.
        assert admin.get_memory(TENANT, STANDUP_ID).text == STANDUP
        admin.update_memory(TENANT, STANDUP_ID, STANDUP.replace("09:15", "09:30"))
        admin.revert_memory(TENANT, STANDUP_ID, 1)
        admin.update_global(TENANT, MEMORY_MD.replace("on Fridays", "on Thursdays"), 1)
        admin.revert_record(TENANT, "global", "MEMORY.md", 1, 2)
        admin.retain_batch("beta", ["beta's first note", "beta's second note"])
        admin.retain("gamma", "gamma's only note")


@contextmanager
def fixture_server(folder: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        folder / "data",
        http=True,
        env={"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"], USER: [TENANT]}), "MNEMOSYNE_TEST_POISON_MARKER": POISON},
    ).start()
    try:
        fill(server.target)
        yield server
    finally:
        server.stop()


def new_context(browser: Any, **extra: Any) -> Any:
    """A browser context as the fixture wants it: its viewport, locale, time zone, fixed clock."""
    context = browser.new_context(
        viewport=VIEWPORT, locale="en-US", timezone_id="UTC", reduced_motion="reduce", **extra
    )
    context.set_default_timeout(WAIT_MS)
    return context


@dataclass(frozen=True)
class View:
    name: str  # docs/console-<name>.png, tests/console_snapshots/<name>.yaml
    query: str  # what follows /console/
    ready: Callable[[Any, str], None]  # (page, target): acts, then waits until the view is drawn
    token: str | None = ADMIN


def _ready(selector: str) -> Callable[[Any, str], None]:
    return lambda page, target: page.locator(selector).first.wait_for()


def _sign_in(page: Any, target: str) -> None:
    page.fill("#token", "not-the-token")
    page.press("#token", "Enter")
    page.locator("#sign-in-error").wait_for()


def _tenants(page: Any, target: str) -> None:
    page.locator("#tenants .valid").nth(2).wait_for()
    page.locator("#largest tr[data-tenant]").first.wait_for()


def _search(page: Any, target: str) -> None:
    page.fill("#search-query", "train to Lyon")
    page.press("#search-query", "Enter")
    page.locator("#show-weaker").wait_for()
    page.locator("#search-results .memory", has_text="night train").locator("button.link").first.click()
    page.locator("#memory-heading").wait_for()
    page.click("#show-thread")
    page.locator("#memory-thread li").nth(2).wait_for()


def _forget(page: Any, target: str) -> None:
    page.locator("#memory-list .memory").first.wait_for()
    page.locator('[aria-label="Open memory 6"]').first.click()
    page.click("#forget")
    page.locator("#confirm-forget").wait_for()


def _overview(page: Any, target: str) -> None:
    for chart in ("memories", "traffic", "depth", "pending", "failed", "size"):
        page.locator(f"#chart-{chart} canvas").first.wait_for()


def _hot_path(page: Any, target: str) -> None:
    page.locator("#hot-path-status dd").first.wait_for()
    page.get_by_role("button", name="Flush").click()
    page.locator("#hot-path-result", has_text="Flushed").wait_for()


def _records(page: Any, target: str) -> None:
    page.locator('[data-scope="global"]').click()
    page.locator('[data-key="MEMORY.md"]').click()
    page.locator("#record-content").wait_for()


def _conflict(page: Any, target: str) -> None:
    """This tab edits two lines of the roadmap while another writer changes two: one change of
    each side stands alone, the other two overlap (the three-way view, one overlap settled)."""
    page.locator('[data-scope="workspace/plans"]').click()
    page.locator('[data-key="roadmap.md"]').click()
    page.locator("#record-content").wait_for()
    with MemoryClient(target, token=ADMIN) as admin:
        record, generation = admin.get_record(TENANT, "workspace/plans", "roadmap.md")
        theirs = record.content.replace("- May: the office moves", "- June: the office moves")
        theirs = theirs.replace("- March: the Lyon trip", "- March: the Lyon trip (Ada books it)")
        admin.edit_records(TENANT, "workspace/plans", [RecordChange("put", "roadmap.md", theirs)], generation)
    mine = ROADMAP.replace("- May: the office moves", "- May 12: the office moves")
    page.fill("#record-content", mine.replace("- July: the summer party", "- July: the summer party, by the river"))
    page.click("#save")
    page.locator("#merge-summary").wait_for()
    page.check("#overlap-0-both")


VIEWS = [
    View("sign-in", f"?tenant={TENANT}", _sign_in, token=None),
    View("tenants", "", _tenants),
    View("memories", f"?tenant={TENANT}", _ready("#memory-list .memory")),
    View("search", f"?tenant={TENANT}", _search),
    View("memory-forget", f"?tenant={TENANT}", _forget),
    View("overview", f"?tenant={TENANT}&view=overview", _overview),
    View("events", f"?tenant={TENANT}&view=events", _ready('#events tr[data-status="FAILED"]')),
    View("records", f"?tenant={TENANT}&view=records", _records),
    View("records-conflict", f"?tenant={TENANT}&view=records", _conflict),
    View("hot-path", f"?tenant={TENANT}&view=hotpath", _hot_path),
    View("integrity", f"?tenant={TENANT}&view=integrity", _ready("#integrity-verdict")),
    View("memory-history", f"?tenant={TENANT}&view=history&memory={STANDUP_ID}", _ready("#event-steps li")),
    View("record-history", f"?tenant={TENANT}&view=history&scope=global&key=MEMORY.md", _ready("#record-revisions li")),
]


def open_view(context: Any, server: ServerProcess, view: View) -> Any:
    """A new tab on ``view``, signed in with its token (as the sign-in form keeps it), drawn."""
    page = context.new_page()
    page.clock.set_fixed_time(NOW)
    if view.token:
        page.add_init_script(f"sessionStorage.setItem('mnemosyne-console-token', {view.token!r})")
    page.goto(f"{server.http_url}/console/{view.query}")
    view.ready(page, server.target)
    page.evaluate("document.fonts.ready")
    return page


# What a snapshot leaves out: what the server stamps or measures in each run.
_VOLATILE = [
    (re.compile(r"\d{1,2}/\d{1,2}/\d{4}, \d{1,2}:\d{2}:\d{2} [AP]M"), "<time>"),
    (re.compile(r"\d+(\.\d)? (KiB|MiB|GiB)"), "<size>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<hash>"),
    (re.compile(r"score \d\.\d{3}"), "score <score>"),
    (re.compile(r"chart of \d+ points"), "chart of <n> points"),
    (re.compile(r"\d+\.\d s\b"), "<seconds>"),
    (re.compile(r"\d+ ms after"), "<ms> after"),
]


def snapshot(page: Any) -> str:
    """The accessibility tree of the header and the page, without the run's own stamps."""
    text = f"{page.locator('header').aria_snapshot()}\n{page.locator('main').aria_snapshot()}\n"
    for pattern, mask in _VOLATILE:
        text = pattern.sub(mask, text)
    return text


def write_screenshots(out: Path = ROOT / "docs") -> list[Path]:
    """Every view's screenshot, from a fresh fixture server, into ``out``."""
    from playwright.sync_api import sync_playwright

    written = []
    with tempfile.TemporaryDirectory() as folder, fixture_server(Path(folder)) as server, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"], headless=True)
        try:
            for view in VIEWS:
                context = new_context(browser)
                page = open_view(context, server, view)
                path = out / f"console-{view.name}.png"
                page.screenshot(path=str(path), animations="disabled", caret="hide")
                written.append(path)
                context.close()
        finally:
            browser.close()
    return written


if __name__ == "__main__":
    for written in write_screenshots():
        print(written.relative_to(ROOT), file=sys.stdout)
