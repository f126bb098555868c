"""The commands that work on this machine's files or start servers of their own: ``hash-token``,
``inspect``, ``oplog``, ``restore``, ``members``, ``drill``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from mnemosyne.cli.client_commands import add_connection_flags, given_connection_flags
from mnemosyne.cli.flags import COUNT, PORT
from mnemosyne.errors import InvalidArgument


def _hash_token(args: argparse.Namespace) -> int:
    from mnemosyne.transport.auth import MAX_TOKEN_CHARS, hash_token

    given = sys.stdin.buffer.read(MAX_TOKEN_CHARS + 3)  # a token, its line's end, and one more: too long
    try:
        token = given.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        token = None
    problem = _token_input_problem(token, MAX_TOKEN_CHARS)
    if problem:  # a token no client can send: its hash would name a token nobody can use
        print(f"mnemosyne hash-token: {problem}", file=sys.stderr)
        return 2
    print(hash_token(str(token)))
    return 0


def _token_input_problem(token: str | None, most: int) -> str:
    """Why the text read for hash-token is not one token a client can send, or "": the server
    hashes the whole of what follows "Bearer ", so every character counts."""
    from mnemosyne.client.memory_client import token_problem

    if token is None:
        return "standard input is not UTF-8 text: a token is printable ASCII"
    if not token:
        return "give the token on standard input"
    if "\n" in token or "\r" in token:
        return "standard input holds more than one line: give the token alone (a trailing newline is fine)"
    if len(token) > most:
        return f"the token is longer than {most} characters, more than a request header carries (gRPC metadata)"
    if any(c.isspace() for c in token):
        return "the token holds white space, which a header would cut or trim: a token is one word of printable ASCII"
    return token_problem(token).removesuffix(" (TOKEN_MALFORMED)")


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


def _refuse_connection_of_an_offline_restore(args: argparse.Namespace) -> None:
    """A restore into --data-dir talks to no server: a connection flag (--target, --token-file,
    --tls...) given with it would be ignored, so it is refused (MNEMOSYNE_TARGET, MNEMOSYNE_TOKEN
    and MNEMOSYNE_CLIENT_TLS... in the environment stay harmless)."""
    given = given_connection_flags(args)
    if not given:
        return
    if args.from_replica is None:
        does = "restore --from DIR writes a backup's tenants into --data-dir (its server stopped)"
    elif args.data_dir:
        does = "restore --from-replica URL --data-dir DIR writes the tenants into that directory"
    else:
        return  # the online restore of one tenant, on the server at --target
    raise InvalidArgument(
        f"{does} and talks to no server: drop {', '.join(given)} (only --from-replica without --data-dir "
        "restores one --tenant on the server at --target)",
        reason="CONFIG_INVALID",
    )


def _restore(args: argparse.Namespace) -> int:
    from mnemosyne.cli.backup import restore
    from mnemosyne.cli.progress import Progress

    _refuse_connection_of_an_offline_restore(args)
    if args.from_replica is not None:  # an empty one is refused by its parse, not taken for --from
        return _restore_from_replica(args)
    if args.timestamp or not args.data_dir:
        raise InvalidArgument(
            "restore --from DIR: give --data-dir (and no --timestamp: a backup holds one state)",
            reason="CONFIG_INVALID",
        )
    with Progress("restore") as progress:
        restored = restore(
            Path(args.from_dir), Path(args.data_dir), tenants=args.tenant, replace=args.replace, progress=progress
        )
    print(f"restored {len(restored)} tenants from {args.from_dir} into {args.data_dir}")
    return 0


def _restore_from_replica(args: argparse.Namespace) -> int:
    from mnemosyne.cli.client_commands import client_of
    from mnemosyne.cli.progress import Progress
    from mnemosyne.cli.replica_restore import restore_member, restore_online

    if args.data_dir:
        with Progress("restore") as progress:
            restored = restore_member(
                args.from_replica,
                Path(args.data_dir),
                tenants=args.tenant,
                timestamp=args.timestamp,
                replace=args.replace,
                progress=progress,
            )
        print(f"restored {len(restored)} tenants from {args.from_replica} into {args.data_dir}")
        return 0
    if len(args.tenant) != 1:
        raise InvalidArgument(
            "restore --from-replica without --data-dir restores one --tenant on the server at --target",
            reason="CONFIG_INVALID",
        )
    with client_of(args) as client:
        result = restore_online(client, args.from_replica, args.tenant[0], timestamp=args.timestamp)
    when = f" as of {args.timestamp}" if args.timestamp else ""
    print(f"restored {result.tenant}{when} ({result.memories} memories) on {client.target}")
    return 0


# The serve flags ``members`` gives each member itself: given after --, one would be every member's.
_PER_MEMBER = {
    "data_dir": "--data-dir",
    "port": "--port",
    "http_port": "--http-port",
    "metrics_port": "--metrics-port",
    "member": "--member",
    "members": "--members",
}
_LAST_PORT = 65535


def _checked_serve_flags(serve_flags: list[str]) -> list[str]:
    """The flags after --, read by serve's own parser before any member starts (a flag serve does
    not take is its usage error, once, not every member's); one that ``members`` sets per member
    is refused, naming the flag of ``members`` that sets it."""
    from mnemosyne.cli.commands import build_parser, command_parser

    flags = [flag for flag in serve_flags if flag != "--"]
    serve = command_parser(build_parser(), "serve")
    unset = object()
    serve.set_defaults(**dict.fromkeys(_PER_MEMBER, unset))
    given = serve.parse_args(flags)
    for dest, flag in _PER_MEMBER.items():
        if getattr(given, dest) is not unset:
            how = "--count and --data-dir" if dest in ("member", "members") else flag
            raise InvalidArgument(
                f"{flag} after --: members sets each member's own; give {how} before -- instead",
                reason="CONFIG_INVALID",
            )
    return flags


def _check_port_ranges(args: argparse.Namespace) -> None:
    """Member i takes each base port + i: every one a port, and no two members' ports the same."""
    taken: dict[int, str] = {}
    for flag, base in (("--port", args.port), ("--http-port", args.http_port), ("--metrics-port", args.metrics_port)):
        if not base:
            continue
        if base + args.count - 1 > _LAST_PORT:
            raise InvalidArgument(
                f"{flag} {base} with --count {args.count} gives member m{args.count - 1} port "
                f"{base + args.count - 1}; give {flag} {_LAST_PORT + 1 - args.count} at most",
                reason="CONFIG_INVALID",
            )
        for i in range(args.count):
            clash = taken.setdefault(base + i, f"{flag} of m{i}")
            if clash != f"{flag} of m{i}":
                raise InvalidArgument(
                    f"port {base + i} would be both the {clash} and the {flag} of m{i}; "
                    f"give port ranges {args.count} apart",
                    reason="CONFIG_INVALID",
                )


def _members(args: argparse.Namespace) -> int:
    """``mnemosyne serve`` for each of ``--count`` members on loopback, until SIGINT or SIGTERM."""
    from mnemosyne.cli.server_process import LocalMembers, ServerExited
    from mnemosyne.store.data_dir import refuse_inside_another

    if not 1 <= args.count <= 64:
        raise InvalidArgument("--count: give 1 to 64 members", reason="CONFIG_INVALID")
    _check_port_ranges(args)
    # Before any member's directory or log is made: a running server's data directory would get them.
    refuse_inside_another(Path(args.data_dir) / "m0")
    flags = _checked_serve_flags(args.serve_flags)
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
    try:
        deployment.start()
    except ServerExited as exited:  # the others were stopped; what stopped this one is its last line
        print(f"mnemosyne: member {exited.data_dir.name} did not start: {exited.last_line}", file=sys.stderr)
        return exited.returncode if exited.returncode in (1, 2) else 1
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
    from mnemosyne.cli.drills import DRILLS, run_drills
    from mnemosyne.cli.progress import Progress

    # Each drill's verdict is its line on stdout; a terminal also gets a bar of the drills.
    with Progress("drill", total=len(DRILLS), unit="drill", echo=False) as progress:

        def say(line: str) -> None:
            progress.report(line, sys.stdout)
            progress(line.split(":", 1)[0])

        results = run_drills(Path(args.data_dir), out=say)
    return 0 if results and all(r.passed for r in results) else 1


def add_local_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser], flags: bool = True) -> None:
    """This machine's commands; ``members``' flags only with ``flags`` (their defaults are the
    server's, which load the engine: add_serve_command)."""
    from mnemosyne.transport.auth import MAX_TOKEN_CHARS  # with the engine: once main has tuned the interpreter

    hash_token = commands.add_parser(
        "hash-token",
        help="print the SHA-256 of a token read from stdin",
        description="Print the SHA-256 of the token on standard input, for the tokens file: one line of "
        f"1-{MAX_TOKEN_CHARS} printable ASCII characters without white space (a trailing newline is fine); "
        f"{MAX_TOKEN_CHARS} is half of gRPC's 8 KiB for a request's metadata, all its headers together.",
    )
    hash_token.set_defaults(run=_hash_token)

    inspect = commands.add_parser("inspect", help="read-only summary of a tenant file (no lock taken)")
    inspect.add_argument("--data-dir", required=True)
    inspect.add_argument("--tenant", required=True)
    inspect.set_defaults(run=_inspect)

    oplog = commands.add_parser("oplog", help="read-only view of a tenant's operation log (no lock, no workers)")
    oplog.add_argument("--data-dir", required=True)
    oplog.add_argument("--tenant", required=True)
    oplog.set_defaults(run=_oplog)

    restore = commands.add_parser(
        "restore",
        help="put tenants of a backup directory or of object storage into a data directory no server is using, "
        "or one tenant from object storage into a running server",
    )
    source = restore.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="from_dir", help="the backup directory")
    source.add_argument(
        "--from-replica",
        help="object storage's replicas: s3://BUCKET/PREFIX?endpoint=URL, as the servers' --replica-url "
        "(docs/replication.md#restore)",
    )
    restore.add_argument(
        "--data-dir",
        help="the data directory (its server stopped); without it, --from-replica restores one --tenant online",
    )
    restore.add_argument("--tenant", action="append", default=[], help="a tenant to restore (repeat; default: all)")
    restore.add_argument("--replace", action="store_true", help="overwrite tenants the data directory already has")
    restore.add_argument("--timestamp", help="with --from-replica: the state at this RFC 3339 time (default: latest)")
    add_connection_flags(restore, "an admin token (the online restore of one tenant)")
    restore.set_defaults(run=_restore)
    _add_deployment_commands(commands, flags)


def _add_deployment_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser], flags: bool) -> None:
    """The commands that start servers of their own."""
    drill = commands.add_parser("drill", help="run the five recovery drills (docs/operations.md) against fresh servers")
    drill.add_argument(
        "--data-dir", required=True, help="a new or empty directory the drills may fill (or an earlier drill's)"
    )
    drill.set_defaults(run=_drill)

    members = commands.add_parser(
        "members", help="run a deployment of several members on this machine (docs/scale-out.md)"
    )
    if not flags:
        return
    from mnemosyne.transport.config import ServerConfig  # loaded with serve's flags (cli/serve.py)

    # COUNT, not POSITIVE: 0 is refused with the range _members holds it to (1-64), not 1 to 2**31-1.
    members.add_argument("--count", type=COUNT, default=3, help="how many members (m0, m1, ...; 1-64)")
    members.add_argument("--data-dir", default="./mnemosyne-members", help="member mN keeps its tenants in DIR/mN")
    members.add_argument(
        "--port", type=PORT, default=ServerConfig.port, help="gRPC port of m0; each next member the next port"
    )
    members.add_argument(
        "--http-port", type=PORT, default=ServerConfig.http_port, help="HTTP port of m0 (0: off); then the next ones"
    )
    members.add_argument(
        "--metrics-port",
        type=PORT,
        default=ServerConfig.metrics_port,
        help="metrics port of m0 (0: off); then the next",
    )
    members.add_argument("serve_flags", nargs=argparse.REMAINDER, help="after --: flags every member's serve takes")
    members.set_defaults(run=_members)
