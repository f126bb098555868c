"""Moving a tenant to another embedder online (``mnemosyne reembed``, the ReembedTenant RPC).

Each call does one step, so no transaction holds more than one chunk's embedding and the tenant
serves throughout:

* a chunk: the next memories without a next vector are read, embedded by the new embedder outside
  any transaction, and written to ``reembed_vectors`` (beside their current vectors, which recall
  goes on reading) with ONE ledger entry naming their digests, in ONE write transaction;
* the switch, once at most a chunk is left: in ONE transaction those (and the memories whose text
  an update changed since their next vector was made) are embedded, holding the write lock, every
  current vector is replaced by its next one, the tenant's embedder becomes the new one and the
  ledger says so; when more than a chunk is left by then, a chunk first.

From the step that begins a move to its switch, every write of the tenant (a retain, a fast write's
commit, an update) embeds its text by the new embedder too, outside its transaction, and writes that
next vector with its memory, with its own ledger entry (``write_next_vectors``). So what a move has
to do is the memories that were there when it began (and the writes already embedding then), never
what is written during it: it ends after a bounded number of steps whatever the write rate. A write
costs nothing more while no move runs (``TenantEmbedders.moving_to`` is cached on the open store).

The progress is the tenant file itself (the next vectors committed so far, and which embedder
they are for in ``meta``), so a step killed at any point loses at most its own chunk, and a rerun
goes on from there (a restarted server reads the move from ``meta``: its writes embed for it again).
After the switch the hot path's queued writes are embedded again (store/reembed_rows.py).
"""

from __future__ import annotations

import numpy as np

from mnemosyne.engine.ann import on_vectors_changed
from mnemosyne.engine.embedders import TenantEmbedders, make_embedder
from mnemosyne.engine.index import vectors_replaced
from mnemosyne.engine.limits import MAX_REEMBED_CHUNK
from mnemosyne.engine.prepared_item import PreparedItem
from mnemosyne.engine.types import ReembedProgress
from mnemosyne.errors import Conflict, InvalidArgument, NotFound
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.reembed_rows import REEMBED_META, text_crc
from mnemosyne.store.tenant_store import TenantStore, WriteTxn

DEFAULT_CHUNK = 256


class Reembedding:
    def __init__(self, *, pool: TenantPool, embedders: TenantEmbedders) -> None:
        self._pool = pool
        self._embedders = embedders

    def step(self, tenant: str, embedder: str, *, chunk_size: int = 0) -> ReembedProgress:
        """One step of moving ``tenant`` to ``embedder`` (a configuration name): a chunk of
        ``chunk_size`` memories (0: DEFAULT_CHUNK), or the switch. Call again until ``finished``."""
        if chunk_size < 0 or chunk_size > MAX_REEMBED_CHUNK:
            raise InvalidArgument(
                f"chunk_size is {chunk_size}; give 1-{MAX_REEMBED_CHUNK}, or 0 for {DEFAULT_CHUNK}",
                reason="CHUNK_SIZE_INVALID",
            )
        target = make_embedder(embedder or "")
        to = target.recorded
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise NotFound(f"tenant {tenant!r} has no data to re-embed", reason="TENANT_NOT_FOUND")
            current = self._embedders.of(store).recorded
            with store.read() as txn:
                moving_to = txn.meta(REEMBED_META)
                done, total = txn.reembed_counts()
            if current == to and moving_to is None:
                return ReembedProgress(embedder, done=total, total=total, finished=True, switched=0)
            if moving_to != to:
                with store.write() as txn:
                    txn.reset_reembedding(to)
                TenantEmbedders.moving(store, target)  # committed: writes embed for the move too
            chunk = chunk_size or DEFAULT_CHUNK
            with store.read() as txn:
                todo = txn.reembed_todo(chunk + 1)
            if len(todo) > chunk:
                return self._chunk(store, embedder, to, todo[:chunk])
            return self._switch(store, embedder, current, to, chunk)

    def _chunk(self, store: TenantStore, embedder: str, to: str, todo: list[tuple[int, str]]) -> ReembedProgress:
        rows = _next_vectors(embedder, todo)
        with store.write() as txn:
            self._still_moving(txn.meta(REEMBED_META), to)
            txn.put_reembedded(to, rows, newer=False)
            done, total = txn.reembed_counts()
        return ReembedProgress(embedder, done=done, total=total, finished=False, switched=0)

    def _switch(self, store: TenantStore, embedder: str, current: str, to: str, chunk: int) -> ReembedProgress:
        with store.write() as txn:
            self._still_moving(txn.meta(REEMBED_META), to)
            # The last chunk, with what was updated since its next vector was made (by a write that
            # began before the move did), is embedded here, holding the write lock, when it is at
            # most a chunk. More: another chunk first (writes made since bring their own).
            txn.drop_stale_reembedded()
            left = txn.reembed_todo(chunk + 1)
            if len(left) > chunk:
                done, total = txn.reembed_counts()
                return ReembedProgress(embedder, done=done, total=total, finished=False, switched=0)
            if left:
                txn.put_reembedded(to, _next_vectors(embedder, left), newer=True)
            _high, from_epoch = txn.index_state()
            switched = txn.switch_reembedded(from_=current, to=to)
            txn.set_meta("embedder", to)
            txn.delete_meta(REEMBED_META)
            txn.advance_forget_epoch()
        # Committed: recall and writes take the new embedder, and the vector caches reload (the
        # cache first: a recall of the new embedder never scores the old vectors).
        vectors_replaced(store)
        TenantEmbedders.moved(store, make_embedder(embedder))
        on_vectors_changed(store, (), from_epoch=from_epoch, to_epoch=from_epoch + 1)
        return ReembedProgress(embedder, done=switched, total=switched, finished=True, switched=switched)

    @staticmethod
    def _still_moving(moving_to: str | None, to: str) -> None:
        if moving_to != to:
            raise Conflict(
                f"another re-embedding of this tenant (to {moving_to or 'its current embedder'}) began meanwhile; "
                "run one at a time",
                reason="REEMBED_CONFLICT",
            )


def _next_vectors(embedder: str, todo: list[tuple[int, str]]) -> list[tuple[int, bytes, int]]:
    """(memory id, its vector by ``embedder``, the CRC of the text it was made from) of ``todo``."""
    vectors = make_embedder(embedder).embed([text for _, text in todo])
    return [
        (memory_id, np.ascontiguousarray(vector, dtype="<f4").tobytes(), text_crc(text))
        for (memory_id, text), vector in zip(todo, vectors)
    ]


def write_next_vectors(txn: WriteTxn, written: list[tuple[int, PreparedItem]]) -> None:
    """Inside a write's transaction, once its memories are written (memory id, item): each one's
    vector by the embedder a re-embedding moves the tenant to, made with its current one
    (engine/write_path.py ``_embed``), written as that move's, so the move never has it to do.
    None is written when that move ended or went to another embedder since they were made."""
    if all(p.next_vector is None for _, p in written):
        return
    to = txn.meta(REEMBED_META)
    rows = [(i, p.next_vector, text_crc(p.item.text)) for i, p in written if p.next_vector and p.next_vector_by == to]
    if to is not None and rows:
        txn.put_reembedded(to, rows, newer=True)
