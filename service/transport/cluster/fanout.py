"""The admin fan-outs of a deployment of many members: ``ListTenants``, ``AggregateStats`` and
``ListTenantFigures`` asked of every member, the answers merged, and the members that did not answer named
(``unanswered_members``). A member asks each other member for its own part (the call routed to
that member, so it does not ask again), with the caller's admin token, which each authenticates."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing

from mnemosyne.engine.limits import validate_figures_rows
from mnemosyne.engine.types import TenantStats
from mnemosyne.observability.metrics import ServerMetrics
from mnemosyne.transport import convert
from mnemosyne.transport.call import Call
from mnemosyne.transport.cluster.forwarding import Forwarder
from mnemosyne.v1 import admin_pb2

log = logging.getLogger("mnemosyne.members")

LIST_TENANTS = "/mnemosyne.v1.AdminService/ListTenants"
AGGREGATE_STATS = "/mnemosyne.v1.AdminService/AggregateStats"
LIST_TENANT_FIGURES = "/mnemosyne.v1.AdminService/ListTenantFigures"
# How each list of ListTenantFigures is ordered (most first, then by name), as engine/figures.py.
_FIGURES_ORDER = {
    "largest": lambda r: (-r.file_bytes, r.tenant),
    "busiest": lambda r: (-(r.writes + r.recalls), r.tenant),
    "failing": lambda r: (-r.failed_events, r.tenant),
}
_TOTAL_FIELDS = [field.name for field in dataclasses.fields(TenantStats)]


class FanOut:
    def __init__(self, forwarder: Forwarder, metrics: ServerMetrics | None) -> None:
        self._forwarder = forwarder
        self._metrics = metrics  # counts the members that did not answer
        # The deployment-wide listing's page tokens are signed with a key every member has, so
        # that the next page may be asked of any member.
        self.page_secret = forwarder.shared_secret
        membership = forwarder.membership
        self._others = [member for member in membership.ids if member != membership.me]
        if metrics is not None:
            metrics.members_asked(self._others)

    def _unanswered(self, member: str) -> None:
        if self._metrics is not None:
            self._metrics.member_unanswered(member)

    def wanted(self, call: Call) -> bool:
        """Whether this call asks for the whole deployment (not one member's part)."""
        return bool(self._others) and not self._forwarder.routed_here(call.metadata)

    async def tenants_elsewhere(self, call: Call) -> tuple[dict[str, bool], list[str]]:
        """Every other member's tenants (tenant -> whether its file is damaged), and the members
        that did not answer."""
        elsewhere: dict[str, bool] = {}
        unanswered = []
        with call.waiting_on_members():
            for member in self._others:
                try:
                    token = ""
                    while True:
                        # The member's own page size (0): never over the --max-page-size it was started with.
                        request = admin_pb2.ListTenantsRequest(page_size=0, page_token=token)
                        page = await self._forwarder.unary(member, LIST_TENANTS, request, call, asked=True)
                        damaged = set(page.damaged)
                        elsewhere.update((tenant, tenant in damaged) for tenant in page.tenants)
                        if not (token := page.next_page_token):
                            break
                except Exception as exc:
                    log.warning("ListTenants: member %s did not answer: %s", member, exc)
                    self._unanswered(member)
                    unanswered.append(member)
        return elsewhere, unanswered

    async def tenant_figures(
        self, request: admin_pb2.ListTenantFiguresRequest, call: Call, mine: admin_pb2.ListTenantFiguresResponse
    ) -> admin_pb2.ListTenantFiguresResponse:
        """This member's answer merged with every other member's: each list the best of all,
        cut to the limit the members applied (the best of each member's best is the best)."""
        with call.waiting_on_members():
            for member in self._others:
                try:
                    theirs = await self._forwarder.unary(member, LIST_TENANT_FIGURES, request, call, asked=True)
                except Exception as exc:
                    log.warning("ListTenantFigures: member %s did not answer: %s", member, exc)
                    mine.unanswered_members.append(member)
                    continue
                _merge_figures(mine, theirs, validate_figures_rows(request.limit))
        return mine

    async def aggregate(
        self,
        request: admin_pb2.AggregateStatsRequest,
        call: Call,
        local: AsyncGenerator[admin_pb2.AggregateStatsChunk, None],
    ) -> AsyncGenerator[admin_pb2.AggregateStatsChunk, None]:
        """This member's chunks, then each other member's, with one total across them all."""
        total = TenantStats()
        files_read = 0
        unanswered = []
        sources = [("", local)] + [
            (member, self._forwarder.stream(member, AGGREGATE_STATS, request, call, asked=True))
            for member in self._others
        ]
        for member, chunks in sources:
            read_before = files_read
            try:
                async with aclosing(chunks):  # closed with this one (a client that left)
                    async for chunk in chunks:
                        files_read = read_before + chunk.files_read
                        if chunk.HasField("total"):
                            total = total.plus(
                                TenantStats(**{name: getattr(chunk.total, name) for name in _TOTAL_FIELDS})
                            )
                        if chunk.tenants:
                            yield convert.to_members_aggregate_rows(chunk.tenants, files_read)
            except Exception as exc:
                if not member:
                    raise
                log.warning("AggregateStats: member %s did not answer: %s", member, exc)
                self._unanswered(member)
                unanswered.append(member)
        answered = 1 + len(self._others) - len(unanswered)
        yield convert.to_members_aggregate_total(total, files_read, answered, unanswered)


def _merge_figures(
    mine: admin_pb2.ListTenantFiguresResponse, theirs: admin_pb2.ListTenantFiguresResponse, rows: int
) -> None:
    """Another member's figures into ``mine``: each list the best ``rows`` of both."""
    mine.tenants += theirs.tenants
    if theirs.counting_since.ToNanoseconds() > mine.counting_since.ToNanoseconds():
        mine.counting_since.CopyFrom(theirs.counting_since)
    for name, order in _FIGURES_ORDER.items():
        merged = sorted([*getattr(mine, name), *getattr(theirs, name)], key=order)
        del getattr(mine, name)[:]
        getattr(mine, name).extend(merged[:rows])
