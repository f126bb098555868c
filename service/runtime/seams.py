"""Test seams: the ways a test holds, fails or kills a process at a chosen moment, all in one
object. A test sets them through ``MNEMOSYNE_TEST_*`` environment variables on the process it
starts; ``Seams.from_environment`` reads them, and returns None when none is set — which is every
production process. No configuration object, flag or chart value carries a seam, so nothing in a
deployment can switch one on; the components that have seams take a ``Seams`` (or None) apart
from their configuration.

The variables (each optional; a ``MNEMOSYNE_TEST_`` variable not listed here is refused, so a
misspelt seam fails the test that set it instead of silently doing nothing):

* ``MNEMOSYNE_TEST_FAULTS``: the store's fault points, comma-separated (store/file_faults.py
  ``stop_at``, store/bookkeeping.py: ``kill@NAME``, ``hold@NAME=PATH``; ``max_page_count=N``,
  ``file_bytes=N``: store/file_faults.py);
* ``MNEMOSYNE_TEST_CRASH_AFTER_COMMIT``: methods after whose commit the process kills itself
  (a reply lost after a commit);
* ``MNEMOSYNE_TEST_HOLD_WORKERS``: hot-path workers hold before committing while this file exists
  (or, when it says "inbox", "claimed" or "swept", before taking the inbox, once a round claimed,
  or once a sweep read its tenant's next erasure, before recording it);
* ``MNEMOSYNE_TEST_HOLD_BACKLOG``: while this file exists, hot-path workers take only the writes
  someone waits for (a read's consistency token): the backlog stays put (engine/hot_path/rounds.py);
* ``MNEMOSYNE_TEST_WORKER_ORDER=random:SEED``: each hot-path round takes a random set of the open
  operations instead of the oldest (the differential test of acceptance order);
* ``MNEMOSYNE_TEST_POISON_MARKER``: extraction fails on any text holding it (a poison operation);
* ``MNEMOSYNE_TEST_HOLD_CONSOLIDATION``: a record's commit attempt N waits while this file exists
  and ``<file>.goN`` does not (engine/consolidator.py);
* ``MNEMOSYNE_TEST_GENERATION_BASE``: the generation a scope has before its first record change;
* ``MNEMOSYNE_TEST_COMMIT_DURING_ASSEMBLE=1``: a Global commit made while AssembleContext reads;
* ``MNEMOSYNE_TEST_RECALL_OFF``: recall steps switched off by name (the ablation of bench/locomo.py);
* ``MNEMOSYNE_TEST_PARK_TENANT`` / ``MNEMOSYNE_TEST_PARK_FILE``: that tenant's jobs wait on their
  worker thread while the file exists (transport/admission.py);
* ``MNEMOSYNE_TEST_MOVE_HOLD_AFTER``: the first move of the process holds after that step
  (transport/cluster/moves.py);
* ``MNEMOSYNE_TEST_OPEN_FILES=SOFT:HARD``: the server starts as under ``ulimit -n``;
* ``MNEMOSYNE_TEST_LIFECYCLE_HOLD``: a backup or restore stage waits while this file holds the
  stage's name (cli/backup.py);
* ``MNEMOSYNE_TEST_WEBHOOK_TIMEOUT`` / ``MNEMOSYNE_TEST_WEBHOOK_BACKOFF``: a webhook delivery
  attempt's timeout, and the backoff after its first failure, in seconds (engine/webhooks/worker.py);
* ``MNEMOSYNE_TEST_CLOCK_FILE``: the engine's clock (runtime/clock.py) is the wall clock plus
  the seconds this file holds, so a test moves time forward without sleeping: expiry's erasures
  and the webhook worker's retries and pauses (a test passes a day without waiting one).
* ``MNEMOSYNE_TEST_HOLD_REPLICA_DATABASE``: while this file exists, the replication registers no
  tenant database in Litestream and every sync fails (the inboxes go on replicating on
  Litestream's own schedule): the inbox's replica runs ahead of the tenant file's
  (replication/replicator.py).
* ``MNEMOSYNE_TEST_REPLICA_CALL_SECONDS``: the longest a thread of the store waits for the
  replication's loop (a swap's waits for object storage), in place of 120 s
  (replication/replicator.py ``CALL_SECONDS``).
* ``MNEMOSYNE_TEST_SEND_STALL_SECONDS``: how long a client may take none of its answer while more
  waits to be sent before its stream (gRPC) or its connection (HTTP) is ended, in place of 30 s
  (transport/send_stall.py ``SEND_STALL_SECONDS``).
* ``MNEMOSYNE_TEST_TLS_SHUTDOWN_SECONDS``: asyncio's bound on the close of the HTTP port's TLS
  connections (its ``ssl_shutdown_timeout``), in place of its 30 s (transport/http/server.py
  ``TLS_SHUTDOWN_SECONDS``): a test sees what of a close still waits on it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = "MNEMOSYNE_TEST_"


@dataclass(frozen=True)
class Seams:
    store_faults: frozenset[str] = frozenset()
    crash_after_commit: frozenset[str] = frozenset()
    hold_workers_file: Path | None = None
    hold_backlog_file: Path | None = None
    worker_order: str = ""
    poison_marker: str = ""
    hold_consolidation_file: Path | None = None
    generation_base: int = 0
    commit_during_assemble: bool = False
    recall_steps_off: frozenset[str] = frozenset()
    park_tenant: str = ""
    park_file: Path | None = None
    move_hold_after: str = ""
    open_files: tuple[int, int] | None = None
    lifecycle_hold_file: Path | None = None
    webhook_timeout: float = 0.0
    webhook_backoff: float = 0.0
    clock_file: Path | None = None
    hold_replica_database_file: Path | None = None
    replica_call_seconds: float = 0.0
    send_stall_seconds: float = 0.0
    tls_shutdown_seconds: float = 0.0

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Seams | None:
        """The seams a test set on this process; None when it set none (production)."""
        values = {name.removeprefix(PREFIX): value for name, value in environ.items() if name.startswith(PREFIX)}
        if not values:
            return None
        unknown = set(values) - set(_READERS) - _READ_ELSEWHERE
        if unknown:
            raise ValueError(f"unknown test seams: {', '.join(sorted(PREFIX + name for name in unknown))}")
        seams = {field: read(values[name]) for name, (field, read) in _READERS.items() if values.get(name)}
        return cls(**seams) if seams else None

    def committed(self, method: str) -> None:
        """After ``method``'s commit, before its reply: the crash-after-commit seam."""
        if method in self.crash_after_commit:
            os.kill(os.getpid(), signal.SIGKILL)


def _names(value: str) -> frozenset[str]:
    return frozenset(filter(None, value.split(",")))


def _soft_hard(value: str) -> tuple[int, int]:
    soft, _, hard = value.partition(":")
    return int(soft), int(hard)


# MNEMOSYNE_TEST_<NAME> -> (the field it sets, how its text is read).
_READERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "FAULTS": ("store_faults", _names),
    "CRASH_AFTER_COMMIT": ("crash_after_commit", _names),
    "HOLD_WORKERS": ("hold_workers_file", Path),
    "HOLD_BACKLOG": ("hold_backlog_file", Path),
    "WORKER_ORDER": ("worker_order", str),
    "POISON_MARKER": ("poison_marker", str),
    "HOLD_CONSOLIDATION": ("hold_consolidation_file", Path),
    "GENERATION_BASE": ("generation_base", int),
    "COMMIT_DURING_ASSEMBLE": ("commit_during_assemble", lambda value: value == "1"),
    "RECALL_OFF": ("recall_steps_off", _names),
    "PARK_TENANT": ("park_tenant", str),
    "PARK_FILE": ("park_file", Path),
    "MOVE_HOLD_AFTER": ("move_hold_after", str),
    "OPEN_FILES": ("open_files", _soft_hard),
    "LIFECYCLE_HOLD": ("lifecycle_hold_file", Path),
    "WEBHOOK_TIMEOUT": ("webhook_timeout", float),
    "WEBHOOK_BACKOFF": ("webhook_backoff", float),
    "CLOCK_FILE": ("clock_file", Path),
    "HOLD_REPLICA_DATABASE": ("hold_replica_database_file", Path),
    "REPLICA_CALL_SECONDS": ("replica_call_seconds", float),
    "SEND_STALL_SECONDS": ("send_stall_seconds", float),
    "TLS_SHUTDOWN_SECONDS": ("tls_shutdown_seconds", float),
}
# Variables of the test harness, not of this process: the suite's external server
# (tests/conftest.py) and the fsync probe's log (tests/sync_probe).
_READ_ELSEWHERE = frozenset({"TARGET", "SYNC_LOG"})
