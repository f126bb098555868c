"""Shared helpers of the benchmark commands: a real server, percentiles, tables, JSON, machine facts."""

from __future__ import annotations

import json
import os
import platform
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import numpy as np

# The benchmarks drive the same real server process as the tests and the drills.
from mnemosyne.cli.server_process import ServerProcess
from mnemosyne.transport.grpc.servicers import ASK_SERVER_TIME_KEY
from tests.replica_support import ObjectStorage, replica_env

# The metadata asking a call for its server-side time (the trailer ``mnemosyne-server-time-us``).
ASK_SERVER_TIME = ((ASK_SERVER_TIME_KEY, "1"),)


@contextmanager
def running_server(
    *,
    embedder: str = "hashing",
    args: Sequence[str] = (),
    data_dir: Path | None = None,
    env: dict[str, str] | None = None,
    http: bool = False,
    metrics: bool = False,
    python: str | None = None,
) -> Iterator[ServerProcess]:
    """A ``mnemosyne serve`` child process on a fresh data directory (removed afterwards); with
    ``python``, that interpreter's installation serves (e.g. main's, for a baseline in the same run)."""
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-") as tmp:
        server = ServerProcess(
            data_dir or Path(tmp) / "data",
            args=["--embedder", embedder, *args],
            env={"HF_HUB_OFFLINE": "1", **(env or {})},
            http=http,
            metrics=metrics,
            python=python,
        )
        server.start(timeout=180)
        try:
            yield server
        finally:
            server.stop()


@contextmanager
def replica_bucket() -> Iterator[str]:
    """A SeaweedFS S3 server on loopback (tests/replica_support.py, stopped afterwards) and a fresh
    bucket in it: the ``--replica-url`` that replicates there."""
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-s3-") as tmp:
        storage = ObjectStorage(Path(tmp)).start()
        try:
            yield storage.url(storage.new_bucket())
        finally:
            storage.stop()


def replicating_server(
    url: str, *, args: Sequence[str] = (), data_dir: Path | None = None
) -> AbstractContextManager[ServerProcess]:
    """``running_server`` replicating to ``url``, its metrics on (the lag gauges)."""
    return running_server(args=["--replica-url", url, *args], env=replica_env(), metrics=True, data_dir=data_dir)


_POSTINGS_LOADED = re.compile(r"full-text postings of \S+: (\d+) rows loaded")
# The approximate index's log lines (engine/ann.py): a graph built from every row, loaded from its
# file, or caught up with the rows written since it was made.
# Groups: how it was made, its rows, the seconds it took (not for a load).
GRAPH_MADE = re.compile(r"approximate index of \S+: (built|loaded|caught up), (\d+) rows(?: in ([0-9.]+) s)?")


def wait_for_postings(server: ServerProcess, deadline: float) -> None:
    """Until the server logged that a tenant's full-text postings are loaded (engine/postings.py
    loads a large tenant's in the background; ``deadline`` is a time.monotonic() value)."""
    while not _POSTINGS_LOADED.search(server.stderr_path.read_text()):
        assert time.monotonic() < deadline, "the postings were not loaded in time"
        time.sleep(0.5)


def wait_for_graph(server: ServerProcess, deadline: float, rows: int = 0) -> re.Match[str]:
    """Until the server logged that a tenant's approximate index is built, loaded or caught up
    with at least ``rows`` rows (engine/ann.py makes it in the background, started by a recall;
    ``deadline`` is a time.monotonic() value); the last such line."""
    while True:
        made = [m for m in GRAPH_MADE.finditer(server.stderr_path.read_text()) if int(m.group(2)) >= rows]
        if made:
            return made[-1]
        assert time.monotonic() < deadline, "the approximate index was not made in time"
        time.sleep(0.5)


def timed(fn: Callable[[int], object], n: int) -> list[float]:
    """Seconds taken by each of ``n`` calls of ``fn(i)``."""
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - start)
    return out


def percentiles(samples_s: Sequence[float]) -> dict[str, float]:
    """p50/p99/mean in milliseconds."""
    a = np.asarray(samples_s, dtype=np.float64) * 1e3
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "mean_ms": float(a.mean()),
        "n": int(len(a)),
    }


def machine() -> dict[str, object]:
    cpu = platform.processor() or ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_avg_1m_at_start": os.getloadavg()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    def fmt(v: object) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


# Taken when a benchmark command starts (it imports this module first): the load it ran under.
_STARTED = machine()


def write_json(path: str | Path, payload: dict[str, object]) -> None:
    payload = {"machine": {**_STARTED, "load_avg_1m_at_end": os.getloadavg()[0]}, **payload}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    print(f"\nwrote {path}")
