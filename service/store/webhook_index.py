"""The webhook index: the tenants of this member that have webhook subscriptions, in a small SQLite
file of the data directory (``webhooks.sqlite``), so the delivery worker finds every tenant that
may have deliveries pending without opening every tenant file (engine/webhooks/worker.py).

A tenant is added (durably: ``synchronous=FULL``) BEFORE its first subscription commits, so the
index may name a tenant with no subscription left (harmless: the worker looks once and removes
it) but never misses one whose outbox has rows. A tenant that arrives with its file (an import, a
move's activation) is added by whoever installed it. A file made before this index existed is
built once, from the tenant files that hold a subscription (``rebuild``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import apsw

from mnemosyne.store.member_index import MemberIndex
from mnemosyne.store.transactions import translate_sqlite_error

INDEX_FILE_NAME = "webhooks.sqlite"


class WebhookIndex(MemberIndex):
    def __init__(self, data_dir: Path) -> None:
        self.built = (data_dir / INDEX_FILE_NAME).exists()  # False: a new file, to be filled by ``rebuild``
        super().__init__(data_dir, INDEX_FILE_NAME, "subscribed")

    def rebuild(self, tenants: Iterable[str]) -> None:
        for tenant in tenants:
            self.add(tenant)
        self.built = True

    def remove(self, tenant: str, *, erase: bool = False) -> None:
        """``erase``: the tenant was erased; its name leaves the index's WAL too."""
        super().remove(tenant)
        if erase:
            with self._lock:
                try:
                    self._connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
                except apsw.Error as exc:
                    raise translate_sqlite_error(exc, INDEX_FILE_NAME) from exc
