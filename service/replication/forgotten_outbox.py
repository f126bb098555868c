"""A forget's forgotten memories on their way to object storage (replication/bucket.py
``add_forgotten``, so that no restore brings one back): told to the bucket at the forget, and
when it cannot be told — for the forget a client waits for, within a few seconds — kept in the
data directory (``FILE_NAME``) and sent by the replication's tick once it can."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from mnemosyne.errors import Unavailable
from mnemosyne.replication.bucket import Bucket, ForgottenMemory
from mnemosyne.replication.state_files import read_json, write_json

log = logging.getLogger("mnemosyne.replication")

FILE_NAME = ".replica-forgotten.json"


class ForgottenOutbox:
    def __init__(self, data_dir: Path, bucket: Bucket) -> None:
        self._path = data_dir / FILE_NAME
        self._bucket = bucket
        self._guard = threading.Lock()
        # Tenant -> its forgotten memories the bucket could not be told of yet.
        self._unsent: dict[str, list[ForgottenMemory]] = {
            tenant: [(int(i), float(c)) for i, c in memories] for tenant, memories in read_json(self._path).items()
        }

    def send(self, tenant: str, found: list[ForgottenMemory], *, quick: bool) -> None:
        """Tell the bucket of ``found`` and of what the tenant kept here before; kept here (not
        raised) when object storage cannot be reached. ``quick``: the short timeouts of a call a
        client waits for."""
        with self._guard:
            unsent = self._unsent.pop(tenant, [])
        try:
            self._bucket.add_forgotten(tenant, [*unsent, *found], quick=quick)
        except Unavailable as exc:
            log.warning("tenant %s: its forgotten memories are not in object storage yet: %s", tenant, exc.message)
            with self._guard:
                self._unsent[tenant] = sorted({*self._unsent.get(tenant, []), *unsent, *found})
            self._save()
            return
        if unsent:
            self._save()

    def waiting(self) -> list[str]:
        """The tenants with forgotten memories kept here."""
        with self._guard:
            return list(self._unsent)

    def drop(self, tenant: str) -> None:
        """The tenant's replicas are gone: its forgotten memories with them (none to send)."""
        with self._guard:
            dropped = self._unsent.pop(tenant, None)
        if dropped is not None:
            self._save()

    def _save(self) -> None:
        with self._guard:  # written under it: a later state is never overwritten by an earlier one
            write_json(self._path, self._unsent)
