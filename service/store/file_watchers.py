"""What a pool tells of its tenant files' changes to whoever watches them instead of polling every
file (engine/webhooks/ is one: it learns which tenants have deliveries to make)."""

from __future__ import annotations

from typing import Literal, Protocol

# What an open tenant file tells (``TenantStore``'s ``told``): a write committed, an erasure of
# content in it finished (``TenantStore.erase_traces``).
FileChange = Literal["committed", "content_erased"]


class FileWatcher(Protocol):
    """Told of tenant files' commits, installs, erasures of content in them and of whole tenants:
    only takes note (under the tenant's locks)."""

    def committed(self, tenant: str) -> None: ...
    def installed(self, tenant: str) -> None: ...
    def content_erased(self, tenant: str) -> None: ...
    def erased(self, tenant: str) -> None: ...
