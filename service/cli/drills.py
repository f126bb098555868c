"""The five recovery drills of the specification (§9.6, docs/seed-mapping.md), run against real server processes.

``mnemosyne drill --data-dir DIR`` and the test suite run this same code. Each drill prints one
line, ``PASS`` or ``FAIL`` with the numbers behind it:

1. hard kill during synchronous writes: 100 writes, SIGKILL right after the last returns,
   restart: all 100 are recalled;
2. queue loss surface: hot path on, 50 fast writes accepted, SIGKILL while workers are provably
   holding work (a test seam, not luck). The log, read offline, has open operations and they are
   exactly accepted minus committed; after restart all 50 are present exactly once;
3. repeated submission: one multi-turn conversation (messages) submitted three times with three
   request ids: two duplicates, stored once, one model call;
4. audit chain: VerifyIntegrity valid, no first_broken_at, for every drilled tenant;
5. no double billing: the model calls recovery added equal the open operations that had no
   stored extraction at the kill, and model calls never exceed accepted operations.
"""

from __future__ import annotations

import collections
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mnemosyne.cli.server_process import ServerProcess
from mnemosyne.client import FlushResult, MemoryClient
from mnemosyne.store.oplog_inspect import inspect_oplog

CONVERSATION = [
    ("user", "I was charged twice for order ORD-55120 and want a refund."),
    ("assistant", "I opened refund ticket RF-88213 for the duplicate charge of $49.90."),
    ("user", "How long will it take?"),
    ("assistant", "Finance reviews refunds within 5 days; the ticket status is awaiting review."),
]


@dataclass(frozen=True)
class DrillResult:
    number: int
    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} drill {self.number} {self.name}: {self.detail}"


def _all_memories(client: MemoryClient, tenant: str) -> list[str]:
    texts: list[str] = []
    token = ""
    while True:
        page = client.list_memories(tenant, page_size=500, page_token=token)
        texts.extend(m.text for m in page.memories)
        token = page.next_page_token
        if not token:
            return texts


def run_drills(data_dir: Path, out: Callable[[str], object] = print) -> list[DrillResult]:
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    server_dir = data_dir / "server"
    hold = data_dir / "hold-workers"
    hold.unlink(missing_ok=True)
    run = uuid.uuid4().hex[:8]
    tenants = {n: f"drill{n}-{run}" for n in (1, 2, 3)}
    # Small worker batches, so a kill can catch operations in each state (extracted or not).
    server = ServerProcess(server_dir, env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}, args=["--hot-path-batch", "16"])

    def start() -> MemoryClient:
        return MemoryClient(server.start(timeout=60).target, timeout=60)

    results: list[DrillResult] = []

    def report(result: DrillResult) -> None:
        results.append(result)
        out(result.line())

    try:
        # -- 1: hard kill during synchronous writes ------------------------------------------------
        tenant = tenants[1]
        client = start()
        texts = [f"Drill one record {i}: order ORD-{10000 + i} shipped from warehouse W{i % 7}" for i in range(100)]
        for text in texts:
            client.retain(tenant, text)
        server.kill()
        client.close()
        client = start()
        recalled = sum(1 for text in texts if any(h.memory.text == text for h in client.recall(tenant, text, k=3)))
        stored = len(_all_memories(client, tenant))
        report(
            DrillResult(
                1,
                "hard-kill-sync-writes",
                recalled == 100 and stored == 100,
                f"100 written, SIGKILL, restart: {recalled}/100 recalled, {stored} stored",
            )
        )

        # -- 2: queue loss surface -----------------------------------------------------------------
        tenant = tenants[2]
        hold.touch()  # workers claim and extract, then hold before committing
        client.hot_path(tenant, "enable")
        texts2 = [f"Drill two note {i}: parcel PX-{20000 + i} weighs {i + 1} kg" for i in range(50)]
        accepted = []
        for text in texts2:
            result = client.retain(tenant, text, fast=True)
            if result.status == "enqueued":
                accepted.append(result.event_id)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # let the first batch reach its stored extraction
            if any(e.extracted for e in client.list_events(tenant, page_size=100).events):
                break
            time.sleep(0.05)
        server.kill()
        client.close()
        offline = inspect_oplog(server_dir, tenant)
        open_ids = sorted(o["event_id"] for o in offline["open"])
        running = sum(1 for o in offline["open"] if o["status"] == "running")
        committed = offline["committed"]
        without_extraction = offline["open_without_extraction"]
        calls_at_kill = offline["counters"].get("model_calls", 0)
        hold.unlink()
        client = start()
        client.hot_path(tenant, "flush", timeout_seconds=120)
        present = collections.Counter(_all_memories(client, tenant))
        all_once = all(present[t] == 1 for t in texts2) and sum(present.values()) == 50
        ok2 = (
            len(accepted) == 50
            and len(open_ids) >= 1
            and open_ids == sorted(set(accepted) - set(committed))
            and all_once
        )
        report(
            DrillResult(
                2,
                "queue-loss-surface",
                ok2,
                f"{len(accepted)} accepted, at SIGKILL {len(open_ids)} open ({running} running, "
                f"{len(open_ids) - running} pending) = accepted - {len(committed)} committed: "
                f"{open_ids == sorted(set(accepted) - set(committed))}; after restart "
                f"{sum(1 for t in texts2 if present[t] == 1)}/50 present exactly once",
            )
        )

        # -- 3: repeated submission ----------------------------------------------------------------
        tenant = tenants[3]
        client.hot_path(tenant, "enable")
        calls_before = client.stats(tenant).model_calls
        events = [
            client.retain_conversation(tenant, CONVERSATION, request_id=f"drill3-{run}-{i}", fast=True).event_id
            for i in range(3)
        ]
        flushed = client.hot_path(tenant, "flush", timeout_seconds=60)
        assert isinstance(flushed, FlushResult)
        finished = [client.get_event(tenant, e) for e in events]
        duplicates = sum(1 for e in finished if e.duplicate_of_memory_ids)
        created = sum(1 for e in finished if e.created_memory_ids)
        stats = client.stats(tenant)
        ok3 = duplicates == 2 and created == 1 and stats.memories == 1 and stats.model_calls - calls_before == 1
        report(
            DrillResult(
                3,
                "repeated-submission",
                ok3,
                f"3 submissions, {flushed.flushed} flushed: {created} created, {duplicates} duplicates, "
                f"{stats.memories} stored, {stats.model_calls - calls_before} model call(s)",
            )
        )

        # -- 4: audit chain after the kills --------------------------------------------------------
        reports = {t: client.verify_integrity(t) for t in tenants.values()}
        ok4 = all(r.valid and r.first_broken_at == 0 for r in reports.values())
        report(
            DrillResult(
                4,
                "audit-chain",
                ok4,
                ", ".join(
                    f"{t}: valid={r.valid} checked={r.checked} first_broken_at={r.first_broken_at or 'none'}"
                    for t, r in reports.items()
                ),
            )
        )

        # -- 5: no double billing ------------------------------------------------------------------
        calls_after = client.stats(tenants[2]).model_calls
        added = calls_after - calls_at_kill
        ok5 = added == without_extraction and calls_after <= len(accepted)
        report(
            DrillResult(
                5,
                "no-double-billing",
                ok5,
                f"model calls {calls_at_kill} at kill -> {calls_after} after recovery: +{added} for "
                f"{without_extraction} open operations without stored extraction "
                f"({len(open_ids) - without_extraction} extracted before the kill cost nothing); "
                f"{calls_after} calls <= {len(accepted)} accepted",
            )
        )
        client.close()
    except Exception as exc:  # a drill that cannot even run is a failure, reported as such
        report(DrillResult(len(results) + 1, "error", False, f"{type(exc).__name__}: {exc}"))
    finally:
        hold.unlink(missing_ok=True)
        server.stop()
    return results
