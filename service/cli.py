"""The ``mnemosyne`` command: ``serve``, ``health``, ``hash-token``, ``inspect``, ``oplog``, ``drill``.

Every ``serve`` flag can also be set by an environment variable ``MNEMOSYNE_<FLAG>`` (flags win).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Sequence

from mnemosyne.errors import MnemosyneError


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"MNEMOSYNE_{name}", default)


def _seams(name: str) -> frozenset[str]:
    # Test seams (fault injection, crash after commit) are read from the environment only, so no
    # production flag can switch them on by accident.
    return frozenset(filter(None, (_env(name) or "").split(",")))


def _serve(args: argparse.Namespace) -> int:
    from mnemosyne.transport.server import ServerConfig, create_server

    logging.basicConfig(
        level=os.environ.get("MNEMOSYNE_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    config = ServerConfig(
        data_dir=Path(args.data_dir),
        host=args.host,
        port=args.port,
        tokens_file=Path(args.tokens_file) if args.tokens_file else None,
        tokens_json=_env("TOKENS"),
        allow_unauthenticated=_env("ALLOW_UNAUTHENTICATED") == "1",
        max_open_tenants=args.max_open_tenants,
        grace_seconds=args.grace_seconds,
        synchronous=args.synchronous.upper(),
        store_faults=_seams("TEST_FAULTS"),
        crash_after_commit=_seams("TEST_CRASH_AFTER_COMMIT"),
        near_duplicate_threshold=args.near_duplicate_threshold,
        hot_path_workers=args.hot_path_workers,
        hot_path_batch=args.hot_path_batch,
        # Hot-path test seams: workers hold before committing while this file exists; extraction
        # fails on texts containing the marker (a poison operation).
        test_hold_workers_file=Path(_env("TEST_HOLD_WORKERS")) if _env("TEST_HOLD_WORKERS") else None,
        test_poison_marker=_env("TEST_POISON_MARKER") or "",
    )
    running = create_server(config)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # A machine-readable line that tests and supervisors can wait for.
    print(json.dumps({"event": "serving", "port": running.port, "pid": os.getpid()}), flush=True)
    stop.wait()
    logging.getLogger("mnemosyne.server").info("stopping: draining for up to %.0fs", config.grace_seconds)
    running.stop()
    return 0


def _health(args: argparse.Namespace) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(args.target) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            print(f"unhealthy: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    print(status)
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


def _hash_token(args: argparse.Namespace) -> int:
    from mnemosyne.transport.auth import hash_token

    token = sys.stdin.readline().strip()
    if not token:
        print("give the token on standard input", file=sys.stderr)
        return 2
    print(hash_token(token))
    return 0


def _inspect(args: argparse.Namespace) -> int:
    """Read-only look at one tenant file, without the data-directory lock (a server may run)."""
    from mnemosyne.store.inspect import inspect_tenant

    print(json.dumps(inspect_tenant(Path(args.data_dir), args.tenant), indent=2, sort_keys=True))
    return 0


def _oplog(args: argparse.Namespace) -> int:
    """Read-only look at a tenant's operation log (no lock, no workers): what is still open."""
    from mnemosyne.store.oplog_inspect import inspect_oplog

    print(json.dumps(inspect_oplog(Path(args.data_dir), args.tenant), indent=2, sort_keys=True))
    return 0


def _drill(args: argparse.Namespace) -> int:
    from mnemosyne.drills import run_drills

    results = run_drills(Path(args.data_dir), out=print)
    return 0 if results and all(r.passed for r in results) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mnemosyne", description="Mnemosyne: a memory service for AI agents")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gRPC server")
    serve.add_argument("--data-dir", default=_env("DATA_DIR", "./mnemosyne-data"), help="directory of tenant files")
    serve.add_argument("--host", default=_env("HOST", "127.0.0.1"), help="address to bind (default loopback)")
    serve.add_argument("--port", type=int, default=int(_env("PORT", "50051") or 50051), help="gRPC port (0 = any free)")
    serve.add_argument("--metrics-port", type=int, default=int(_env("METRICS_PORT", "9464") or 9464),
                       help="HTTP port for /metrics, /healthz, /readyz (0 = off)")
    serve.add_argument("--tokens-file", default=_env("TOKENS_FILE"), help="JSON file of token hashes and their tenants")
    serve.add_argument("--max-open-tenants", type=int, default=int(_env("MAX_OPEN_TENANTS", "1024") or 1024),
                       help="tenant files kept open at most (LRU)")
    serve.add_argument("--grace-seconds", type=float, default=float(_env("GRACE_SECONDS", "20") or 20),
                       help="how long SIGTERM waits for in-flight calls")
    serve.add_argument("--synchronous", choices=["full", "normal", "FULL", "NORMAL"], default=_env("SYNCHRONOUS", "full"),
                       help="SQLite synchronous setting: full survives power loss, normal only process kills")
    serve.add_argument("--near-duplicate-threshold", type=float,
                       default=float(_env("NEAR_DUPLICATE_THRESHOLD", "0.85") or 0.85),
                       help="embedding cosine at or above which a memory with the same numbers, dates and "
                            "identifiers is named a near duplicate (and Dedup's default); above 1 = off")
    serve.add_argument("--hot-path-workers", type=int, default=int(_env("HOT_PATH_WORKERS", "2") or 2),
                       help="background workers shared by all tenants for asynchronous (fast) writes")
    serve.add_argument("--hot-path-batch", type=int, default=int(_env("HOT_PATH_BATCH", "16") or 16),
                       help="queued operations a worker applies per transaction")
    serve.set_defaults(run=_serve)

    health = commands.add_parser("health", help="exit 0 if the server at --target is SERVING")
    health.add_argument("--target", default="127.0.0.1:50051")
    health.add_argument("--service", default="")
    health.add_argument("--timeout", type=float, default=3.0)
    health.set_defaults(run=_health)

    hash_token = commands.add_parser("hash-token", help="print the SHA-256 of a token read from stdin")
    hash_token.set_defaults(run=_hash_token)

    inspect = commands.add_parser("inspect", help="read-only summary of a tenant file (no lock taken)")
    inspect.add_argument("--data-dir", required=True)
    inspect.add_argument("--tenant", required=True)
    inspect.set_defaults(run=_inspect)

    oplog = commands.add_parser("oplog", help="read-only view of a tenant's operation log (no lock, no workers)")
    oplog.add_argument("--data-dir", required=True)
    oplog.add_argument("--tenant", required=True)
    oplog.set_defaults(run=_oplog)

    drill = commands.add_parser("drill", help="run the five recovery drills (seed 001 §9.6) against fresh servers")
    drill.add_argument("--data-dir", required=True, help="an empty directory the drills may fill")
    drill.set_defaults(run=_drill)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except MnemosyneError as exc:
        print(f"mnemosyne: {exc.message} [{exc.reason}]", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
