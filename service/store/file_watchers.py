"""What a pool tells of its tenant files' changes to whoever watches them instead of polling every
file (engine/webhooks/ is one: it learns which tenants have deliveries to make)."""

from __future__ import annotations

from typing import Protocol


class FileWatcher(Protocol):
    """Told of tenant files' commits, installs, erasures: only takes note (under the tenant's locks)."""

    def committed(self, tenant: str) -> None: ...
    def installed(self, tenant: str) -> None: ...
    def erased(self, tenant: str) -> None: ...
