"""The deletion of a tenant's replaced generations once ``--replica-retention`` has passed
(docs/replication.md): planned when a file starts a new generation, remembered in the data
directory across restarts (``.replica-sweeps.json``), carried out through our own S3 client
(replication/bucket.py) once the tenant's new generation is confirmed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mnemosyne.errors import Unavailable
from mnemosyne.replication.bucket import Bucket
from mnemosyne.replication.state_files import read_json, write_json

log = logging.getLogger("mnemosyne.replication")

SWEEPS_FILE_NAME = ".replica-sweeps.json"


class Sweeps:
    def __init__(self, data_dir: Path, bucket: Bucket, retention_seconds: float) -> None:
        self._path = data_dir / SWEEPS_FILE_NAME
        self._bucket = bucket
        self._retention_seconds = retention_seconds
        self._guard = threading.Lock()
        # Tenant -> (generation, when): its generations below are deleted from then.
        self._planned: dict[str, tuple[int, float]] = {
            tenant: (int(below), float(when)) for tenant, (below, when) in read_json(self._path).items()
        }

    def __bool__(self) -> bool:
        return bool(self._planned)

    def plan(self, tenant: str, below: int) -> None:
        """Delete ``tenant``'s generations below ``below`` once the retention has passed."""
        with self._guard:
            self._planned[tenant] = (below, time.time() + self._retention_seconds)
            planned = dict(self._planned)
        write_json(self._path, planned)

    def run(self, confirmed: Callable[[str], bool]) -> None:
        """The planned deletions that are due, of the tenants whose commits are all ``confirmed``
        in object storage (blocking: on an executor thread)."""
        now = time.time()
        with self._guard:
            due = [(tenant, below) for tenant, (below, when) in self._planned.items() if when <= now]
        for tenant, below in due:
            if not confirmed(tenant):
                continue
            try:
                deleted = self._bucket.delete_generations(tenant, below)
            except Unavailable as exc:
                log.warning("tenant %s: its old generations were not deleted yet: %s", tenant, exc.message)
                continue
            log.info("tenant %s: %d objects of generations below %d deleted (retention passed)", tenant, deleted, below)
            with self._guard:
                if self._planned.get(tenant, (0, 0.0))[0] == below:
                    del self._planned[tenant]
                planned = dict(self._planned)
            write_json(self._path, planned)
