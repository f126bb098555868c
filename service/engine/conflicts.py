"""Conflict adjudication: a newer fact replaces an older one about the same thing.

When a memory is inserted whose triple has the same subject and predicate as a current triple of
another live memory in the same scope, but a different object ("ticket rf-88213 | status |
awaiting review" then "ticket rf-88213 | status | refunded"), the older triple is recorded as
superseded (table ``supersessions``: which memory replaced it, with what value, when). When every
attribute triple of the older memory is superseded, the memory itself is marked
``superseded_by`` (kept whole, never erased, one ``supersede`` ledger entry), and Recall ranks it
after current memories.

Only attribute predicates are adjudicated: the "X status: Y" family and possessives ("X's owner
is Y"). The copula "X is Y" is not: "Alice is a doctor" and "Alice is a runner" are both true.

Latest ACCEPTED fact wins, whatever order writes are applied in (docs/hot-path.md "Read your own
writes"): each memory has its acceptance position (store/acceptance.py), and a fact is superseded
by the earliest-accepted later fact of another value — exactly what applying the writes one by one
in acceptance order gives. So when a write accepted earlier is applied after a later one (a fast
write the worker took ahead of the backlog for a read waiting on it; a synchronous write accepted
after queued fast writes), it is inserted already superseded by the later one, and it takes the
place of the later one as the superseder of the facts accepted before it. The same code serves
synchronous, hot-path and update writes, in the write transaction that inserts the memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from mnemosyne.store.memory_rows import MemoryRow
from mnemosyne.store.memory_writes import Rival
from mnemosyne.store.tenant_store import WriteTxn

# Predicates whose subject has one current value at a time.
NON_FUNCTIONAL_PREDICATES = frozenset({"is", "are", "was", "were"})


def is_current(row: MemoryRow) -> bool:
    """Live, not merged away and not superseded: what Recall ranks first."""
    return not row.forgotten and not row.merged_into and not row.superseded_by


def is_attribute(triple: tuple[str, str, str]) -> bool:
    return triple[1] not in NON_FUNCTIONAL_PREDICATES


def adjudicate(
    txn: WriteTxn,
    *,
    memory_id: int,
    acceptance: int,
    scope: str,
    triples: Sequence[tuple[str, str, str]],
    at: float,
) -> list[int]:
    """Record what the new memory ``memory_id`` (accepted at ``acceptance``) supersedes and what
    supersedes it; return the ids of memories that became wholly superseded BY it. Runs inside the
    write transaction that inserted it."""
    mine = (acceptance, memory_id)
    touched: dict[int, None] = {}
    superseded_self = False
    for subject, predicate, obj in triples:
        if not is_attribute((subject, predicate, obj)):
            continue
        later: Rival | None = None
        for rival in txn.rival_triples(scope=scope, memory_id=memory_id, subject=subject, predicate=predicate, obj=obj):
            if (rival.acceptance, rival.memory_id) > mine:
                if later is None or (rival.acceptance, rival.memory_id) < (later.acceptance, later.memory_id):
                    later = rival  # the first later fact of another value supersedes this one
            elif not rival.superseded_by:
                txn.record_supersession(
                    memory_id=rival.memory_id, subject=subject, predicate=predicate, obj=rival.obj, by=memory_id,
                    new_obj=obj, at=at,
                )  # fmt: skip
                touched[rival.memory_id] = None
            elif (rival.superseder_acceptance, rival.superseded_by) > mine:
                txn.repoint_supersession(
                    memory_id=rival.memory_id, subject=subject, predicate=predicate, by=memory_id, new_obj=obj, at=at
                )
                touched[rival.memory_id] = None
        if later is not None:
            txn.record_supersession(
                memory_id=memory_id, subject=subject, predicate=predicate, obj=obj, by=later.memory_id,
                new_obj=later.obj, at=at,
            )  # fmt: skip
            superseded_self = True
    if superseded_self:
        _settle(txn, memory_id, at)
    return [old_id for old_id in touched if _settle(txn, old_id, at) == memory_id]


def _settle(txn: WriteTxn, memory_id: int, at: float) -> int:
    """Mark the memory wholly superseded once every attribute fact of it is, by the latest
    accepted of its superseders (the write whose insertion, in acceptance order, superseded its
    last current fact). Returns the memory it was marked superseded by now (0: unchanged)."""
    row = txn.memories_by_ids([memory_id])[memory_id]
    attributes = {(s, p) for s, p, o in row.triples if is_attribute((s, p, o))}
    superseders = txn.superseders(memory_id)
    if not attributes or not attributes <= set(superseders):
        return 0
    by = max(superseders.values(), key=lambda found: (found[1], found[0]))[0]
    if row.superseded_by == by:
        return 0
    txn.mark_superseded(memory_id, by=by, at=at)
    return by
