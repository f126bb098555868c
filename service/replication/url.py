"""The replica URL (``--replica-url``, engine/config.py ``ReplicationConfig``):
``s3://BUCKET/PREFIX?endpoint=...``; each tenant's files replicate under
``PREFIX/<tenant>/<generation>/{db,inbox}`` (docs/replication.md#where-the-replicas-live)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from mnemosyne.errors import InvalidArgument

# The replica of each of a tenant's two files, under its generation.
DATABASE_REPLICA = "db"
INBOX_REPLICA = "inbox"
GENERATION_DIGITS = 8


@dataclass(frozen=True)
class ReplicaUrl:
    """Where the replicas live: a bucket, a key prefix ("" = the bucket's root), the query
    Litestream's S3 client takes (endpoint, region, ...), and the endpoint and region our own S3
    client uses."""

    bucket: str
    prefix: str
    query: str
    endpoint: str | None
    region: str

    @classmethod
    def parse(cls, url: str) -> ReplicaUrl:
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise InvalidArgument(
                f"replica URL {url!r} is not s3://BUCKET/PREFIX[?endpoint=URL]: replicas go to S3-compatible "
                "object storage",
                reason="CONFIG_INVALID",
            )
        query = parse_qs(parts.query)
        endpoint: str | None = query["endpoint"][0] if query.get("endpoint") else None
        if endpoint and "://" not in endpoint:
            endpoint = f"https://{endpoint}"
        region = (query.get("region") or [os.environ.get("AWS_REGION") or "us-east-1"])[0]
        return cls(parts.netloc, parts.path.strip("/"), parts.query, endpoint, region)

    def key(self, *parts: str) -> str:
        """An object key (or key prefix) under the prefix."""
        return "/".join(part for part in (self.prefix, *parts) if part)

    def of(self, tenant: str, generation: int, file: str) -> str:
        """The Litestream replica URL of one of ``tenant``'s files in ``generation``."""
        path = self.key(tenant, generation_name(generation), file)
        return f"s3://{self.bucket}/{path}" + (f"?{self.query}" if self.query else "")


def generation_name(generation: int) -> str:
    return f"{generation:0{GENERATION_DIGITS}d}"
