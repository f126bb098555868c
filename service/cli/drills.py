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
from mnemosyne.errors import FailedPrecondition
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


@dataclass
class _AtTheKill:
    """What drill 2 saw of the log at its SIGKILL, which drill 5 checks recovery against."""

    accepted: int = 0
    open_operations: int = 0
    model_calls: int = 0
    without_extraction: int = 0


class _Drills:
    """One run: a server on ``data_dir/server`` (small worker batches, so a kill catches operations in
    each state, extracted or not), its client, three fresh tenants, and the results so far."""

    client: MemoryClient  # once the server has started (``start``)

    def __init__(self, data_dir: Path, out: Callable[[str], object]) -> None:
        self.server_dir = data_dir / "server"
        self.hold = data_dir / "hold-workers"
        self.hold.unlink(missing_ok=True)
        self.run = uuid.uuid4().hex[:8]
        self.tenants = {n: f"drill{n}-{self.run}" for n in (1, 2, 3)}
        self.server = ServerProcess(
            self.server_dir, env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(self.hold)}, args=["--hot-path-batch", "16"]
        )
        self.out = out
        self.results: list[DrillResult] = []
        self.at_kill = _AtTheKill()

    def start(self) -> None:
        self.client = MemoryClient(self.server.start(timeout=60).target, timeout=60)

    def restart_after_kill(self) -> None:
        self.server.kill()
        self.client.close()
        self.start()

    def report(self, number: int, name: str, passed: bool, detail: str) -> None:
        result = DrillResult(number, name, passed, detail)
        self.results.append(result)
        self.out(result.line())

    def hard_kill_during_sync_writes(self) -> None:
        tenant, client = self.tenants[1], self.client
        texts = [f"Drill one record {i}: order ORD-{10000 + i} shipped from warehouse W{i % 7}" for i in range(100)]
        for text in texts:
            client.retain(tenant, text)
        self.restart_after_kill()
        client = self.client
        recalled = sum(1 for text in texts if any(h.memory.text == text for h in client.recall(tenant, text, k=3)))
        stored = len(_all_memories(client, tenant))
        self.report(
            1,
            "hard-kill-sync-writes",
            recalled == 100 and stored == 100,
            f"100 written, SIGKILL, restart: {recalled}/100 recalled, {stored} stored",
        )

    def queue_loss_surface(self) -> None:
        tenant, client = self.tenants[2], self.client
        self.hold.touch()  # workers claim and extract, then hold before committing
        client.hot_path(tenant, "enable")
        texts = [f"Drill two note {i}: parcel PX-{20000 + i} weighs {i + 1} kg" for i in range(50)]
        accepted = [r.event_id for r in (client.retain(tenant, t, fast=True) for t in texts) if r.status == "enqueued"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # let the first batch reach its stored extraction
            if any(e.extracted for e in client.list_events(tenant, page_size=100).events):
                break
            time.sleep(0.05)
        self.server.kill()
        client.close()
        offline = inspect_oplog(self.server_dir, tenant)
        open_ids = sorted(o["event_id"] for o in offline["open"])
        running = sum(1 for o in offline["open"] if o["status"] == "running")
        committed = offline["committed"]
        self.at_kill = _AtTheKill(
            len(accepted), len(open_ids), offline["counters"].get("model_calls", 0), offline["open_without_extraction"]
        )
        self.hold.unlink()
        self.start()
        client = self.client
        client.hot_path(tenant, "flush", timeout_seconds=120)
        present = collections.Counter(_all_memories(client, tenant))
        all_once = all(present[t] == 1 for t in texts) and sum(present.values()) == 50
        exact = open_ids == sorted(set(accepted) - set(committed))
        self.report(
            2,
            "queue-loss-surface",
            len(accepted) == 50 and len(open_ids) >= 1 and exact and all_once,
            f"{len(accepted)} accepted, at SIGKILL {len(open_ids)} open ({running} running, "
            f"{len(open_ids) - running} pending) = accepted - {len(committed)} committed: "
            f"{exact}; after restart {sum(1 for t in texts if present[t] == 1)}/50 present exactly once",
        )

    def repeated_submission(self) -> None:
        tenant, client = self.tenants[3], self.client
        client.hot_path(tenant, "enable")
        calls_before = client.stats(tenant).model_calls
        events = [
            client.retain_conversation(tenant, CONVERSATION, request_id=f"drill3-{self.run}-{i}", fast=True).event_id
            for i in range(3)
        ]
        flushed = client.hot_path(tenant, "flush", timeout_seconds=60)
        assert isinstance(flushed, FlushResult)
        finished = [client.get_event(tenant, e) for e in events]
        duplicates = sum(1 for e in finished if e.duplicate_of_memory_ids)
        created = sum(1 for e in finished if e.created_memory_ids)
        stats = client.stats(tenant)
        self.report(
            3,
            "repeated-submission",
            duplicates == 2 and created == 1 and stats.memories == 1 and stats.model_calls - calls_before == 1,
            f"3 submissions, {flushed.flushed} flushed: {created} created, {duplicates} duplicates, "
            f"{stats.memories} stored, {stats.model_calls - calls_before} model call(s)",
        )

    def audit_chain(self) -> None:
        reports = {t: self.client.verify_integrity(t) for t in self.tenants.values()}
        self.report(
            4,
            "audit-chain",
            all(r.valid and r.first_broken_at == 0 for r in reports.values()),
            ", ".join(
                f"{t}: valid={r.valid} checked={r.checked} first_broken_at={r.first_broken_at or 'none'}"
                for t, r in reports.items()
            ),
        )

    def no_double_billing(self) -> None:
        kill = self.at_kill
        calls_after = self.client.stats(self.tenants[2]).model_calls
        added = calls_after - kill.model_calls
        self.report(
            5,
            "no-double-billing",
            added == kill.without_extraction and calls_after <= kill.accepted,
            f"model calls {kill.model_calls} at kill -> {calls_after} after recovery: +{added} for "
            f"{kill.without_extraction} open operations without stored extraction "
            f"({kill.open_operations - kill.without_extraction} extracted before the kill cost nothing); "
            f"{calls_after} calls <= {kill.accepted} accepted",
        )


# The drills, in the order they run (methods of _Drills).
DRILLS = (
    "hard_kill_during_sync_writes",
    "queue_loss_surface",
    "repeated_submission",
    "audit_chain",
    "no_double_billing",
)


# Written into a drill's directory before anything else: a rerun may use it again, and nothing else
# that is not empty may be used (a server's data directory is not: the drills would add tenants to
# it and SIGKILL the servers they start on it).
DRILL_MARK = ".mnemosyne-drills"


def _claim(data_dir: Path) -> None:
    """Make ``data_dir`` a drill directory: a new one, an empty one, or an earlier drill's."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if (data_dir / DRILL_MARK).is_file():
        return
    if any(data_dir.iterdir()):
        raise FailedPrecondition(
            f"{data_dir} is not empty and no drill made it (a server's data directory, or other files): "
            "the drills start servers in it and SIGKILL them; give a new or empty directory",
            reason="DRILL_DIR_NOT_OURS",
        )
    (data_dir / DRILL_MARK).write_text("made by mnemosyne drill\n")


def run_drills(data_dir: Path, out: Callable[[str], object] = print) -> list[DrillResult]:
    data_dir = Path(data_dir)
    _claim(data_dir)
    drills = _Drills(data_dir, out)
    try:
        drills.start()
        for name in DRILLS:
            getattr(drills, name)()
        drills.client.close()
    except Exception as exc:  # a drill that cannot even run is a failure, reported as such
        drills.report(len(drills.results) + 1, "error", False, f"{type(exc).__name__}: {exc}")
    finally:
        drills.hold.unlink(missing_ok=True)
        drills.server.stop()
    return drills.results
