"""Tenants as a whole: their counters, the list of them, and aggregates across them (admin)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from concurrent import futures

from mnemosyne.engine import limits as check
from mnemosyne.engine import page_tokens
from mnemosyne.engine.types import AggregateChunk, TenantPage, TenantStats
from mnemosyne.errors import InvalidArgument, MnemosyneError
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import ReadTxn

# Tenant files an aggregate reads at once (SQLite releases the GIL while it reads).
AGGREGATE_CONCURRENCY = 4
log = logging.getLogger("mnemosyne.engine")


class Tenants:
    def __init__(self, *, pool: TenantPool, limits: check.Limits) -> None:
        self.pool = pool
        self._limits = limits

    def stats(self, tenant: str) -> TenantStats:
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return TenantStats()
            with store.read() as txn:
                return self._stats(txn, tenant)

    def _stats(self, txn: ReadTxn, tenant: str) -> TenantStats:
        counters = txn.counters()
        live, forgotten, entries = txn.counts()
        lag_seconds, lag_bytes = self.pool.replicas.lag(tenant)
        return TenantStats(
            memories=live,
            forgotten=forgotten,
            writes=counters.get("writes", 0),
            model_calls=counters.get("model_calls", 0),
            embed_calls=counters.get("embed_calls", 0),
            duplicates=counters.get("duplicates", 0),
            ledger_entries=entries,
            file_bytes=self.pool.file_bytes(tenant),
            replication_lag_seconds=lag_seconds,
            replication_lag_bytes=lag_bytes,
        )

    def page(
        self,
        *,
        page_size: int = 0,
        page_token: str = "",
        elsewhere: Mapping[str, bool] | None = None,
        secret: bytes | None = None,
    ) -> TenantPage:
        """Tenant ids with a file, in lexical order, one page at a time. ``elsewhere``: the
        tenants of the other members of a deployment (tenant -> whether its file is damaged),
        listed with this member's (the admin fan-out, transport/cluster/fanout.py), its page tokens
        signed with ``secret``, one every member has (its next page may be asked of any member).
        A page holds at most --max-page-size tenants, as every list's (0: 1,000, or that cap when
        lower)."""
        secret = secret or self.pool.secret
        page_size = check.validate_page_size(page_size, self._limits, default=1_000)
        after = page_tokens.decode(secret, "", "tenants", page_token) or ""
        # Listing the directory is cheap next to opening files; 10,000 names are a few hundred KB.
        local = self.pool.tenant_ids()
        names = sorted(set(local).union(elsewhere)) if elsewhere else local
        names = [t for t in names if t > after]
        page = names[:page_size]
        token = page_tokens.encode(secret, "", "tenants", page[-1]) if len(names) > page_size else ""
        if not elsewhere:
            return TenantPage(page, token, self.pool.damaged(page))
        mine = set(local)
        damaged = self.pool.damaged([t for t in page if t in mine])
        damaged += [t for t in page if t not in mine and elsewhere[t]]
        return TenantPage(page, token, sorted(damaged))

    def aggregate_stats(self, *, chunk_size: int = 0) -> Iterator[AggregateChunk]:
        """Stats of every tenant, ``chunk_size`` tenants per chunk, then a total in the last one.

        NOT a snapshot: N files read in N separate transactions while writes go on. Tenants are
        read AGGREGATE_CONCURRENCY at a time, each through a connection of its own unless it is
        open already (so an aggregate never pushes the busy tenants out of the pool of open
        files). A tenant that cannot be read (a damaged file) is a row with its error reason,
        left out of the total; it never stops the aggregate."""
        if chunk_size < 0 or chunk_size > 1_000:
            raise InvalidArgument(f"chunk_size is {chunk_size}; give 1-1000, or 0 for 100", reason="CHUNK_SIZE_INVALID")
        chunk_size = chunk_size or 100
        # The list as of now (a tenant made later is not included), without the files of tenants
        # another member serves (a move's tombstone, or its copy not yet active).
        tenants = [t for t in self.pool.tenant_ids() if self.pool.served_here(t)]
        total = TenantStats()
        files_read = unreadable = 0
        with futures.ThreadPoolExecutor(AGGREGATE_CONCURRENCY, thread_name_prefix="aggregate") as readers:
            for start in range(0, max(len(tenants), 1), chunk_size):
                rows = list(readers.map(self._aggregate_row, tenants[start : start + chunk_size]))
                files_read += len(rows)
                for _tenant, stats, error in rows:
                    if error:
                        unreadable += 1
                        continue
                    total = total.plus(stats)
                last = start + chunk_size >= len(tenants)
                yield AggregateChunk(rows, total if last else None, files_read, unreadable)

    def _aggregate_row(self, tenant: str) -> tuple[str, TenantStats, str]:
        try:
            with self.pool.glance(tenant) as txn:
                return tenant, self._stats(txn, tenant), ""
        except FileNotFoundError:
            return tenant, TenantStats(), ""  # removed since the listing
        except MnemosyneError as exc:
            return tenant, TenantStats(), exc.reason
        except Exception:  # a fault of ours in one tenant must not end everyone's aggregate
            log.exception("aggregate: reading tenant %s failed", tenant)
            return tenant, TenantStats(), "INTERNAL"
