"""``mnemosyne rebalance --from OLD --to NEW``: move every tenant whose owner changes when the
member list changes from OLD to NEW (docs/scale-out.md, "Moving tenants").

First every member of either list is told the change begins (ChangeMembers): from then on it
creates no tenant another member owns by NEW, so the listing that follows sees every tenant it
will ever hold (docs/scale-out.md, "Changing the member list"); when a member cannot be told,
nothing is listed or moved. Then every member is asked for the tenants whose files it holds
(ListTenants routed to it: its own part, tombstones of earlier moves included); a tenant held by a
member that is not its owner by NEW is moved there by MoveTenant, asked of that member (the source drives the move's
steps and calls the destination). At most ``parallel`` moves run at once. A move that was done
already finishes at once (its source's tombstone names the destination), and one interrupted
earlier is finished, so the command can be run again at any time; it exits 1 when a tenant could
not be moved (run it again) or a member could not be asked, saying which on stderr. A run that
moved everything completes the change on every member: those running NEW no longer look for
tenants at their owners by their previous list.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TextIO

from mnemosyne.cli.progress import Progress
from mnemosyne.client import MemberChange, MemoryClient, MnemosyneClientError
from mnemosyne.client.routing import ROUTE_KEY, owner_of, parse_members
from mnemosyne.errors import InvalidArgument
from mnemosyne.store.paths import tenant_named_by
from mnemosyne.v1 import admin_pb2


@dataclass(frozen=True)
class Planned:
    tenant: str
    source: str
    destination: str
    bytes: int  # its files' size on the source (0 when it could not be asked: a tombstone)


def _held(client: MemoryClient, member: str) -> Iterator[str]:
    """The tenants whose files ``member`` holds (its own part of the listing), each a valid
    tenant id (a member naming another thing is refused, as a client naming it would be)."""
    token = ""
    while True:
        page = client.call(
            client.admin.ListTenants,
            # The member's own page size (0): never over the --max-page-size it was started with.
            admin_pb2.ListTenantsRequest(page_size=0, page_token=token),
            retry=True,
            metadata=((ROUTE_KEY, member),),
        )
        yield from (tenant_named_by(t, f"member {member}'s list of tenants") for t in page.tenants)
        if not page.next_page_token:
            return
        token = page.next_page_token


def _size(client: MemoryClient, tenant: str, member: str) -> int:
    try:
        response = client.call(
            client.admin.Stats, admin_pb2.StatsRequest(tenant=tenant), retry=True, metadata=((ROUTE_KEY, member),)
        )
    except MnemosyneClientError:
        return 0  # a tombstone (moved already) or a tenant not served there
    return int(response.file_bytes)


def _human(count: int) -> str:
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def _change(
    clients: dict[str, MemoryClient], new: str, problems: list[str], *, complete: bool
) -> dict[str, MemberChange]:
    """Begin (or complete) the change to ``new`` on every member, all at once (a completion's
    members drop their previous list within one round trip of each other); the answer of each
    member told. A member that cannot be told, or answers as another, is a problem."""

    def tell(member: str) -> MemberChange | str:
        client = clients[member]
        try:
            answer = client.change_members(new, complete=complete)
        except MnemosyneClientError as exc:
            return f"member {member} ({client.target}) could not be told of the change: {exc}"
        if answer.member != member:
            return f"{client.target} answered as member {answer.member or '(none)'}, not {member}"
        return answer

    members = sorted(clients)
    with ThreadPoolExecutor(max_workers=len(members)) as pool:
        answers = list(pool.map(tell, members))
    problems += [answer for answer in answers if isinstance(answer, str)]
    return {m: answer for m, answer in zip(members, answers, strict=True) if not isinstance(answer, str)}


def _plan(clients: dict[str, MemoryClient], owners: list[str], problems: list[str]) -> list[Planned]:
    """The tenants each member holds that another owns by the new list (``owners``); a member that
    cannot be asked is a problem."""
    plan: list[Planned] = []
    for member, client in sorted(clients.items()):
        try:
            for tenant in _held(client, member):
                owner = owner_of(tenant, owners)
                if owner != member:
                    plan.append(Planned(tenant, member, owner, _size(client, tenant, member)))
        except (MnemosyneClientError, InvalidArgument) as exc:
            problems.append(f"member {member} ({client.target}) could not be asked for its tenants: {exc}")
    return plan


@dataclass
class _Moves:
    """The moves of a plan, run from several threads: a line per tenant moved or not, the totals."""

    clients: dict[str, MemoryClient]
    plan: list[Planned]
    problems: list[str]
    out: TextIO
    total_bytes: int
    progress: Progress
    lock: threading.Lock = field(default_factory=threading.Lock)
    tenants: int = 0
    bytes: int = 0

    def move(self, planned: Planned) -> None:
        started = time.monotonic()
        try:
            result = self.clients[planned.source].move_tenant(
                planned.tenant, planned.destination, member=planned.source
            )
        except MnemosyneClientError as exc:
            with self.lock:
                self.problems.append(f"tenant {planned.tenant} ({planned.source} -> {planned.destination}): {exc}")
                self.progress.report(f"  {planned.tenant}: NOT moved: {exc}", self.out)
                self.progress(f"{planned.tenant}: not moved")
            return
        with self.lock:
            self.tenants += 1
            self.bytes += planned.bytes
            what = ", ".join(result.steps) if result.steps else "moved already"
            self.progress.report(
                f"  {planned.tenant}: {planned.source} -> {planned.destination} epoch {result.epoch} "
                f"({what}; {_human(result.bytes)} sent, {time.monotonic() - started:.2f} s) "
                f"[{self.tenants}/{len(self.plan)} tenants, {_human(self.bytes)}/{_human(self.total_bytes)}]",
                self.out,
            )
            self.progress(f"{planned.tenant}: moved")


def rebalance(
    old: str,
    new: str,
    *,
    token: str | None,
    parallel: int = 4,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    client_options: dict[str, object] | None = None,
) -> int:
    before, after = parse_members(old), parse_members(new)
    addresses = {**before, **after}
    problems: list[str] = []
    with ExitStack() as stack:
        clients = {
            member: stack.enter_context(MemoryClient(address, token=token, **(client_options or {})))  # type: ignore[arg-type]  # MemoryClient's keyword arguments (credentials, options), typed there
            for member, address in addresses.items()
        }
        told = _change(clients, new, problems, complete=False)
        if problems:  # a member not told may create a tenant its listing misses: nothing moves
            problems.append("nothing was moved: every member of either list must begin the change first")
        plan = [] if problems else _plan(clients, sorted(after), problems)
        total_bytes = sum(p.bytes for p in plan)
        if not problems:
            print(
                f"rebalance: {len(plan)} tenants held elsewhere than their owner by the new list "
                f"({_human(total_bytes)}), {parallel} at a time",
                file=out,
                flush=True,
            )
        # Each move is its line on ``out``; a terminal also gets a bar of the moves (cli/progress.py).
        with Progress("rebalance", total=len(plan), unit="tenant", echo=False) as progress:
            moves = _Moves(clients, plan, problems, out, total_bytes, progress)
            with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
                list(pool.map(moves.move, plan))
        if not problems:
            completed = _change(clients, new, problems, complete=True)
            done = [member for member, answer in completed.items() if answer.previous_done]
            if done:
                print(f"rebalance: previous member list done with on {', '.join(done)}", file=out, flush=True)
    # What went wrong, and that it is not finished, where a failing command says it: on ``err``.
    for problem in problems:
        print(f"rebalance: {problem}", file=err, flush=True)
    if problems and told:  # a change begun and not completed holds back those members' new tenants
        print(
            f"rebalance: {', '.join(sorted(told))} began the change: until a run completes it, they create no "
            "tenant the new list gives another member (UNAVAILABLE MEMBERS_CHANGING); to give it up instead, run "
            "mnemosyne rebalance with the list the members run as both --from and --to",
            file=err,
            flush=True,
        )
    print(
        f"rebalance: {moves.tenants} of {len(plan)} tenants moved or found moved ({_human(moves.bytes)})"
        + ("; run it again to finish" if problems else ""),
        file=err if problems else out,
        flush=True,
    )
    return 1 if problems else 0
