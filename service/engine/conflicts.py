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
Latest write wins: adjudication runs in the write transaction that inserts the newer memory, so
order is the commit order, and the same code serves synchronous and hot-path writes.
"""

from __future__ import annotations

from collections.abc import Sequence

from mnemosyne.store.memory_rows import MemoryRow
from mnemosyne.store.tenant_store import WriteTxn

# Predicates whose subject has one current value at a time.
NON_FUNCTIONAL_PREDICATES = frozenset({"is", "are", "was", "were"})


def is_current(row: MemoryRow) -> bool:
    """Live, not merged away and not superseded: what Recall ranks first."""
    return not row.forgotten and not row.merged_into and not row.superseded_by


def is_attribute(triple: tuple[str, str, str]) -> bool:
    return triple[1] not in NON_FUNCTIONAL_PREDICATES


def adjudicate(
    txn: WriteTxn, *, memory_id: int, scope: str, triples: Sequence[tuple[str, str, str]], at: float
) -> list[int]:
    """Record what the new memory ``memory_id`` supersedes; return the ids of older memories that
    became wholly superseded by it. Runs inside the write transaction that inserted it."""
    touched: dict[int, None] = {}
    for subject, predicate, obj in triples:
        if not is_attribute((subject, predicate, obj)):
            continue
        for old_id, old_obj in txn.conflicting_triples(
            scope=scope, memory_id=memory_id, subject=subject, predicate=predicate, obj=obj
        ):
            txn.record_supersession(
                memory_id=old_id, subject=subject, predicate=predicate, obj=old_obj, by=memory_id, new_obj=obj, at=at
            )
            touched[old_id] = None
    if not touched:
        return []
    superseded = []
    rows = txn.memories_by_ids(list(touched))
    for old_id in touched:
        row = rows[old_id]
        if row.superseded_by:
            continue
        attributes = {(s, p) for s, p, o in row.triples if is_attribute((s, p, o))}
        if attributes and attributes <= txn.superseded_pairs(old_id):
            txn.mark_superseded(old_id, by=memory_id, at=at)
            superseded.append(old_id)
    return superseded
