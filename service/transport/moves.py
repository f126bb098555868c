"""MoveTenant and ActivateTenant: a tenant's move between members, driven by its source.

The steps and what each records are the engine's (engine/moves.py); here they are strung
together, each on a worker thread, with the two calls the source makes to the destination on the
caller's behalf (its admin token, routed to the destination): the import (step 4, the export's
chunks streamed as an ImportTenant carrying ``move_epoch``) and the activation (step 6). A call
asked again after any interruption starts from the step after the last one recorded.

Test seam: ``MNEMOSYNE_TEST_MOVE_HOLD_AFTER=STEP`` holds the first move of the process after that
step (the call waits until it is cancelled or the process killed), so a test can kill any member
or the rebalancer exactly there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from mnemosyne.engine.engine import Engine
from mnemosyne.engine.moves import STEPS, MovePlan
from mnemosyne.errors import FailedPrecondition, InvalidArgument
from mnemosyne.transport import convert
from mnemosyne.transport.call import Call
from mnemosyne.transport.forwarding import Forwarder
from mnemosyne.v1 import admin_pb2

IMPORT_METHOD = "/mnemosyne.v1.AdminService/ImportTenant"
ACTIVATE_METHOD = "/mnemosyne.v1.AdminService/ActivateTenant"
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
            await self._step_done(plan, "flushed", steps)
        head_hash = plan.head_hash
        if plan.needs("imported"):
            copy, parts = await call.run(moves.export, plan)
            head_hash, memories = copy.facts.head_hash, copy.facts.memories
            plan = MovePlan(plan.tenant, plan.destination, plan.epoch, "exported", head_hash)
            await self._step_done(plan, "exported", steps)
            counted = [0]

            async def messages() -> AsyncIterator[admin_pb2.ImportTenantRequest]:
                yield admin_pb2.ImportTenantRequest(
                    tenant=plan.tenant,
                    manifest=convert.to_tenant_backup(copy),
                    move_epoch=plan.epoch,
                    move_source=forwarder.membership.me,
                )
                while (part := await call.run(next, parts, None)) is not None:
                    chunk = convert.to_export_response(part).chunk
                    counted[0] += len(chunk.data)
                    yield admin_pb2.ImportTenantRequest(chunk=chunk)

            try:
                imported = await forwarder.ask_member(
                    plan.destination, IMPORT_METHOD, "stream_unary", messages(), call, IMPORT_SECONDS
                )
            finally:
                parts.close()  # type: ignore[attr-defined]  # the export's generator: its scratch copy goes
            sent = counted[0]
            await call.run(moves.imported, plan, imported.head_hash)
            await self._step_done(plan, "imported", steps)
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
        return admin_pb2.MoveTenantResponse(
            tenant=plan.tenant,
            source=forwarder.membership.me,
            destination=plan.destination,
            epoch=plan.epoch,
            head_hash=head_hash,
            bytes=sent,
            steps=steps,
            memories=memories,
        )

    async def activate(self, request: admin_pb2.ActivateTenantRequest, call: Call) -> admin_pb2.ActivateTenantResponse:
        activated = await call.run(self._engine.moves.activate, request.tenant, int(request.epoch), request.head_hash)
        return admin_pb2.ActivateTenantResponse(tenant=request.tenant, epoch=request.epoch, activated=activated)
