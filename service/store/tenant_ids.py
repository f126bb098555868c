"""The rule a tenant id follows before it becomes a file name (store/pool.py), on every surface."""

from __future__ import annotations

import re

from mnemosyne.errors import InvalidArgument

TENANT_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def validate_tenant(tenant: str) -> str:
    """Return the tenant id if it is safe to become a file name, else raise InvalidArgument."""
    if not isinstance(tenant, str) or not TENANT_ID_PATTERN.fullmatch(tenant):
        shown = repr(tenant[:80]) if isinstance(tenant, str) else type(tenant).__name__
        raise InvalidArgument(
            f"tenant {shown} is not a valid tenant id: use 1-63 characters of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit",
            reason="TENANT_INVALID",
        )
    return tenant
