"""A core for the reads: a model's passes over a write's texts leave one core free while reads run.

A sentence model's forward pass (the default embedder, MiniLM) is native code that lets go of the
interpreter and takes a whole core until it ends, seconds for a pass over long texts on a small
machine. So ``read_priority``'s turns, which hold back in-process Python, do not hold it back, and
two write threads embedding batches took every core of a 2-core machine: another tenant's recalls,
each embedding its query with the same model, queued behind one another (measured in
docs/fairness.md#a-core-for-the-reads).

So a model runs a write's texts in passes of at most ``PASS_WORD_PIECES`` word pieces, and each
pass larger than ``SMALL_PASS_WORD_PIECES`` enters ``bulk_pass``: while reads are being served
(one running, or one ended within ``READS_RECENT_SECONDS``), at most all cores but one run such
passes at once, in arrival order; with no reads they are not held. A query's embedding, a small
write's, and any pass on a thread that runs reads never wait. On a 2-core machine that serves
reads, a model's bulk writes run one pass at a time; on 16 cores, 15.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mnemosyne.runtime import read_priority

# The word pieces one pass of a write's texts holds at most (its texts' padded lengths summed): a
# pass short enough that a read arriving while all cores run passes waits a fraction of a second.
PASS_WORD_PIECES = 2048
# A pass of at most this many word pieces never waits (a query's, a single memory's): a small
# write of another tenant is not queued behind a batch's passes.
SMALL_PASS_WORD_PIECES = 512
# Reads ended this recently still count as being served: a read arriving in the gap between two
# reads finds its core free, not taken by a pass that began in the gap.
READS_RECENT_SECONDS = 1.0


def available_cores(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on: its CPU affinity, and a cgroup's CPU quota (a
    Kubernetes CPU limit; cgroup v2's ``cpu.max``, or v1's ``cpu.cfs_quota_us`` and
    ``cpu.cfs_period_us``), whichever is fewer, rounded down; at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _quota(cgroup)
    if quota is not None:
        cores = min(cores, int(quota))
    return max(1, cores)


def _quota(cgroup: Path) -> float | None:
    """The cgroup's CPU quota in cores; None without one (or none readable)."""
    try:
        if (cgroup / "cpu.max").exists():
            quota, period = (cgroup / "cpu.max").read_text().split()
            return None if quota == "max" else int(quota) / int(period)
        v1 = cgroup / "cpu"
        quota_us = int((v1 / "cpu.cfs_quota_us").read_text())
        return None if quota_us < 0 else quota_us / int((v1 / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None  # no quota to read: the affinity stands


_change = threading.Condition()
_running = 0  # bulk passes running now
_tickets = 0  # bulk passes that asked to run (one ticket each)
_next = 0  # the ticket whose pass runs next
_passes_waited = 0
_seconds_waited = 0.0


@contextmanager
def bulk_pass(word_pieces: int) -> Iterator[None]:
    """Around one pass of a model over a write's texts (``word_pieces``: the pass's padded size)."""
    global _running, _tickets, _next, _passes_waited, _seconds_waited
    if word_pieces <= SMALL_PASS_WORD_PIECES or read_priority.runs_reads():
        yield
        return
    # Read once a pass (a pod's CPU limit can change while it runs), not at every wake-up.
    beside_reads = max(1, available_cores() - 1)
    asked = 0.0  # when this pass first had to wait (0: it never did)
    with _change:
        ticket = _tickets
        _tickets += 1
        # While reads are served all cores but one, else any; re-checked every
        # READS_RECENT_SECONDS, as the reads may have gone quiet meanwhile.
        while not (
            ticket == _next and (_running < beside_reads or not read_priority.reads_recent(READS_RECENT_SECONDS))
        ):
            asked = asked or time.monotonic()
            _change.wait(READS_RECENT_SECONDS)
        _next += 1
        _running += 1
        _change.notify_all()  # the next ticket may run too
        if asked:
            _passes_waited += 1
            _seconds_waited += time.monotonic() - asked
    try:
        yield
    finally:
        with _change:
            _running -= 1
            _change.notify_all()


def waited() -> tuple[int, float]:
    """How many bulk passes waited for a core the reads kept, and the seconds they waited in all
    (a metric, read on each scrape)."""
    return _passes_waited, _seconds_waited
