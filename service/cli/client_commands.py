"""The commands that reach a running server as its client: ``health``, ``mcp``, ``backup``,
``export``, ``import``, ``rebalance``, ``consolidate``, ``reembed``. Each takes the same connection flags
(``add_connection_flags``: target, token, TLS, mutual TLS)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from mnemosyne.cli.flags import NUMBER, POSITIVE, number_flag
from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import from_rpc_error
from mnemosyne.client.retry_window import MAX_RETRY_WINDOW_SECONDS, RETRY_WINDOW_SECONDS
from mnemosyne.engine.limits import MAX_REEMBED_CHUNK, parse_integer, parse_number, validate_tenant
from mnemosyne.engine.targets import check_member_addresses, check_target
from mnemosyne.errors import InvalidArgument
from mnemosyne.runtime.files import read_named_file
from mnemosyne.store.membership import member_list_text

DEFAULT_TARGET = "127.0.0.1:50051"
# Shorter than a client library's 15 s: at a command line a wrong --target is likelier than a
# server restarting, and the person waits for the answer. Not `mcp`'s: it serves an agent for as
# long as the agent runs, through the server's restarts.
CLI_RETRY_WINDOW_SECONDS = 3.0
RETRY_WINDOW = number_flag(parse_number, 0.0, MAX_RETRY_WINDOW_SECONDS)


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"MNEMOSYNE_{name}", default)


class _NotedAsGiven(argparse.Action):
    """A connection flag, noted as given on the command line (``given_connection_flags``): its
    default may come from the environment, which a command must be able to tell apart."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, *rest: Any) -> None:
        super().__call__(parser, namespace, *rest)
        given: tuple[str, ...] = getattr(namespace, "connection_given", ())
        if self.option_strings[0] not in given:
            namespace.connection_given = (*given, self.option_strings[0])


class _Given(_NotedAsGiven, argparse._StoreAction):
    """A connection flag's value (``_NotedAsGiven``)."""


class _GivenTrue(_NotedAsGiven, argparse._StoreTrueAction):
    """``--tls`` (``_NotedAsGiven``)."""


def given_connection_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """The connection flags given on the command line, in their order (not the environment's)."""
    given: tuple[str, ...] = getattr(args, "connection_given", ())
    return given


def add_connection_flags(
    parser: argparse.ArgumentParser, token: str, *, target: bool = True, retry_window: float = CLI_RETRY_WINDOW_SECONDS
) -> None:
    """How a client command reaches its server: --target (MNEMOSYNE_TARGET), --token-file
    (MNEMOSYNE_TOKEN), --tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name
    (MNEMOSYNE_CLIENT_TLS...; CLIENT, so a server's own MNEMOSYNE_TLS_CERT is never taken for a
    client certificate), --retry-window (MNEMOSYNE_CLIENT_RETRY_WINDOW). ``token``: whose token the command needs. ``target=False``: the command
    names its servers otherwise (rebalance's member lists). ``retry_window``: its default."""
    group = parser.add_argument_group("connection to the server")
    if target:
        group.add_argument(
            "--target",
            action=_Given,
            help=f"HOST:PORT of the server (MNEMOSYNE_TARGET; default {DEFAULT_TARGET})",
        )
    group.add_argument("--token-file", action=_Given, help=f"a file holding {token} (default: MNEMOSYNE_TOKEN)")
    group.add_argument(
        "--tls",
        action=_GivenTrue,
        default=_env("CLIENT_TLS") == "1",
        help="connect with TLS, trusting the system's roots (implied by the other --tls-* flags; MNEMOSYNE_CLIENT_TLS=1)",
    )
    group.add_argument(
        "--tls-ca",
        action=_Given,
        default=_env("CLIENT_TLS_CA"),
        help="PEM CA bundle to trust instead (MNEMOSYNE_CLIENT_TLS_CA)",
    )
    group.add_argument(
        "--tls-cert",
        action=_Given,
        default=_env("CLIENT_TLS_CERT"),
        help="client certificate (PEM), for mutual TLS (MNEMOSYNE_CLIENT_TLS_CERT)",
    )
    group.add_argument(
        "--tls-key", action=_Given, default=_env("CLIENT_TLS_KEY"), help="key of --tls-cert (MNEMOSYNE_CLIENT_TLS_KEY)"
    )
    group.add_argument(
        "--tls-server-name",
        action=_Given,
        default=_env("CLIENT_TLS_SERVER_NAME"),
        help="name to check the server certificate against (default: the target's host; "
        "MNEMOSYNE_CLIENT_TLS_SERVER_NAME)",
    )
    group.add_argument(
        "--retry-window",
        action=_Given,
        type=RETRY_WINDOW,
        default=_env("CLIENT_RETRY_WINDOW", f"{retry_window:g}"),
        help="seconds a call safe to repeat is tried again while the server is unreachable or restarting "
        f"(0: never; default {retry_window:g}; MNEMOSYNE_CLIENT_RETRY_WINDOW)",
    )


def target_of(args: argparse.Namespace) -> str:
    """The server a client command connects to: --target, else MNEMOSYNE_TARGET, else the
    default. Read here, not as the flag's default, so that a command can tell a --target given
    on its command line (``args.target`` not None) from the environment's."""
    given: str | None = args.target
    return given if given is not None else os.environ.get("MNEMOSYNE_TARGET", DEFAULT_TARGET)


def _token(args: argparse.Namespace) -> str | None:
    """A client command's token: from --token-file, else MNEMOSYNE_TOKEN — never an argument,
    which every user of the machine can read in the process list."""
    from mnemosyne.client.memory_client import token_problem

    if not args.token_file:
        token, source = _env("TOKEN") or None, "MNEMOSYNE_TOKEN"
    else:
        source = f"--token-file {args.token_file}"
        try:
            token = read_named_file(args.token_file).decode("utf-8").strip() or None
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgument(f"cannot read {source}: {exc}", reason="TOKEN_FILE_UNREADABLE") from None
    problem = token_problem(token) if token else ""
    if problem:
        raise InvalidArgument(f"{source}: {problem.removesuffix(' (TOKEN_MALFORMED)')}", reason="TOKEN_MALFORMED")
    return token


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _client_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``MemoryClient``'s keyword arguments from the connection flags: token, TLS credentials
    (None: plaintext), channel options and the retry window."""
    from mnemosyne.transport.tls import channel_credentials

    options = [("grpc.ssl_target_name_override", args.tls_server_name)] if args.tls_server_name else []
    tls = args.tls or any((args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name))
    credentials = channel_credentials(_path(args.tls_ca), _path(args.tls_cert), _path(args.tls_key)) if tls else None
    return {
        "token": _token(args),
        "credentials": credentials,
        "options": options,
        "retry_window": args.retry_window,
    }


def client_of(args: argparse.Namespace, **options: Any) -> MemoryClient:
    """The client of a command's connection flags, to its --target (``options``: MemoryClient's
    other keywords), made once the command line is checked (``check_named``)."""
    check_named(args)
    return MemoryClient(target_of(args), **_client_settings(args), **options)


def check_named(args: argparse.Namespace) -> None:
    """The --target, every --tenant and a --workspace of a client command, checked before any
    channel is made: a wrong one is refused in one line (InvalidArgument, exit 2), not by gRPC's
    resolver (its C++ log lines first, then UNKNOWN) nor by the server on each call (``mcp`` would
    start and then fail every tool call)."""
    check_target(target_of(args))
    named = getattr(args, "tenant", None)  # a name, a list (backup, restore), or None (import's default)
    for tenant in named if isinstance(named, list) else [named]:
        if tenant is not None:
            validate_tenant(tenant)
    workspace = getattr(args, "workspace", None)  # mcp's: every tool of a session reads or edits it
    if workspace is not None:
        from mnemosyne.engine.workspace import workspace_scope

        workspace_scope(workspace)


def _health(args: argparse.Namespace) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with client_of(args) as client:
        try:
            response = health_pb2_grpc.HealthStub(client.channel).Check(  # type: ignore[attr-defined]  # the published stubs omit the stub's methods
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND and not exc.details():  # the health service's own answer
                print(
                    f"unhealthy: NOT_FOUND: the server checks no service {args.service[:80]!r}: give --service '' "
                    "(the server as a whole) or one it serves, e.g. mnemosyne.v1.MemoryService",
                    file=sys.stderr,
                )
                return 1
            print(f"unhealthy: {from_rpc_error(exc, client.target)}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    print(status)
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


def _mcp(args: argparse.Namespace) -> int:
    """The MCP server over stdio: stdout carries the protocol, so every log line goes to stderr."""
    import anyio

    from mnemosyne.client.host import MemoryHost
    from mnemosyne.client.mcp_host import Agent, Session, build_server, run_stdio

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    with client_of(args, session_consistency=args.session_consistency) as client:
        # One process is one session: its agent is this process's.
        session = Session(MemoryHost(client, args.tenant), args.workspace, Agent())
        anyio.run(run_stdio, build_server(lambda _ctx: session))
    return 0


def _backup(args: argparse.Namespace) -> int:
    from mnemosyne.cli.backup import write_backup
    from mnemosyne.cli.progress import Progress

    with client_of(args) as client, Progress("backup", unit="tenant") as progress:
        summary = write_backup(client, Path(args.to), tenants=args.tenant, progress=progress)
    print(
        f"backup of {target_of(args)} in {args.to}: {summary.copied} tenants copied, {summary.unchanged} unchanged, "
        f"{summary.skipped} skipped, {summary.bytes} bytes received"
    )
    return 1 if summary.skipped else 0


def _export(args: argparse.Namespace) -> int:
    from mnemosyne.cli.archive import write_archive
    from mnemosyne.cli.progress import Progress

    with client_of(args) as client, Progress("export", unit="B") as progress:
        copy = write_archive(client, args.tenant, Path(args.to), progress=progress)
    print(f"exported {copy.tenant} ({copy.memories} memories, head {copy.head_hash[:12]}…) to {args.to}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from mnemosyne.cli.archive import import_archive
    from mnemosyne.cli.progress import Progress

    with client_of(args) as client, Progress("import", unit="B") as progress:
        result = import_archive(
            client, Path(args.from_file), tenant=args.tenant or "", replace=args.replace, progress=progress
        )
    done = "replaced" if result.replaced else "imported"
    print(f"{done} {result.tenant} ({result.memories} memories, head {result.head_hash[:12]}…) on {target_of(args)}")
    return 0


def _rebalance(args: argparse.Namespace) -> int:
    from mnemosyne.cli.rebalance import rebalance
    from mnemosyne.client.routing import parse_members

    lists = {
        flag: member_list_text(value, flag)
        for flag, value in (("--from", args.from_members), ("--to", args.to_members))
    }
    for flag, listed in lists.items():
        try:
            members = parse_members(listed)
        except ValueError as exc:
            raise InvalidArgument(f"{flag}: {exc}", reason="CONFIG_INVALID") from None
        check_member_addresses(members, flag)  # each is a --target of its own
    settings = _client_settings(args)
    return rebalance(
        lists["--from"],
        lists["--to"],
        token=settings.pop("token"),
        parallel=args.parallel,
        client_options=settings,
    )


def _consolidate(args: argparse.Namespace) -> int:
    if args.thread == "":  # ``--thread "$THREAD"`` with the variable unset: not every thread
        raise InvalidArgument(
            "--thread is empty: give a thread id (e.g. chat-42/session-3), or leave --thread out to "
            "consolidate every thread idle long enough",
            reason="THREAD_INVALID",
        )
    with client_of(args) as client:
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


def _reembed(args: argparse.Namespace) -> int:
    """The tenant moved to ``--embedder`` by steps of the ReembedTenant RPC, until it runs on it:
    each step one chunk (or the switch), so an interrupted run goes on where it stopped."""
    from mnemosyne.cli.progress import Progress

    with client_of(args) as client, Progress("reembed", unit="chunk") as progress:
        while True:
            step = client.reembed_tenant(args.tenant, args.embedder, chunk_size=args.chunk_size)
            if step.finished:
                break
            progress(f"{args.tenant}: {step.done}/{step.total} memories embedded by {args.embedder}")
    replaced = f"{step.switched} vectors replaced" if step.switched else "nothing to replace"
    print(f"{args.tenant} runs on the {args.embedder} embedder ({replaced})")
    return 0


def add_client_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    health = commands.add_parser("health", help="exit 0 if the server at --target is SERVING")
    health.add_argument("--service", default="")
    health.add_argument("--timeout", type=NUMBER, default=3.0)
    add_connection_flags(health, "a token (none needed: health checks are not authenticated)")
    health.set_defaults(run=_health)

    mcp = commands.add_parser("mcp", help="an MCP server of memory tools over stdio, for a model (a host)")
    mcp.add_argument("--tenant", required=True, help="the tenant the tools read and write")
    mcp.add_argument("--workspace", default="main", help="the workspace whose records the tools show and edit")
    mcp.add_argument(
        "--no-session-consistency",
        dest="session_consistency",
        action="store_false",
        help="do not make the session's reads wait for its own queued writes (docs/mcp.md)",
    )
    add_connection_flags(mcp, "the tenant's token", retry_window=RETRY_WINDOW_SECONDS)
    mcp.set_defaults(run=_mcp)

    backup = commands.add_parser(
        "backup", help="copy a running server's tenants into a directory on this machine (admin token)"
    )
    backup.add_argument("--to", required=True, help="the backup directory: new, empty, or an earlier backup's")
    backup.add_argument("--tenant", action="append", default=[], help="a tenant to copy (repeat; default: all)")
    add_connection_flags(backup, "an admin token")
    backup.set_defaults(run=_backup)

    export = commands.add_parser("export", help="write one tenant of a running server to an archive file")
    export.add_argument("--tenant", required=True)
    export.add_argument("--to", required=True, help="the archive to write (a new file)")
    add_connection_flags(export, "the tenant's token or an admin token")
    export.set_defaults(run=_export)
    _add_moving_commands(commands)

    reembed = commands.add_parser(
        "reembed",
        help="move a tenant to another embedder while it serves; rerun to go on after an interruption (admin token)",
    )
    reembed.add_argument("--tenant", required=True)
    reembed.add_argument(
        "--embedder",
        default="minilm",
        choices=("minilm", "hashing"),
        help="the embedder to move it to (default minilm, the default of new tenants)",
    )
    reembed.add_argument(
        "--chunk-size",
        type=number_flag(parse_integer, 1, MAX_REEMBED_CHUNK),
        default=256,
        help=f"memories embedded per step, each one transaction (1-{MAX_REEMBED_CHUNK}; default 256)",
    )
    add_connection_flags(reembed, "an admin token")
    reembed.set_defaults(run=_reembed)


def _add_moving_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands that install tenants or turn sessions into records on a server."""
    import_ = commands.add_parser("import", help="install a tenant archive on a running server (admin token)")
    import_.add_argument("--from", dest="from_file", required=True, help="the archive")
    import_.add_argument("--tenant", help="install it under this name (default: the archive's)")
    import_.add_argument("--replace", action="store_true", help="replace a tenant of that name")
    add_connection_flags(import_, "an admin token")
    import_.set_defaults(run=_import)

    rebalance = commands.add_parser(
        "rebalance",
        help="move every tenant whose owner changes from one member list to another (admin token)",
    )
    rebalance.add_argument(
        "--from", dest="from_members", required=True, help="the old list, ID=HOST:PORT,... (or @FILE)"
    )
    rebalance.add_argument("--to", dest="to_members", required=True, help="the new list, ID=HOST:PORT,... (or @FILE)")
    rebalance.add_argument("--parallel", type=POSITIVE, default=4, help="moves at once (default 4)")
    add_connection_flags(rebalance, "an admin token", target=False)
    rebalance.set_defaults(run=_rebalance)

    consolidate = commands.add_parser(
        "consolidate", help="turn finished sessions (threads) of a tenant into records, each receipt once"
    )
    consolidate.add_argument("--tenant", required=True)
    consolidate.add_argument(
        "--thread", default=None, help="this thread, finished now (default: every thread idle long enough)"
    )
    add_connection_flags(consolidate, "the tenant's token or an admin token")
    consolidate.set_defaults(run=_consolidate)
