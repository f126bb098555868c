"""The ``mnemosyne`` command: ``serve``, ``hash-token``, ``inspect``, ``oplog``, ``restore``, ``members``,
``drill``, and the client commands (``health``, ``mcp``, ``backup``, ``export``, ``import``,
``rebalance``, ``consolidate``), which all reach their server with the same connection flags
(``_add_connection_flags``: target, token, TLS, mutual TLS).

Every ``serve`` flag can also be set by an environment variable ``MNEMOSYNE_<FLAG>`` (flags win).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import Field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mnemosyne.client import MemoryClient, MnemosyneClientError
from mnemosyne.client.errors import from_rpc_error
from mnemosyne.engine.limits import parse_integer, parse_number
from mnemosyne.errors import InvalidArgument, MnemosyneError
from mnemosyne.runtime.interpreter import raise_open_file_limit, tune_interpreter
from mnemosyne.runtime.seams import Seams
from mnemosyne.version import VERSION

T = TypeVar("T")

if TYPE_CHECKING:
    from mnemosyne.engine.limits import Limits
    from mnemosyne.store.membership import Membership
    from mnemosyne.transport.config import ServerConfig


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"MNEMOSYNE_{name}", default)


def _limits(args: argparse.Namespace) -> Limits:
    from mnemosyne.engine.limits import Limits

    return Limits(**{name: getattr(args, name) for name in Limits.__dataclass_fields__})


def _flag_type(parse: Callable[..., T], minimum: float, maximum: float) -> Callable[[str], T]:
    """An argparse type: a number by the one rule for numbers given as text (engine/limits.py
    ``parse_integer`` or ``parse_number``: ASCII digits only), from ``minimum`` to ``maximum``."""

    def typed(text: str) -> T:
        try:
            return parse(text, field="the value", minimum=minimum, maximum=maximum)
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    return typed


_PORT = _flag_type(parse_integer, 0, 65_535)
_COUNT = _flag_type(parse_integer, 0, 2**31 - 1)
_POSITIVE = _flag_type(parse_integer, 1, 2**31 - 1)
_NUMBER = _flag_type(parse_number, 0.0, 1e9)


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _listed(flags: list[str] | None, variable: str) -> tuple[str, ...]:
    """A repeatable flag's values, else its variable's comma-separated ones (the flag wins)."""
    if flags is not None:
        return tuple(flags)
    return tuple(value.strip() for value in (_env(variable) or "").split(",") if value.strip())


def _serve(args: argparse.Namespace) -> int:
    from mnemosyne.engine.config import ConsolidationConfig, EngineConfig, HotPathConfig
    from mnemosyne.engine.llm_extractor import extractor_from_settings
    from mnemosyne.observability import logs
    from mnemosyne.transport.admission import AdmissionLimits
    from mnemosyne.transport.config import ServerConfig

    logs.configure(args.log_format, os.environ.get("MNEMOSYNE_LOG_LEVEL", "INFO"))
    seams = Seams.from_environment()  # a test's; None in production
    if seams is not None and seams.open_files is not None:  # start as under `ulimit -n`
        resource.setrlimit(resource.RLIMIT_NOFILE, seams.open_files)
    soft, hard = raise_open_file_limit()
    logging.getLogger("mnemosyne.server").info("open-file limit: %s (hard limit %s)", soft, hard)
    engine = EngineConfig(
        data_dir=Path(args.data_dir),
        max_open_tenants=args.max_open_tenants,
        synchronous=args.synchronous.upper(),
        limits=_limits(args),
        near_duplicate_threshold=args.near_duplicate_threshold,
        ann_threshold=args.ann_threshold,
        hot_path=HotPathConfig(
            workers=args.hot_path_workers,
            batch=args.hot_path_batch,
            sync=args.hot_path_sync,
            event_retention_seconds=args.event_retention_seconds,
        ),
        consolidation=ConsolidationConfig(
            idle_seconds=args.consolidate_idle_seconds,
            tenants=_listed(args.consolidate_tenant, "CONSOLIDATE_TENANT"),
        ),
        membership=_membership(args),
    )
    config = ServerConfig(
        engine=engine,
        host=args.host,
        port=args.port,
        tokens_file=_path(args.tokens_file),
        tokens_json=_env("TOKENS"),
        allow_unauthenticated=_env("ALLOW_UNAUTHENTICATED") == "1",
        grace_seconds=args.grace_seconds,
        admission=AdmissionLimits(**{name: getattr(args, name) for name in AdmissionLimits.__dataclass_fields__}),
        extractor=extractor_from_settings(
            args.extractor,
            base_url=args.llm_base_url,
            model=args.llm_model,
            timeout=args.llm_timeout,
            retries=args.llm_retries,
            concurrency=args.llm_concurrency,
            fallback=args.llm_fallback,
        ),
        embedder=args.embedder,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        http_port=args.http_port,
        http_host=args.http_host,
        http_allowed_hosts=_listed(args.http_allowed_host, "HTTP_ALLOWED_HOST"),
        http_cors_origins=_listed(args.http_cors_origin, "HTTP_CORS_ORIGIN"),
        tls_cert=_path(args.tls_cert),
        tls_key=_path(args.tls_key),
        tls_client_ca=_path(args.tls_client_ca),
        drain_delay_seconds=args.drain_delay_seconds,
        forwarding=not args.no_forwarding,
    )
    return asyncio.run(_run_server(config, seams))


def _membership(args: argparse.Namespace) -> Membership | None:
    """The member list of --members (``@FILE``: read from a file), or None without one."""
    from mnemosyne.store.membership import Membership, member_list_text

    listed = member_list_text(args.members or "", "--members")
    if not listed.strip():
        if args.member:
            raise SystemExit("--member needs --members (the whole member list, this member included)")
        return None
    if not args.member:
        raise SystemExit("--members needs --member (the id of this member in the list)")
    previous = member_list_text(args.previous_members or "", "--previous-members")
    return Membership.parse(args.member, listed, epoch=args.ownership_epoch, previous=previous)


async def _run_server(config: ServerConfig, seams: Seams | None) -> int:
    from mnemosyne.transport.server import start_server

    if config.http_port:  # the HTTP stack (MCP's SDK above all) is loaded only to be served
        from mnemosyne.transport.http.surface import HttpSurface

        running = await start_server(config, http_surface=HttpSurface, seams=seams)
    else:
        running = await start_server(config, seams=seams)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # A machine-readable line that tests and supervisors can wait for.
    print(
        json.dumps(
            {
                "event": "serving",
                "port": running.port,
                "metrics_port": running.metrics_port,
                "http_port": running.http_port,
                "pid": os.getpid(),
            }
        ),
        flush=True,
    )
    await stop.wait()
    logging.getLogger("mnemosyne.server").info("stopping: draining for up to %.0fs", config.grace_seconds)
    await running.stop()
    return 0


def _health(args: argparse.Namespace) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with _client(args) as client:
        try:
            response = health_pb2_grpc.HealthStub(client.channel).Check(  # type: ignore[attr-defined]  # the published stubs omit the stub's methods
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            print(f"unhealthy: {from_rpc_error(exc, args.target)}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    print(status)
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


DEFAULT_TARGET = "127.0.0.1:50051"


def _add_connection_flags(parser: argparse.ArgumentParser, token: str, *, target: bool = True) -> None:
    """How a client command reaches its server: --target (MNEMOSYNE_TARGET), --token-file
    (MNEMOSYNE_TOKEN), --tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name
    (MNEMOSYNE_CLIENT_TLS...; CLIENT, so a server's own MNEMOSYNE_TLS_CERT is never taken for a
    client certificate). ``token``: whose token the command needs. ``target=False``: the command
    names its servers otherwise (rebalance's member lists)."""
    group = parser.add_argument_group("connection to the server")
    if target:
        group.add_argument(
            "--target",
            default=_env("TARGET", DEFAULT_TARGET),
            help=f"HOST:PORT of the server (MNEMOSYNE_TARGET; default {DEFAULT_TARGET})",
        )
    group.add_argument("--token-file", help=f"a file holding {token} (default: MNEMOSYNE_TOKEN)")
    group.add_argument(
        "--tls",
        action="store_true",
        default=_env("CLIENT_TLS") == "1",
        help="connect with TLS, trusting the system's roots (implied by the other --tls-* flags; MNEMOSYNE_CLIENT_TLS=1)",
    )
    group.add_argument(
        "--tls-ca", default=_env("CLIENT_TLS_CA"), help="PEM CA bundle to trust instead (MNEMOSYNE_CLIENT_TLS_CA)"
    )
    group.add_argument(
        "--tls-cert",
        default=_env("CLIENT_TLS_CERT"),
        help="client certificate (PEM), for mutual TLS (MNEMOSYNE_CLIENT_TLS_CERT)",
    )
    group.add_argument("--tls-key", default=_env("CLIENT_TLS_KEY"), help="key of --tls-cert (MNEMOSYNE_CLIENT_TLS_KEY)")
    group.add_argument(
        "--tls-server-name",
        default=_env("CLIENT_TLS_SERVER_NAME"),
        help="name to check the server certificate against (default: the target's host; "
        "MNEMOSYNE_CLIENT_TLS_SERVER_NAME)",
    )


def _token(args: argparse.Namespace) -> str | None:
    """A client command's token: from --token-file, else MNEMOSYNE_TOKEN — never an argument,
    which every user of the machine can read in the process list."""
    if not args.token_file:
        return _env("TOKEN") or None
    try:
        return Path(args.token_file).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(
            f"cannot read --token-file {args.token_file}: {exc}", reason="TOKEN_FILE_UNREADABLE"
        ) from None


def _client_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``MemoryClient``'s keyword arguments from the connection flags: token, TLS credentials
    (None: plaintext) and channel options."""
    from mnemosyne.transport.tls import channel_credentials

    options = [("grpc.ssl_target_name_override", args.tls_server_name)] if args.tls_server_name else []
    tls = args.tls or any((args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name))
    credentials = channel_credentials(_path(args.tls_ca), _path(args.tls_cert), _path(args.tls_key)) if tls else None
    return {"token": _token(args), "credentials": credentials, "options": options}


def _client(args: argparse.Namespace) -> MemoryClient:
    """The client of a command's connection flags, to its --target."""
    return MemoryClient(args.target, **_client_settings(args))


def _mcp(args: argparse.Namespace) -> int:
    """The MCP server over stdio: stdout carries the protocol, so every log line goes to stderr."""
    import anyio

    from mnemosyne.client.host import MemoryHost
    from mnemosyne.client.mcp_host import Agent, Session, build_server

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    with _client(args) as client:
        # One process is one session: its agent is this process's.
        session = Session(MemoryHost(client, args.tenant), args.workspace, Agent())
        anyio.run(build_server(lambda _ctx: session).run_stdio_async)
    return 0


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


LIMIT_HELP = {
    "max_text_chars": "characters of one memory's text",
    "max_query_chars": "characters of a recall query",
    "max_batch_items": "items of one RetainBatch",
    "max_k": "largest k of a recall",
    "max_metadata_pairs": "metadata pairs of one memory",
    "max_metadata_key_chars": "characters of a metadata key",
    "max_metadata_value_chars": "characters of a metadata value",
    "max_page_size": "largest page of a list call",
    "max_records_per_workspace": "records one workspace may hold",
    "max_record_bytes": "bytes of one workspace record",
    "max_tenant_memories": "quota: live memories per tenant (0 = unlimited)",
    "max_tenant_bytes": "quota: database bytes per tenant (0 = unlimited)",
    "max_request_bytes": "bytes of one encoded request (the gRPC transport accepts twice this)",
}


ADMISSION_HELP = {
    "worker_threads": "threads running the engine's blocking work, shared by every tenant",
    "calls_per_tenant": "of the worker threads, how many one tenant's calls may occupy at once (its fair share)",
    "reader_threads": "threads running the short reads (Recall, GetMemory, ListMemories...), shared by every tenant",
    "reader_share": "of the reader threads, how many one tenant's reads may occupy at once (at most --reader-threads)",
    "queued_calls_per_tenant": "calls of one tenant waiting for a thread; past it RESOURCE_EXHAUSTED",
    "queued_calls": "calls of every tenant waiting for a thread; past it RESOURCE_EXHAUSTED",
    "streams_per_tenant": "open server streams (WatchEvents, AggregateStats) of one tenant",
    "streams": "open server streams of every tenant",
    "waiting_calls_per_tenant": "Flush and Disable calls of one tenant waiting for its queue",
    "waiting_calls": "Flush and Disable calls of every tenant waiting",
}


def _add_int_flags(parser: argparse.ArgumentParser, fields: dict[str, Field[Any]], help_of: dict[str, str]) -> None:
    """One flag (and MNEMOSYNE_ variable) per int field of a limits dataclass: --max-text-chars,
    MNEMOSYNE_MAX_TEXT_CHARS, --worker-threads..."""
    for name, spec in fields.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            type=_COUNT,
            default=_env(name.upper()) or str(spec.default),  # a string default passes through type
            help=f"{help_of[name]} (default {spec.default})",
        )


def _oplog(args: argparse.Namespace) -> int:
    """Read-only look at a tenant's operation log (no lock, no workers): what is still open."""
    from mnemosyne.store.oplog_inspect import inspect_oplog

    print(json.dumps(inspect_oplog(Path(args.data_dir), args.tenant), indent=2, sort_keys=True))
    return 0


def _members(args: argparse.Namespace) -> int:
    """``mnemosyne serve`` for each of ``--count`` members on loopback, until SIGINT or SIGTERM."""
    from mnemosyne.cli.server_process import LocalMembers

    if not 1 <= args.count <= 64:
        raise SystemExit("--count: give 1 to 64 members")
    flags = [flag for flag in args.serve_flags if flag != "--"]
    deployment = LocalMembers(
        Path(args.data_dir),
        args.count,
        args=flags,
        base_port=args.port,
        http_base_port=args.http_port,
        metrics_base_port=args.metrics_port,
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    deployment.start()
    try:
        print(json.dumps({"members": deployment.members}), flush=True)
        for member, process in zip(deployment.ids, deployment.processes):
            http = f", HTTP http://127.0.0.1:{process.http_port}" if process.http_port else ""
            print(f"member {member}: gRPC {process.target}{http}, data {process.data_dir}", file=sys.stderr)
        print(f"clients: MemoryClient('', members={deployment.members!r}); Ctrl-C stops them all", file=sys.stderr)
        while not stop.wait(1.0):
            if any(p.process is not None and p.process.poll() is not None for p in deployment.processes):
                print("a member exited; stopping the others", file=sys.stderr)
                return 1
        return 0
    finally:
        deployment.stop()


def _drill(args: argparse.Namespace) -> int:
    from mnemosyne.cli.drills import run_drills

    results = run_drills(Path(args.data_dir), out=print)
    return 0 if results and all(r.passed for r in results) else 1


def _add_serve_flags(serve: argparse.ArgumentParser) -> None:
    """The flags of ``serve``; each default is the configuration's own (engine/config.py,
    transport/server.py, engine/limits.py, transport/admission.py), unless MNEMOSYNE_<FLAG> is set."""
    from mnemosyne.engine.config import EMBEDDERS, ConsolidationConfig, EngineConfig, HotPathConfig
    from mnemosyne.engine.limits import Limits
    from mnemosyne.transport.admission import AdmissionLimits
    from mnemosyne.transport.config import ServerConfig

    def default(cls: type, name: str, variable: str) -> str:
        value = _env(variable)
        if value is not None:
            return value
        given = cls.__dataclass_fields__[name].default  # type: ignore[attr-defined]  # every config class is a dataclass
        return f"{given:g}" if isinstance(given, float) else str(given)

    serve.add_argument("--data-dir", default=_env("DATA_DIR", "./mnemosyne-data"), help="directory of tenant files")
    serve.add_argument(
        "--host", default=default(ServerConfig, "host", "HOST"), help="address to bind (default loopback)"
    )
    serve.add_argument(
        "--port", type=_PORT, default=default(ServerConfig, "port", "PORT"), help="gRPC port (0 = any free)"
    )
    serve.add_argument(
        "--metrics-port",
        type=_PORT,
        default=default(ServerConfig, "metrics_port", "METRICS_PORT"),
        help="HTTP port for /metrics, /healthz, /readyz (0 = off)",
    )
    serve.add_argument(
        "--http-port",
        type=_PORT,
        default=default(ServerConfig, "http_port", "HTTP_PORT"),
        help="port of the HTTP/JSON API and /openapi.json (0 = off)",
    )
    serve.add_argument(
        "--http-host", default=_env("HTTP_HOST"), help="address of the HTTP port (default: the gRPC --host)"
    )
    serve.add_argument(
        "--http-allowed-host",
        action="append",
        default=None,
        help="a Host name the HTTP port answers to besides loopback and its own address (repeat; '*' = any; "
        "MNEMOSYNE_HTTP_ALLOWED_HOST, comma-separated)",
    )
    serve.add_argument(
        "--http-cors-origin",
        action="append",
        default=None,
        help="a web origin (e.g. https://console.example.com) whose pages may call the HTTP API (repeat; "
        "MNEMOSYNE_HTTP_CORS_ORIGIN, comma-separated); none by default",
    )
    serve.add_argument("--tokens-file", default=_env("TOKENS_FILE"), help="JSON file of token hashes and their tenants")
    serve.add_argument(
        "--max-open-tenants",
        type=_COUNT,
        default=default(EngineConfig, "max_open_tenants", "MAX_OPEN_TENANTS"),
        help="tenant files kept open at most (LRU; fewer when the open-file limit cannot hold them)",
    )
    serve.add_argument(
        "--grace-seconds",
        type=_NUMBER,
        default=default(ServerConfig, "grace_seconds", "GRACE_SECONDS"),
        help="how long SIGTERM waits for in-flight calls",
    )
    serve.add_argument(
        "--synchronous",
        choices=["full", "normal", "FULL", "NORMAL"],
        default=default(EngineConfig, "synchronous", "SYNCHRONOUS").lower(),
        help="SQLite synchronous setting: full survives power loss, normal only process kills",
    )
    serve.add_argument(
        "--near-duplicate-threshold",
        type=_NUMBER,
        default=default(EngineConfig, "near_duplicate_threshold", "NEAR_DUPLICATE_THRESHOLD"),
        help="embedding cosine at or above which a memory with the same numbers, dates and "
        "identifiers is named a near duplicate (and Dedup's default); above 1 = off",
    )
    serve.add_argument(
        "--ann-threshold",
        type=_COUNT,
        default=default(EngineConfig, "ann_threshold", "ANN_THRESHOLD"),
        help="memories in a tenant from which recall uses an approximate vector index (exact scan below)",
    )
    serve.add_argument(
        "--extractor",
        choices=["rules", "openai"],
        default=_env("EXTRACTOR", "rules"),
        help="facts/triples extractor: rules (offline) or openai (an OpenAI-compatible chat API)",
    )
    # The LLM settings default to MNEMOSYNE_LLM_* (read in llm_extractor); the API key is read
    # from MNEMOSYNE_LLM_API_KEY only, never a flag, so it does not show in the process list.
    serve.add_argument(
        "--llm-base-url", help="chat API base incl. version, e.g. https://api.openai.com/v1 (MNEMOSYNE_LLM_BASE_URL)"
    )
    serve.add_argument("--llm-model", help="model name (MNEMOSYNE_LLM_MODEL)")
    serve.add_argument(
        "--llm-timeout", type=_NUMBER, help="seconds per model call attempt (MNEMOSYNE_LLM_TIMEOUT, default 30)"
    )
    serve.add_argument(
        "--llm-retries", type=_COUNT, help="retries on timeout/429/5xx (MNEMOSYNE_LLM_RETRIES, default 2)"
    )
    serve.add_argument(
        "--llm-concurrency",
        type=_COUNT,
        help="threads extracting the items of multi-item writes, shared by the server (MNEMOSYNE_LLM_CONCURRENCY, default 8)",
    )
    serve.add_argument(
        "--llm-fallback",
        choices=["rules", "none"],
        help="on a failed model call use the rules extractor instead of failing the write (MNEMOSYNE_LLM_FALLBACK)",
    )
    serve.add_argument(
        "--metrics-host", default=_env("METRICS_HOST"), help="address of the metrics port (default: the gRPC --host)"
    )
    serve.add_argument("--tls-cert", default=_env("TLS_CERT"), help="PEM certificate chain: serve gRPC over TLS")
    serve.add_argument("--tls-key", default=_env("TLS_KEY"), help="PEM private key of --tls-cert")
    serve.add_argument(
        "--tls-client-ca",
        default=_env("TLS_CLIENT_CA"),
        help="PEM CA bundle: require client certificates signed by it (mutual TLS)",
    )
    serve.add_argument(
        "--drain-delay-seconds",
        type=_NUMBER,
        default=default(ServerConfig, "drain_delay_seconds", "DRAIN_DELAY_SECONDS"),
        help="after SIGTERM, keep serving this long while health reports NOT_SERVING",
    )
    serve.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=_env("LOG_FORMAT", "text"),
        help="stderr log lines as text or JSON (one object per line)",
    )
    serve.add_argument(
        "--member",
        default=_env("MEMBER"),
        help="this server's id in --members (docs/scale-out.md)",
    )
    serve.add_argument(
        "--members",
        default=_env("MEMBERS"),
        help="every member as ID=HOST:PORT,... (or @FILE); each tenant is owned by one (default: one server holds all)",
    )
    serve.add_argument(
        "--previous-members",
        default=_env("PREVIOUS_MEMBERS"),
        help="during a rebalance: the member list before it (or @FILE); a tenant with no file on this member "
        "is where that list's owner is until it is moved (docs/scale-out.md#moving-tenants)",
    )
    serve.add_argument(
        "--ownership-epoch",
        type=_COUNT,
        default=_env("OWNERSHIP_EPOCH") or "1",
        help="the ownership epoch new and adopted tenant files are held at (a move raises a tenant's own)",
    )
    serve.add_argument(
        "--no-forwarding",
        action="store_true",
        default=_env("NO_FORWARDING") == "1",
        help="refuse (NOT_OWNER) a call for a tenant another member owns instead of forwarding it",
    )
    _add_int_flags(serve, Limits.__dataclass_fields__, LIMIT_HELP)
    _add_int_flags(serve, AdmissionLimits.__dataclass_fields__, ADMISSION_HELP)
    serve.add_argument(
        "--embedder",
        choices=list(EMBEDDERS),
        default=default(ServerConfig, "embedder", "EMBEDDER"),
        help="embedder for new vectors: hashing (built in) or minilm (the minilm extra)",
    )
    serve.add_argument(
        "--hot-path-workers",
        type=_COUNT,
        default=default(HotPathConfig, "workers", "HOT_PATH_WORKERS"),
        help="background workers shared by all tenants for asynchronous (fast) writes",
    )
    serve.add_argument(
        "--hot-path-batch",
        type=_COUNT,
        default=default(HotPathConfig, "batch", "HOT_PATH_BATCH"),
        help="queued operations a worker applies per transaction",
    )
    serve.add_argument(
        "--hot-path-sync",
        choices=["round", "enqueue"],
        default=default(HotPathConfig, "sync", "HOT_PATH_SYNC"),
        help="with --synchronous full, fsync an accepted fast write after the worker applies it "
        "(round: enqueues take no fsync) or before the enqueue returns (enqueue)",
    )
    serve.add_argument(
        "--consolidate-tenant",
        action="append",
        default=None,
        help="consolidate this tenant's finished sessions in the background (repeat; "
        "MNEMOSYNE_CONSOLIDATE_TENANT, comma-separated); none by default",
    )
    serve.add_argument(
        "--consolidate-idle-seconds",
        type=_NUMBER,
        default=default(ConsolidationConfig, "idle_seconds", "CONSOLIDATE_IDLE_SECONDS"),
        help="a session (thread) is finished once its newest memory is this old",
    )
    serve.add_argument(
        "--event-retention-seconds",
        type=_NUMBER,
        default=default(HotPathConfig, "event_retention_seconds", "EVENT_RETENTION_SECONDS"),
        help="delete finished hot-path events this long after they finished (0: keep forever)",
    )


def _progress(line: str) -> None:
    """A line per tenant on a terminal; nothing when stderr is a file or a pipe."""
    if sys.stderr.isatty():
        print(line, file=sys.stderr, flush=True)


def _backup(args: argparse.Namespace) -> int:
    from mnemosyne.cli.backup import write_backup

    with _client(args) as client:
        summary = write_backup(client, Path(args.to), tenants=args.tenant, progress=_progress)
    print(
        f"backup of {args.target} in {args.to}: {summary.copied} tenants copied, {summary.unchanged} unchanged, "
        f"{summary.skipped} skipped, {summary.bytes} bytes received"
    )
    return 1 if summary.skipped else 0


def _restore(args: argparse.Namespace) -> int:
    from mnemosyne.cli.backup import restore

    restored = restore(
        Path(args.from_dir), Path(args.data_dir), tenants=args.tenant, replace=args.replace, progress=_progress
    )
    print(f"restored {len(restored)} tenants from {args.from_dir} into {args.data_dir}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from mnemosyne.cli.archive import write_archive

    with _client(args) as client:
        copy = write_archive(client, args.tenant, Path(args.to))
    print(f"exported {copy.tenant} ({copy.memories} memories, head {copy.head_hash[:12]}…) to {args.to}")
    return 0


def _rebalance(args: argparse.Namespace) -> int:
    from mnemosyne.cli.rebalance import rebalance
    from mnemosyne.client.routing import parse_members
    from mnemosyne.store.membership import member_list_text

    lists = {
        flag: member_list_text(value, flag)
        for flag, value in (("--from", args.from_members), ("--to", args.to_members))
    }
    for flag, listed in lists.items():
        try:
            parse_members(listed)
        except ValueError as exc:
            raise InvalidArgument(f"{flag}: {exc}", reason="CONFIG_INVALID") from None
    settings = _client_settings(args)
    return rebalance(
        lists["--from"],
        lists["--to"],
        token=settings.pop("token"),
        parallel=args.parallel,
        client_options=settings,
    )


def _import(args: argparse.Namespace) -> int:
    from mnemosyne.cli.archive import import_archive

    with _client(args) as client:
        result = import_archive(client, Path(args.from_file), tenant=args.tenant or "", replace=args.replace)
    done = "replaced" if result.replaced else "imported"
    print(f"{done} {result.tenant} ({result.memories} memories, head {result.head_hash[:12]}…) on {args.target}")
    return 0


def _consolidate(args: argparse.Namespace) -> int:
    with _client(args) as client:
        outcomes = client.consolidate_session(args.tenant, args.thread or "")
    if not outcomes:
        print(f"{args.tenant}: no finished session to consolidate")
    for o in outcomes:
        conflicts = f", {o.conflicts} newer write(s) kept" if o.conflicts else ""
        print(
            f"{o.thread} {o.scope}: {o.outcome.replace('_', ' ')} (receipt {o.receipt_id}, generation "
            f"{o.generation}, {o.model_calls} model call(s){conflicts})"
        )
    return 1 if any(o.outcome == "gave_up" for o in outcomes) else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mnemosyne", description="Mnemosyne: a memory service for AI agents")
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gRPC server")
    _add_serve_flags(serve)
    serve.set_defaults(run=_serve)

    health = commands.add_parser("health", help="exit 0 if the server at --target is SERVING")
    health.add_argument("--service", default="")
    health.add_argument("--timeout", type=_NUMBER, default=3.0)
    _add_connection_flags(health, "a token (none needed: health checks are not authenticated)")
    health.set_defaults(run=_health)

    mcp = commands.add_parser("mcp", help="an MCP server of memory tools over stdio, for a model (a host)")
    mcp.add_argument("--tenant", required=True, help="the tenant the tools read and write")
    mcp.add_argument("--workspace", default="main", help="the workspace whose records the tools show and edit")
    _add_connection_flags(mcp, "the tenant's token")
    mcp.set_defaults(run=_mcp)

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

    backup = commands.add_parser(
        "backup", help="copy a running server's tenants into a directory on this machine (admin token)"
    )
    backup.add_argument("--to", required=True, help="the backup directory: new, empty, or an earlier backup's")
    backup.add_argument("--tenant", action="append", default=[], help="a tenant to copy (repeat; default: all)")
    _add_connection_flags(backup, "an admin token")
    backup.set_defaults(run=_backup)

    restore = commands.add_parser(
        "restore", help="put tenants of a backup directory into a data directory no server is using"
    )
    restore.add_argument("--from", dest="from_dir", required=True, help="the backup directory")
    restore.add_argument("--data-dir", required=True, help="the data directory (its server stopped)")
    restore.add_argument("--tenant", action="append", default=[], help="a tenant to restore (repeat; default: all)")
    restore.add_argument("--replace", action="store_true", help="overwrite tenants the data directory already has")
    restore.set_defaults(run=_restore)

    export = commands.add_parser("export", help="write one tenant of a running server to an archive file")
    export.add_argument("--tenant", required=True)
    export.add_argument("--to", required=True, help="the archive to write (a new file)")
    _add_connection_flags(export, "the tenant's token or an admin token")
    export.set_defaults(run=_export)

    import_ = commands.add_parser("import", help="install a tenant archive on a running server (admin token)")
    import_.add_argument("--from", dest="from_file", required=True, help="the archive")
    import_.add_argument("--tenant", default="", help="install it under this name (default: the archive's)")
    import_.add_argument("--replace", action="store_true", help="replace a tenant of that name")
    _add_connection_flags(import_, "an admin token")
    import_.set_defaults(run=_import)

    rebalance = commands.add_parser(
        "rebalance",
        help="move every tenant whose owner changes from one member list to another (admin token)",
    )
    rebalance.add_argument(
        "--from", dest="from_members", required=True, help="the old list, ID=HOST:PORT,... (or @FILE)"
    )
    rebalance.add_argument("--to", dest="to_members", required=True, help="the new list, ID=HOST:PORT,... (or @FILE)")
    rebalance.add_argument("--parallel", type=_POSITIVE, default=4, help="moves at once (default 4)")
    _add_connection_flags(rebalance, "an admin token", target=False)
    rebalance.set_defaults(run=_rebalance)

    consolidate = commands.add_parser(
        "consolidate", help="turn finished sessions (threads) of a tenant into records, each receipt once"
    )
    consolidate.add_argument("--tenant", required=True)
    consolidate.add_argument(
        "--thread", default="", help="this thread, finished now (default: every thread idle long enough)"
    )
    _add_connection_flags(consolidate, "the tenant's token or an admin token")
    consolidate.set_defaults(run=_consolidate)

    members = commands.add_parser(
        "members", help="run a deployment of several members on this machine (docs/scale-out.md)"
    )
    members.add_argument("--count", type=_POSITIVE, default=3, help="how many members (m0, m1, ...)")
    members.add_argument("--data-dir", default="./mnemosyne-members", help="member mN keeps its tenants in DIR/mN")
    members.add_argument("--port", type=_PORT, default=50051, help="gRPC port of m0; each next member the next port")
    members.add_argument("--http-port", type=_PORT, default=8080, help="HTTP port of m0 (0: off); then the next ones")
    members.add_argument("--metrics-port", type=_PORT, default=9464, help="metrics port of m0 (0: off); then the next")
    members.add_argument("serve_flags", nargs=argparse.REMAINDER, help="after --: flags every member's serve takes")
    members.set_defaults(run=_members)

    drill = commands.add_parser("drill", help="run the five recovery drills (docs/operations.md) against fresh servers")
    drill.add_argument("--data-dir", required=True, help="an empty directory the drills may fill")
    drill.set_defaults(run=_drill)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    tune_interpreter()  # before numpy loads (runtime.py): the serve flags' defaults load the engine
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except MnemosyneError as exc:
        print(f"mnemosyne: {exc.message} [{exc.reason}]", file=sys.stderr)
        return 2
    except MnemosyneClientError as exc:  # a client command's call the server refused, or no server answered
        print(f"mnemosyne {args.command}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file or directory of this machine the command cannot use: said, not traced
        where = "".join(f": {name}" for name in (exc.filename, exc.filename2) if name is not None)
        print(f"mnemosyne {args.command}: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
