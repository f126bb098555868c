"""MoveTenant and ActivateTenant: a tenant's move between members, driven by its source.

The steps and what each records are the engine's (engine/moves.py); here they are strung
together, each on a worker thread, with the two calls the source makes to the destination on the
caller's behalf (its admin token, routed to the destination): the import (step 4, the export's
chunks streamed as an ImportTenant carrying ``move_epoch``) and the activation (step 6). A call
asked again after any interruption starts from the step after the last one recorded.

A move killed between its steps 5 and 6 finishes itself (``finish``): a call that reaches the
destination's inactive copy (from a client, or sent on by the tombstone) first asks the source,
with the call's own credentials, a read of the tenant (HotPathService.Status, routed to the source
by the member hop). Only a source whose tombstone names this member at the copy's epoch refuses it
``NOT_OWNER`` with ``moved_at_epoch``: then this member activates the copy (step 6, as
ActivateTenant does; idempotent) and serves the call. Any other answer (the source still fenced
serves the read; unreachable; another epoch) leaves the copy inactive and the call refused
UNAVAILABLE TENANT_MOVING, as before. So the destination never serves while the source may: the
source's tombstone is durable and the source never serves the tenant again.

Test seam: ``MNEMOSYNE_TEST_MOVE_HOLD_AFTER=STEP`` holds the first move of the process after that
step (the call waits until it is cancelled or the process killed), so a test can kill any member
or the rebalancer exactly there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing

from mnemosyne.engine.backup import FileChunk, TenantCopy
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.moves import MOVED_AT_EPOCH, NOT_OWNER, STEPS, MovePlan
from mnemosyne.errors import FailedPrecondition, InvalidArgument, MnemosyneError
from mnemosyne.transport import convert, waits
from mnemosyne.transport.call import Call, Steps
from mnemosyne.transport.cluster.forwarding import Forwarder
from mnemosyne.transport.consistency import deadline
from mnemosyne.transport.errors import Relayed
from mnemosyne.v1 import admin_pb2, hot_path_pb2

IMPORT_METHOD = "/mnemosyne.v1.AdminService/ImportTenant"
ACTIVATE_METHOD = "/mnemosyne.v1.AdminService/ActivateTenant"
# The read a destination asks of the source to see its tombstone, and how long it waits for it.
PROBE_METHOD = "/mnemosyne.v1.HotPathService/Status"
PROBE_SECONDS = 5.0
# How long the destination may take to install the tenant (its import), and to activate it.
IMPORT_SECONDS = 3600.0
ACTIVATE_SECONDS = 60.0

log = logging.getLogger("mnemosyne.moves")


class MoveDriver:
    def __init__(self, engine: Engine, forwarder: Forwarder | None, *, hold_after: str = "") -> None:
        if hold_after and hold_after not in STEPS:
            raise InvalidArgument(f"MNEMOSYNE_TEST_MOVE_HOLD_AFTER: one of {', '.join(STEPS)}", reason="CONFIG_INVALID")
        self._engine = engine
        self._forwarder = forwarder
        self._hold_after = hold_after
        self._finishing: dict[str, asyncio.Lock] = {}  # tenant -> one probe of its source at a time

    async def _step_done(self, plan: MovePlan, step: str, steps: list[str]) -> None:
        steps.append(step)
        log.info("tenant %s: move to %s: %s (epoch %d)", plan.tenant, plan.destination, step, plan.epoch)
        if step == self._hold_after:
            self._hold_after = ""  # the first move only: asked again, it goes on
            log.warning("tenant %s: move held after %s (MNEMOSYNE_TEST_MOVE_HOLD_AFTER)", plan.tenant, step)
            await asyncio.Event().wait()

    async def move(self, request: admin_pb2.MoveTenantRequest, call: Call) -> admin_pb2.MoveTenantResponse:
        moves, forwarder = self._engine.moves, self._forwarder
        if forwarder is None:
            raise FailedPrecondition(
                "this server has no members (--members): there is nowhere to move a tenant", reason="NO_MEMBERS"
            )
        plan = await call.run(moves.plan, request.tenant, request.destination)
        steps: list[str] = []
        sent, memories = 0, 0
        if plan.needs("fenced"):
            await call.run(moves.fence, plan)
            await self._step_done(plan, "fenced", steps)
        if plan.needs("flushed"):
            await call.run(moves.flush, plan)
            await self.replicated(call)
            await self._step_done(plan, "flushed", steps)
        head_hash = plan.head_hash
        if plan.needs("imported"):
            plan, sent, memories = await self._copy(plan, forwarder, call, steps)
            head_hash = plan.head_hash
        if plan.needs("tombstoned"):
            await call.run(moves.tombstone, plan)
            await self._step_done(plan, "tombstoned", steps)
        activated = await forwarder.ask_member(
            plan.destination,
            ACTIVATE_METHOD,
            "unary_unary",
            admin_pb2.ActivateTenantRequest(tenant=plan.tenant, epoch=plan.epoch, head_hash=head_hash),
            call,
            ACTIVATE_SECONDS,
        )
        if activated.activated:
            await self._step_done(plan, "activated", steps)
        if await call.run(moves.reclaim, plan):
            steps.append("reclaimed")
        return convert.to_move_tenant_response(
            plan, source=forwarder.membership.me, head_hash=head_hash, sent=sent, steps=steps, memories=memories
        )

    async def _copy(
        self, plan: MovePlan, forwarder: Forwarder, call: Call, steps: list[str]
    ) -> tuple[MovePlan, int, int]:
        """Steps 3 and 4: the tenant exported here and imported by the destination, streamed to it
        (the plan as exported, the bytes sent, the memories the copy holds)."""
        moves = self._engine.moves
        copy, parts = await call.run(moves.export, plan)
        plan = MovePlan(plan.tenant, plan.destination, plan.epoch, "exported", copy.facts.head_hash)
        await self._step_done(plan, "exported", steps)
        sent = [0]

        async def messages(chunks: Steps[TenantCopy | FileChunk]) -> AsyncIterator[admin_pb2.ImportTenantRequest]:
            yield admin_pb2.ImportTenantRequest(
                tenant=plan.tenant,
                manifest=convert.to_tenant_backup(copy),
                move_epoch=plan.epoch,
                move_source=forwarder.membership.me,
            )
            async for part in chunks:
                chunk = convert.to_export_response(part).chunk
                sent[0] += len(chunk.data)
                yield admin_pb2.ImportTenantRequest(chunk=chunk)

        async with aclosing(call.steps(parts)) as chunks:  # the export's scratch copy goes with it
            imported = await forwarder.ask_member(
                plan.destination, IMPORT_METHOD, "stream_unary", messages(chunks), call, IMPORT_SECONDS
            )
        await call.run(moves.imported, plan, imported.head_hash)
        await self._step_done(plan, "imported", steps)
        return plan, sent[0], copy.facts.memories

    async def activate(self, request: admin_pb2.ActivateTenantRequest, call: Call) -> admin_pb2.ActivateTenantResponse:
        activated = await call.run(self._engine.moves.activate, request.tenant, int(request.epoch), request.head_hash)
        await self.replicated(call)
        return convert.to_activate_tenant_response(request.tenant, request.epoch, activated)

    async def replicated(self, call: Call) -> None:
        """With replication on, the call's tenant as it now stands is in object storage: at the
        source once flushed (step 2), so its generation is in the bucket before the destination
        starts the copy's above it — two members never pick one; at the destination before it
        answers the import (step 4) and the activation (step 6), on which the source tombstones
        and reclaims — a destination that loses its volume afterwards restores the activated copy,
        not only the copy before its activation (which a restore passes over, while the source's
        tombstone sends callers back)."""
        if self._engine.replicator is not None:
            await waits.replicated(self._engine.hot_path, self._engine.consistency, call, deadline(call))

    async def finish(self, call: Call) -> None:
        """A call reached the copy of a tenant a move brought here, not active yet: activate it
        if its source shows its tombstone at the copy's epoch (the module's docstring)."""
        forwarder, pool, tenant = self._forwarder, self._engine.pool, call.tenant
        if forwarder is None:
            return
        lock = self._finishing.setdefault(tenant, asyncio.Lock())
        try:
            async with lock:
                placed = pool.placement(tenant)
                if not placed.pending_from:
                    return  # activated meanwhile
                try:
                    await forwarder.ask_member(
                        placed.pending_from,
                        PROBE_METHOD,
                        "unary_unary",
                        hot_path_pb2.HotPathRequest(tenant=tenant),
                        call,
                        PROBE_SECONDS,
                    )
                    return  # served there: the source is not tombstoned (yet)
                except Relayed as refused:
                    shown = refused.metadata
                    if not (
                        refused.reason == NOT_OWNER
                        and shown.get("owner") == forwarder.membership.me
                        and shown.get(MOVED_AT_EPOCH) == str(placed.pending_epoch)
                    ):
                        return
                except MnemosyneError:
                    return  # the source cannot be asked: the copy stays inactive, the caller retries
                if await call.run(self._engine.moves.activate, tenant, placed.pending_epoch, None):
                    log.warning(
                        "tenant %s: move from %s finished here (activated at epoch %d: its source's tombstone "
                        "names this member)",
                        tenant,
                        placed.pending_from,
                        placed.pending_epoch,
                    )
        finally:
            if not lock.locked():
                self._finishing.pop(tenant, None)
