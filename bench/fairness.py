"""Fair serving: a call that waits holds no thread, and no tenant can slow the others.

    python -m bench.fairness --out results/fairness.json [--old-python PATH] [--new-python PATH]
                             [--old-args "FLAGS"] [--new-args "FLAGS"] [--streams 1000] [--unread 100]
                             [--flushes 100] [--rate 50] [--phase-seconds 6] [--rounds 3] [--quick]

Two servers run side by side in one run, the "old" serving model and the "new" one, each a
``python -m mnemosyne.cli serve --data-dir D --port 0 --metrics-port 0 [FLAGS]`` child process.
They differ by the Python that runs them: ``--new-python`` (default: this one) and
``--old-python``, a Python whose installed ``mnemosyne`` is the baseline commit (the one before
the switch). Prepare it once, from this checkout::

    git worktree add /tmp/base <commit>
    python -m venv /tmp/base/.venv
    /tmp/base/.venv/bin/pip install /tmp/base

(a regular, not editable, install: the server it runs stays the baseline whatever the worktree
does later). Without ``--old-python`` only the new server is measured. ``--old-args`` and
``--new-args`` add serve flags (one shell-quoted string each), e.g. the new server's raised
stream limits. The servers run with the defaults otherwise: loopback, no tokens, the default
embedder (MiniLM; ``--new-args "--embedder hashing"`` for the other). Both servers run for the whole run (about 3 minutes); ``--quick`` shortens every phase
and cell (a smoke run of about a minute).

Serving floor. ``AdminService.Ping`` and ``Recall`` (k=10, hybrid) against a tenant of 10,000
memories (``bench.corpus`` texts, RetainBatch of 500), from 1, 4 and 16 client threads of this
process, one channel (and connection) each, for 2 s per cell (0.5 s with ``--quick``). The cells
take turns in ``--rounds`` rounds (servers alternating, the order reversed every other round), and each
figure is the median of the per-round figures: the machine's speed drifts by +-20% between runs,
so compare a server with its peer of the same run, never with another run. ``new/old ping p50``
(1 client) is the switch criterion: within 10%.

Noisy tenant A against quiet tenant B. B recalls its 10,000 memories at ``--rate`` calls a second,
open loop (a call starts on schedule whether or not the previous one ended, so a stalled server
shows up as failed calls, not as fewer calls), for ``--phase-seconds`` in each phase, while A
(another process, so that A's client threads cannot slow B's client) does:

* ``quiet``: nothing (the baseline);
* ``streams``: holds ``--streams`` idle ``WatchEvents`` streams (after its last event: nothing to
  send) and ``--unread`` streams that replay A's ~600 past transitions on channels with a 1 KB
  flow-control window that are never read (the server's sends block on them);
* ``flushes``: with A's hot path on, a thread enqueues fast writes continuously, keeping a backlog
  of ~2,000 (a few seconds of the workers' work), while every second ``--flushes`` Flush calls ask
  the server to wait up to 5 s and give up after 0.2 s (abandoned: a server that keeps waiting for
  a caller that left holds one thread each);
* ``flood``: 16 threads hammer Recall on A's own 10,000 memories;
* ``lookalike``: two threads send RetainBatch calls of 100 near-identical 32 KB texts.

A call of B failed if it errored or took more than 2 s (its deadline). B's p50/p99 are over every
call, failed ones at the time they took. A's calls are counted by RPC and outcome; a
RESOURCE_EXHAUSTED refusal (by ErrorInfo reason, and whether a google.rpc.RetryInfo came with it)
is the new server shedding A's excess, which is not B's failure. A's DEADLINE_EXCEEDED in the
``flushes`` phase are its own abandoned flushes (an OK flush found the backlog drained within
0.2 s). ``server threads`` is the server process's thread count (``/proc/<pid>/status``) once the
tenants are loaded, and at the start of each phase -> the most sampled during it; ``recovery`` the
seconds after the phase until three Pings in a row answer within 50 ms and A's backlog is flushed
("-": not within 60 s, 30 s with ``--quick``). Every call
has a deadline and every stream is cancelled at the end of its phase, so a collapsing server
(the thread-pool server's 32 request threads held by A's streams) makes failed calls, not a hang.

Reading it: in every noisy phase, a fair server keeps B's p50 and p99 near its ``quiet`` figures
with no failures, refuses what it sheds of A with RESOURCE_EXHAUSTED (and RetryInfo), and does not
grow a thread per stream; its floor stays within 10% of the old server's. The thread-pool server
fails every call of B in ``streams`` (each at its 2 s deadline), and B waits on A's abandoned
flushes in ``flushes``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager as ContextManager
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from bench.common import percentiles, print_table, write_json
from bench.corpus import Corpus
from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import MnemosyneClientError
from mnemosyne.v1 import events_pb2, events_pb2_grpc, hot_path_pb2, memory_pb2

TENANT_A = "noisy-a"
TENANT_B = "quiet-b"
MEMORIES = 10_000
INGEST_BATCH = 500
K = 10
LEVELS = (1, 4, 16)
B_DEADLINE = 2.0  # a call of B that takes longer failed
A_DEADLINE = 2.0
BATCH_DEADLINE = 10.0  # a look-alike RetainBatch takes ~1 s on an idle server
SEED_WRITES = 200  # A's fast writes before the phases: ~600 transitions for the unread streams to replay
ENQUEUE_BATCH = 50
BACKLOG = 2000  # A's enqueuer keeps its hot-path queue this deep: a few seconds of the workers' work
FLUSH_CLIENT_DEADLINE = 0.2
FLUSH_SERVER_WAIT = 5.0
FLUSH_INTERVAL = 1.0
FLOOD_THREADS = 16
LOOKALIKE_THREADS = 2
LOOKALIKE_ITEMS = 100
LOOKALIKE_CHARS = 32_000
STREAMS_PER_CHANNEL = 100
PROMPT_PING_S = 0.05  # recovered: three Pings in a row under this
# Every channel its own connection: channels with equal arguments would share one otherwise.
OWN_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)
# A stream window of ~1 KB that never grows (no BDP probing): an unread stream stops the sender.
TINY_WINDOW = (("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024))
PHASES = ("quiet", "streams", "flushes", "flood", "lookalike")


@dataclass(frozen=True)
class Settings:
    phase_seconds: float
    settle_seconds: float
    cell_seconds: float
    rounds: int
    rate: float
    streams: int
    unread: int
    flushes: int
    recovery_limit_s: float

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        quick = args.quick
        return cls(
            phase_seconds=args.phase_seconds or (2.0 if quick else 6.0),
            settle_seconds=0.5 if quick else 1.0,
            cell_seconds=0.5 if quick else 2.0,
            rounds=args.rounds or (2 if quick else 3),
            rate=args.rate,
            streams=args.streams,
            unread=args.unread,
            flushes=args.flushes,
            recovery_limit_s=30.0 if quick else 60.0,
        )


# -- the servers ----------------------------------------------------------------------------------


class Server:
    """``mnemosyne serve`` run by a given Python, on a free loopback port."""

    def __init__(self, name: str, python: str, args: Sequence[str], workdir: Path) -> None:
        self.name = name
        self.python = python
        self.args = list(args)
        self.workdir = workdir
        self.stderr_path = workdir / "stderr.log"
        self.process: subprocess.Popen[str] | None = None
        self.port = 0
        self.last_event_id = 0  # of A's seed writes: the idle streams watch after it

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 120.0) -> None:
        self.workdir.mkdir(parents=True)
        command = [
            self.python,
            "-m",
            "mnemosyne.cli",
            "serve",
            "--data-dir",
            str(self.workdir / "data"),
            "--port",
            "0",
            "--metrics-port",
            "0",
            "--http-port",  # the default (8080) may be taken: another server, another run
            "0",
            *self.args,
        ]
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                cwd=self.workdir,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"},
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(timeout=10)
            raise RuntimeError(
                f"the {self.name} server exited with {self.process.returncode}: {self.stderr_path.read_text()[-2000:]}"
            )
        self.port = json.loads(line)["port"]
        with connect(self.target, timeout=1.0) as client:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    client.ping()
                    return
                except MnemosyneClientError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def threads(self) -> int:
        """The server process's thread count (0 once it has exited)."""
        try:
            for line in open(f"/proc/{self.pid}/status"):
                if line.startswith("Threads:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def mnemosyne_path(self) -> str:
        """Where the server's Python imports ``mnemosyne`` from: which code this server runs."""
        return subprocess.run(
            [self.python, "-c", "import mnemosyne; print(mnemosyne.__file__)"],
            capture_output=True,
            text=True,
            cwd=self.workdir,
            timeout=60,
        ).stdout.strip()


@contextmanager
def started(name: str, python: str, args: Sequence[str], workdir: Path) -> Iterator[Server]:
    server = Server(name, python, args, workdir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def connect(target: str, timeout: float = 30.0) -> MemoryClient:
    """A client on its own connection that never retries (every attempt is counted)."""
    return MemoryClient(target, timeout=timeout, retries=0, options=OWN_CONNECTION)


def load_tenants(server: Server, corpus: Corpus) -> None:
    """B and A get 10,000 memories each; A's hot path is turned on and gets ``SEED_WRITES`` fast
    writes (flushed), whose transitions the unread streams replay."""
    with connect(server.target, timeout=600) as client:
        for tenant in (TENANT_B, TENANT_A):
            for start in range(0, MEMORIES, INGEST_BATCH):
                client.retain_batch(tenant, corpus.memories(start, INGEST_BATCH))
        client.hot_path(TENANT_A, "enable")
        seeded = client.retain_batch(TENANT_A, corpus.memories(MEMORIES, SEED_WRITES), fast=True)
        client.hot_path(TENANT_A, "flush", timeout_seconds=120)
        server.last_event_id = max(r.event_id for r in seeded)
        for query in corpus.queries(MEMORIES, 20):  # warm-up: the first recall loads the vector cache
            client.recall(TENANT_B, query, k=K)
            client.recall(TENANT_A, query, k=K)


# -- outcomes of calls ----------------------------------------------------------------------------


def describe(error: grpc.RpcError) -> tuple[str, bool]:
    """``CODE`` or ``CODE/REASON`` (the ErrorInfo reason) of a failed call, and whether a
    google.rpc.RetryInfo detail came with it."""
    code = error.code().name
    assert isinstance(error, grpc.Call), error  # a failed call's RpcError is also its grpc.Call
    try:
        status = rpc_status.from_call(error)
    except ValueError:
        status = None
    reason, retry_info = "", False
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
        retry_info = retry_info or detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR)
    return (f"{code}/{reason}" if reason else code), retry_info


class Outcomes:
    """A's calls counted by RPC and outcome (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.retry_info = 0

    def count(self, rpc: str, outcome: str) -> None:
        with self._lock:
            self.counts[rpc][outcome] += 1

    def failed(self, rpc: str, error: grpc.RpcError) -> None:
        outcome, retry_info = describe(error)
        with self._lock:
            self.counts[rpc][outcome] += 1
            self.retry_info += retry_info

    def call(self, rpc: str, method: Callable[..., Any], request: Any, timeout: float) -> Any:
        """``method(request)``, its outcome counted: the response, or None if it failed."""
        try:
            response = method(request, timeout=timeout)
        except grpc.RpcError as exc:
            self.failed(rpc, exc)
            return None
        self.count(rpc, "OK")
        return response

    def finished(self, rpc: str, future: grpc.Future[Any]) -> None:
        """Wait for an asynchronous call and count its outcome."""
        error = future.exception()
        if error is None:
            self.count(rpc, "OK")
        else:
            assert isinstance(error, grpc.RpcError), error
            self.failed(rpc, error)

    def as_dict(self) -> dict[str, object]:
        with self._lock:
            return {"calls": {rpc: dict(c) for rpc, c in self.counts.items()}, "with_retry_info": self.retry_info}


# -- tenant A's loads (run in a child process) -----------------------------------------------------


@contextmanager
def hammering(
    target: str, threads: int, work: Callable[[MemoryClient, int], None], pause: float = 0.0
) -> Iterator[None]:
    """``threads`` threads, each on its own connection, calling ``work(client, i)`` back to back
    (each call after a ``pause`` s sleep) until the block ends."""
    stop = threading.Event()

    def loop(n: int) -> None:
        with connect(target) as client:
            i = n
            while not stop.wait(pause):
                work(client, i)
                i += threads

    pool = [threading.Thread(target=loop, args=(n,), daemon=True) for n in range(threads)]
    for thread in pool:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in pool:
            thread.join()


@contextmanager
def holding_streams(target: str, settings: Settings, after_event_id: int, outcomes: Outcomes) -> Iterator[None]:
    """``settings.streams`` idle WatchEvents streams and ``settings.unread`` replaying ones that
    are never read, ``STREAMS_PER_CHANNEL`` to a connection; all cancelled when the block ends.
    Opening a stream does not block, so one thread opens them all."""
    idle = events_pb2.WatchEventsRequest(tenant=TENANT_A, after_event_id=after_event_id)
    unread = events_pb2.WatchEventsRequest(tenant=TENANT_A)
    deadline = settings.phase_seconds + 60  # a backstop only: the block cancels them
    channels: list[grpc.Channel] = []
    calls: list[Any] = []
    for count, request, options in ((settings.streams, idle, ()), (settings.unread, unread, TINY_WINDOW)):
        for first in range(0, count, STREAMS_PER_CHANNEL):
            channel = grpc.insecure_channel(target, options=[*OWN_CONNECTION, *options])
            channels.append(channel)
            watch = events_pb2_grpc.EventsServiceStub(channel).WatchEvents
            calls += [watch(request, timeout=deadline) for _ in range(min(STREAMS_PER_CHANNEL, count - first))]
    try:
        yield
    finally:
        for call in calls:
            if call.done():  # ended before its phase did: refused, or failed
                outcomes.failed("WatchEvents", call)
            else:
                outcomes.count("WatchEvents", "open at the end")
                call.cancel()
        for channel in channels:
            channel.close()


@contextmanager
def abandoning_flushes(target: str, settings: Settings, corpus: Corpus, outcomes: Outcomes) -> Iterator[None]:
    """A thread enqueues fast writes to A whenever its queue is under ``BACKLOG`` deep (so a flush
    waits a few seconds, and the backlog drains soon after the phase); every ``FLUSH_INTERVAL`` s,
    ``settings.flushes`` Flush calls asking for a ``FLUSH_SERVER_WAIT`` s wait are given up after
    ``FLUSH_CLIENT_DEADLINE`` s."""
    texts = corpus.memories(2 * MEMORIES, 2000)
    status_request = hot_path_pb2.HotPathRequest(tenant=TENANT_A)

    def enqueue(client: MemoryClient, i: int) -> None:
        status = outcomes.call("Status", client.hot_path_stub.Status, status_request, A_DEADLINE)
        if status is None or status.queue_depth >= BACKLOG:
            time.sleep(0.05)
            return
        items = [
            memory_pb2.RetainItem(text=f"{texts[(i * ENQUEUE_BATCH + j) % len(texts)]} #{i}-{j}")
            for j in range(ENQUEUE_BATCH)
        ]
        request = memory_pb2.RetainBatchRequest(
            tenant=TENANT_A, items=items, request_id=f"enqueue-{i}-{time.time_ns()}", fast=True
        )
        outcomes.call("RetainBatch (fast)", client.memory.RetainBatch, request, A_DEADLINE)

    def abandon(client: MemoryClient, _: int) -> None:
        request = hot_path_pb2.FlushRequest(tenant=TENANT_A, timeout_seconds=FLUSH_SERVER_WAIT)
        calls = [
            client.hot_path_stub.Flush.future(request, timeout=FLUSH_CLIENT_DEADLINE) for _ in range(settings.flushes)
        ]
        for call in calls:
            outcomes.finished("Flush", call)

    with hammering(target, 1, enqueue), hammering(target, 1, abandon, pause=FLUSH_INTERVAL):
        yield


def flooding_recalls(target: str, corpus: Corpus, outcomes: Outcomes) -> ContextManager[None]:
    queries = corpus.queries(MEMORIES, 500, seed=9)

    def recall(client: MemoryClient, i: int) -> None:
        request = memory_pb2.RecallRequest(tenant=TENANT_A, query=queries[i % len(queries)], k=K)
        outcomes.call("Recall", client.memory.Recall, request, A_DEADLINE)

    return hammering(target, FLOOD_THREADS, recall)


def lookalike_batches(target: str, corpus: Corpus, outcomes: Outcomes) -> ContextManager[None]:
    base = " ".join(corpus.memories(3 * MEMORIES, 400))[:LOOKALIKE_CHARS]

    def retain(client: MemoryClient, i: int) -> None:
        items = [
            memory_pb2.RetainItem(text=f"look-alike {i}-{j}: {base}"[:LOOKALIKE_CHARS]) for j in range(LOOKALIKE_ITEMS)
        ]
        request = memory_pb2.RetainBatchRequest(
            tenant=TENANT_A, items=items, request_id=f"lookalike-{i}-{time.time_ns()}"
        )
        outcomes.call("RetainBatch (look-alike)", client.memory.RetainBatch, request, BATCH_DEADLINE)

    return hammering(target, LOOKALIKE_THREADS, retain)


def noise(phase: str, target: str, settings: Settings, after_event_id: int, outcomes: Outcomes) -> ContextManager[None]:
    corpus = Corpus()
    loads: dict[str, Callable[[], ContextManager[None]]] = {
        "streams": lambda: holding_streams(target, settings, after_event_id, outcomes),
        "flushes": lambda: abandoning_flushes(target, settings, corpus, outcomes),
        "flood": lambda: flooding_recalls(target, corpus, outcomes),
        "lookalike": lambda: lookalike_batches(target, corpus, outcomes),
    }
    return loads[phase]()


def noise_main(
    phase: str, target: str, settings: Settings, after_event_id: int, ready: Any, stop: Any, results: Any
) -> None:
    """The child process of a noisy phase: A's load runs from ``ready`` until ``stop``."""
    outcomes = Outcomes()
    with noise(phase, target, settings, after_event_id, outcomes):
        ready.set()
        stop.wait()
    results.put(outcomes.as_dict())


@contextmanager
def tenant_a(phase: str, server: Server, settings: Settings) -> Iterator[dict[str, object]]:
    """A's load for the phase in a child process; the dict receives A's outcomes at the end."""
    outcomes: dict[str, object] = {}
    if phase == "quiet":
        yield outcomes
        return
    context = multiprocessing.get_context("spawn")
    ready, stop, results = context.Event(), context.Event(), context.Queue()
    child = context.Process(
        target=noise_main,
        args=(phase, server.target, settings, server.last_event_id, ready, stop, results),
        daemon=True,
    )
    child.start()
    try:
        if not ready.wait(120):
            raise RuntimeError(f"tenant A's {phase} load did not start")
        time.sleep(settings.settle_seconds)
        yield outcomes
        stop.set()
        outcomes.update(results.get(timeout=120))
    finally:
        stop.set()
        child.join(timeout=30)
        if child.is_alive():
            child.terminate()
            child.join()


# -- tenant B, threads, recovery ------------------------------------------------------------------


def quiet_tenant(client: MemoryClient, queries: Sequence[str], seconds: float, rate: float) -> dict[str, object]:
    """B's Recall at ``rate`` a second for ``seconds``, open loop: each call starts on schedule."""
    finished = threading.Condition()
    latencies: list[float] = []
    failures: Counter[str] = Counter()

    def done(future: grpc.Future[Any], began: float) -> None:
        elapsed = time.perf_counter() - began
        error = future.exception()
        with finished:
            latencies.append(elapsed)
            if error is not None:
                assert isinstance(error, grpc.RpcError), error
                failures[describe(error)[0]] += 1
            elif elapsed > B_DEADLINE:
                failures["SLOWER_THAN_DEADLINE"] += 1
            finished.notify_all()

    calls = int(seconds * rate)
    start = time.perf_counter()
    for i in range(calls):
        time.sleep(max(0.0, start + i / rate - time.perf_counter()))
        request = memory_pb2.RecallRequest(tenant=TENANT_B, query=queries[i % len(queries)], k=K)
        began = time.perf_counter()
        client.memory.Recall.future(request, timeout=B_DEADLINE).add_done_callback(
            lambda f, began=began: done(f, began)
        )
    with finished:
        finished.wait_for(lambda: len(latencies) == calls, timeout=B_DEADLINE + 30)
        return {
            **percentiles(latencies),
            "calls": calls,
            "failed": sum(failures.values()) + calls - len(latencies),
            "failures": dict(failures),
        }


@contextmanager
def sampling_threads(server: Server, every: float = 0.25) -> Iterator[list[int]]:
    """The server's thread count, sampled every ``every`` s while the block runs."""
    samples = [server.threads()]
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            samples.append(server.threads())

    sampler = threading.Thread(target=loop, daemon=True)
    sampler.start()
    try:
        yield samples
    finally:
        stop.set()
        sampler.join()


def recover(server: Server, limit: float) -> float | None:
    """Seconds until three Pings in a row answer within ``PROMPT_PING_S`` and A's hot-path backlog
    is flushed; None if that did not happen within ``limit`` s."""
    began = time.perf_counter()
    prompt = 0
    with connect(server.target, timeout=1.0) as client:
        while prompt < 3:
            if time.perf_counter() - began > limit:
                return None
            t0 = time.perf_counter()
            try:
                client.ping()
                prompt = prompt + 1 if time.perf_counter() - t0 < PROMPT_PING_S else 0
            except MnemosyneClientError:
                prompt = 0
                time.sleep(0.1)
        try:
            client.hot_path(TENANT_A, "flush", timeout_seconds=max(1.0, limit - (time.perf_counter() - began)))
        except MnemosyneClientError:
            return None
    return time.perf_counter() - began


def run_phase(
    phase: str, server: Server, client: MemoryClient, queries: Sequence[str], settings: Settings
) -> dict[str, object]:
    with sampling_threads(server) as threads, tenant_a(phase, server, settings) as outcomes_a:
        b = quiet_tenant(client, queries, settings.phase_seconds, settings.rate)
    recovery = recover(server, settings.recovery_limit_s)
    print(
        f"  {server.name} {phase}: B p50 {b['p50_ms']:.1f} ms p99 {b['p99_ms']:.1f} ms, failed {b['failed']}"
        f"/{b['calls']}; recovered in {'-' if recovery is None else f'{recovery:.1f} s'}",
        flush=True,
    )
    return {"b": b, "a": outcomes_a, "threads_start": threads[0], "threads_max": max(threads), "recovery_s": recovery}


def measure_phases(
    servers: Sequence[Server], queries: Sequence[str], settings: Settings
) -> dict[str, dict[str, object]]:
    """Each phase on each server, the servers taking turns (the first one alternating)."""
    results: dict[str, dict[str, object]] = {s.name: {} for s in servers}
    with ExitStack() as stack:
        clients = {s.name: stack.enter_context(connect(s.target, timeout=B_DEADLINE)) for s in servers}
        for n, phase in enumerate(PHASES):
            for server in servers[::-1] if n % 2 else servers:
                results[server.name][phase] = run_phase(phase, server, clients[server.name], queries, settings)
    return results


# -- the serving floor ----------------------------------------------------------------------------


def floor_cell(
    clients: Sequence[MemoryClient], work: Callable[[MemoryClient, int], object], seconds: float
) -> dict[str, object]:
    """Each client in its own thread calls ``work`` back to back for ``seconds``."""
    latencies: list[list[float]] = [[] for _ in clients]
    errors = Counter[str]()
    barrier = threading.Barrier(len(clients) + 1)

    def loop(n: int) -> None:
        barrier.wait()
        end = time.perf_counter() + seconds
        i = n
        while (t0 := time.perf_counter()) < end:
            try:
                work(clients[n], i)
                latencies[n].append(time.perf_counter() - t0)
            except MnemosyneClientError as exc:
                errors[exc.code.name] += 1
            i += len(clients)

    pool = [threading.Thread(target=loop, args=(n,)) for n in range(len(clients))]
    for thread in pool:
        thread.start()
    barrier.wait()
    for thread in pool:
        thread.join()
    samples = [x for per_client in latencies for x in per_client]
    return {
        **percentiles(samples),
        "calls_per_s": len(samples) / seconds,
        "calls": len(samples) + sum(errors.values()),
        "errors": dict(errors),
    }


def median_of(rounds: Sequence[dict[str, Any]]) -> dict[str, object]:
    return {
        **{key: float(np.median([r[key] for r in rounds])) for key in ("p50_ms", "p99_ms", "calls_per_s")},
        "calls": sum(r["calls"] for r in rounds),
        "errors": sum(sum(r["errors"].values()) for r in rounds),
        "rounds": list(rounds),
    }


def measure_floor(servers: Sequence[Server], queries: Sequence[str], settings: Settings) -> dict[str, dict[str, Any]]:
    """Ping and Recall at each concurrency level on each server, interleaved in rounds."""
    calls: dict[str, Callable[[MemoryClient, int], object]] = {
        "ping": lambda client, i: client.ping(),
        "recall": lambda client, i: client.recall(TENANT_B, queries[i % len(queries)], k=K),
    }
    rounds: dict[tuple[str, str, int], list[dict[str, object]]] = defaultdict(list)
    with ExitStack() as stack:
        clients = {
            s.name: [stack.enter_context(connect(s.target, timeout=10)) for _ in range(max(LEVELS))] for s in servers
        }
        for pool in clients.values():
            for client in pool:
                client.ping()  # connected before the timing starts
        for r in range(settings.rounds):
            for level in LEVELS:
                for server in servers[::-1] if r % 2 else servers:
                    for name, work in calls.items():
                        rounds[server.name, name, level].append(
                            floor_cell(clients[server.name][:level], work, settings.cell_seconds)
                        )
            print(f"  floor round {r + 1}/{settings.rounds} done", flush=True)
    floor: dict[str, dict[str, Any]] = defaultdict(dict)
    for (server_name, name, level), per_round in rounds.items():
        floor[server_name][f"{name}@{level}"] = median_of(per_round)
    return dict(floor)


# -- report ---------------------------------------------------------------------------------------


def a_summary(outcomes: dict[str, Any]) -> tuple[str, str]:
    """(A's calls by outcome, A's RESOURCE_EXHAUSTED refusals by reason) as short text."""
    calls: dict[str, dict[str, int]] = outcomes.get("calls", {})
    if not calls:
        return "-", "-"
    text = "; ".join(
        f"{rpc}: " + ", ".join(f"{o} {n}" for o, n in sorted(c.items())) for rpc, c in sorted(calls.items())
    )
    refused = Counter[str]()
    for c in calls.values():
        refused.update({o.split("/", 1)[-1]: n for o, n in c.items() if o.startswith("RESOURCE_EXHAUSTED")})
    refusals = ", ".join(f"{reason} {n}" for reason, n in sorted(refused.items()))
    return text, (f"{refusals} (RetryInfo {outcomes['with_retry_info']})" if refusals else "0")


def print_report(
    servers: Sequence[Server],
    identities: dict[str, dict[str, Any]],
    floor: dict[str, dict[str, Any]],
    phases: dict[str, dict[str, Any]],
    ratio: float | None,
) -> None:
    print_table(
        "Serving floor: median over rounds of each round's figure (ms; calls/s)",
        ["server", "call", "clients", "p50", "p99", "calls/s", "errors"],
        [
            [s.name, *key.split("@"), cell["p50_ms"], cell["p99_ms"], cell["calls_per_s"], cell["errors"]]
            for s in servers
            for key, cell in floor[s.name].items()
        ],
    )
    if ratio is not None:
        print(f"\nnew/old Ping p50 at 1 client: {ratio:.3f} (switch criterion: within 10%, <= 1.10)")
    print_table(
        "Tenant A during each phase: its calls by outcome, its refusals by reason",
        ["server", "phase", "A calls by outcome", "A refused (RESOURCE_EXHAUSTED)"],
        [
            [s.name, phase, *a_summary(r["a"])]
            for s in servers
            for phase, r in phases[s.name].items()
            if phase != "quiet"
        ],
    )
    for s in servers:
        rows: list[list[object]] = [["tenants loaded", "", "", "", identities[s.name]["threads_after_load"], ""]]
        rows += [
            [
                f"floor {name.replace('@', ', ')} client",
                cell["p50_ms"],
                cell["p99_ms"],
                f"{cell['errors']}/{cell['calls']}",
                "",
                "",
            ]
            for name, cell in floor[s.name].items()
            if name.endswith("@1")
        ]
        rows += [
            [
                f"B during {phase}",
                r["b"]["p50_ms"],
                r["b"]["p99_ms"],
                f"{r['b']['failed']}/{r['b']['calls']}",
                f"{r['threads_start']} -> {r['threads_max']}",
                "-" if r["recovery_s"] is None else r["recovery_s"],
            ]
            for phase, r in phases[s.name].items()
        ]
        print_table(
            f"Summary, {s.name} server ({s.python} {shlex.join(s.args)})".replace(" )", ")"),
            ["measure", "p50 ms", "p99 ms", "failed/calls", "server threads", "recovery s"],
            rows,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-python", help="Python whose installed mnemosyne is the baseline (none: new only)")
    parser.add_argument("--new-python", default=sys.executable)
    parser.add_argument("--old-args", default="", help="extra serve flags of the old server (one quoted string)")
    parser.add_argument("--new-args", default="", help="extra serve flags of the new server (one quoted string)")
    parser.add_argument("--streams", type=int, default=1000, help="idle WatchEvents streams of tenant A")
    parser.add_argument("--unread", type=int, default=100, help="WatchEvents streams of tenant A never read")
    parser.add_argument("--flushes", type=int, default=100, help="abandoned Flush calls of tenant A per second")
    parser.add_argument("--rate", type=float, default=50.0, help="tenant B's recalls per second")
    parser.add_argument("--phase-seconds", type=float, default=0.0, help="length of each phase (default 6, quick 2)")
    parser.add_argument("--rounds", type=int, default=0, help="rounds of the serving floor (default 3, quick 2)")
    parser.add_argument("--quick", action="store_true", help="short phases and cells: a smoke run")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    settings = Settings.from_args(args)
    specs = ([("old", args.old_python, args.old_args)] if args.old_python else []) + [
        ("new", args.new_python, args.new_args)
    ]

    corpus = Corpus()
    queries = corpus.queries(MEMORIES, 500)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mnemo-fairness-") as tmp, ExitStack() as stack:
        servers = [
            stack.enter_context(started(name, python, shlex.split(extra), Path(tmp) / name))
            for name, python, extra in specs
        ]
        identities = {
            s.name: {"python": s.python, "args": s.args, "mnemosyne": s.mnemosyne_path(), "pid": s.pid} for s in servers
        }
        for server in servers:
            load_tenants(server, corpus)
            identities[server.name]["threads_after_load"] = server.threads()
            print(f"{server.name} server ({identities[server.name]['mnemosyne']}): tenants loaded", flush=True)
        floor = measure_floor(servers, queries, settings)
        phases = measure_phases(servers, queries, settings)
    ratio = (floor["new"]["ping@1"]["p50_ms"] / floor["old"]["ping@1"]["p50_ms"]) if args.old_python else None
    print_report(servers, identities, floor, phases, ratio)
    write_json(
        args.out,
        {
            "benchmark": "fairness",
            "settings": asdict(settings),
            "servers": identities,
            "floor": floor,
            "phases": phases,
            "ping_p50_new_over_old_1_client": ratio,
            "seconds": time.perf_counter() - began,
            "constants": {
                "memories": MEMORIES,
                "k": K,
                "b_deadline_s": B_DEADLINE,
                "flush_client_deadline_s": FLUSH_CLIENT_DEADLINE,
                "flush_server_wait_s": FLUSH_SERVER_WAIT,
                "flood_threads": FLOOD_THREADS,
                "lookalike_items": LOOKALIKE_ITEMS,
                "lookalike_chars": LOOKALIKE_CHARS,
                "streams_per_channel": STREAMS_PER_CHANNEL,
            },
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
