"""Interpreter settings of a serving process (``mnemosyne serve``; the in-process benchmarks call
the same function so they measure what the server runs)."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import logging
import os
import resource
import sys
from collections.abc import Callable

log = logging.getLogger("mnemosyne.server")

# How long a thread may hold the GIL while another waits for it (Python's default: 5 ms).
SWITCH_INTERVAL_SECONDS = 0.0005


def tune_interpreter() -> None:
    # Before numpy loads: one BLAS thread per call. Recall's matrix-vector product is bound by
    # memory bandwidth, and the server already runs calls in parallel; BLAS threads spinning on
    # a shared 2-core machine made it 1.5-3x slower (bench/latency.py). An explicit setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # A young-generation collection every 20,000 allocations instead of Python's 700: request
    # paths allocate in bulk (a RetainBatch of 500 items makes ~100k objects) and spent ~4% of
    # their time in the collector (bench.ingest, 16 runs alternated: 129.4 -> 123.9 us per batch
    # item; recall latency at 10k unchanged). Older generations keep their default ratios.
    gc.set_threshold(20_000, 10, 10)
    # A request thread waiting for the GIL while a hot-path worker runs Python between its
    # SQLite calls waited up to the whole interval: a fast write's p99 while the workers drain
    # its tenant was 1.07-1.26 ms at 5 ms and 0.80-0.82 ms at 0.5 ms
    # (bench/hot_path_latency.py); recall at 10k and RetainBatch showed no change (bench.latency,
    # bench.ingest, alternated runs).
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)


def _libc_trim() -> Callable[[int], int] | None:
    # The process's own symbols (glibc's on Linux); no library search, which would run ldconfig.
    if not sys.platform.startswith("linux"):
        return None
    trim: Callable[[int], int] | None = getattr(ctypes.CDLL(None), "malloc_trim", None)
    return trim


_MALLOC_TRIM = _libc_trim()


def release_free_memory() -> None:
    """Give the C allocator's free memory back to the system (glibc's ``malloc_trim``; a no-op
    elsewhere). After a bulk build of many mid-sized arrays (a tenant's full-text postings), the
    freed heap stays mapped, most of all in the arena of the thread that built them: at 100k
    memories ~130 MB of RSS that no allocation was using."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft limit of open files to the hard one (a tenant holds several; the common soft
    default of 1024 would otherwise cap a server at a few hundred open tenants). Returns
    (soft, hard) as they are now; the tenant pool sizes its cache from them (store/pool.py)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # e.g. macOS refuses RLIM_INFINITY: keep the soft limit
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


# Each port holds at most this share of the open-file limit in connections, whatever its flag
# says: each holds a descriptor, and idle or trickling clients could otherwise take every one the
# process has, so that no tenant file and no other port's connection opens.
OPEN_FILES_SHARE = 4  # a quarter


def connection_budget(requested: int, port: str) -> int:
    """How many connections ``port`` (its name, for the log) holds open: ``requested``, or fewer
    when that is over a quarter of the open-file limit (OPEN_FILES_SHARE). Logged."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    most = requested if soft == resource.RLIM_INFINITY else max(1, min(requested, soft // OPEN_FILES_SHARE))
    log.info(
        "%s port: at most %d connections open (asked %d; at most a quarter of the open-file limit)",
        port,
        most,
        requested,
    )
    return most


def exit_without_teardown() -> None:
    """Once the process has closed what it opened (a server stopped: tenant files closed,
    Litestream stopped, traces exported), let it end without Python's teardown of its modules:
    at exit, after its non-daemon threads were joined (as ever, before any exit handler), run the
    exit handlers (the logs' flush, coverage's save, ...), flush stdout and stderr, and end with 0.
    What is skipped is only the unloading of ~1,300 modules, most of them the HTTP port's (the
    MCP SDK, pydantic, starlette): 0.4-1 s of a stop with the HTTP port on, 0.15-0.5 s without, on
    a loaded 2-core machine (bench/stop_time.py). Only for a process that ends once its command
    returned 0."""

    def exit_now() -> None:
        atexit.unregister(exit_now)  # registered last, it runs first: the others run here
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a reader gone, a stream closed: nothing to keep
                stream.flush()
        os._exit(0)

    atexit.register(exit_now)
