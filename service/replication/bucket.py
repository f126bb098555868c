"""Our own calls to the bucket (Litestream writes the replicas; we read what is there and delete
what must go), through boto3, the AWS SDK for Python (docs/decisions.md says why): which
generations of a tenant exist, whether the bucket holds a tenant at all, the tenants it holds,
the deletion of a tenant's replicas, and what a restore must not bring back, kept beside each
tenant's generations: ``PREFIX/<tenant>/forgotten.json`` (its forgotten memories) and
``PREFIX/<tenant>/erased.json`` (an erasure, and the generation a copy must be above to be
replicated again). An unreachable store is UNAVAILABLE REPLICA_UNREACHABLE naming the cause,
never taken for an empty one."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from mnemosyne.errors import Unavailable
from mnemosyne.replication.url import GENERATION_DIGITS, ReplicaUrl, generation_name

UNREACHABLE = "REPLICA_UNREACHABLE"
# Short: a member that cannot reach its store answers UNAVAILABLE within seconds, not minutes.
_CLIENT = botocore.config.Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"})
# Shorter, for a call a client's write waits for and can do without (a forget's forgotten memories,
# kept in the data directory and sent later when object storage does not answer at once).
_QUICK_CLIENT = botocore.config.Config(
    connect_timeout=2, read_timeout=3, retries={"max_attempts": 1, "mode": "standard"}
)
FORGOTTEN_OBJECT = "forgotten.json"
ERASED_OBJECT = "erased.json"
UNANSWERED_SECONDS = 10.0  # after the store did not answer an open's question, the opens go on without it
# What object storage answers a replica URL or keys that are wrong (not a store that is down).
_MISCONFIGURED = frozenset(
    {"NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}
)
# Keys missing (or half given) where the AWS SDK looks for them: the call is never sent.
_NO_KEYS = (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError)
HOLDER_OBJECT = "holder.json"  # beside a generation's files: the member that started it
# A forgotten memory as the bucket keeps it: its id and its creation time (``memories.created_at``,
# which a forget keeps). The pair names one memory of one tenant's history: an imported tenant's
# memory of the same id was created at another time, and is not forgotten by it.
ForgottenMemory = tuple[int, float]


class Bucket:
    """The bucket and prefix of a replica URL."""

    def __init__(self, url: ReplicaUrl) -> None:
        self.url = url
        self._unanswered_until = 0.0  # ``newer_than`` is not asked before then (the store did not answer)
        session = boto3.session.Session()
        self._s3: Any = session.client("s3", endpoint_url=url.endpoint, region_name=url.region, config=_CLIENT)
        self._quick_s3: Any = session.client(
            "s3", endpoint_url=url.endpoint, region_name=url.region, config=_QUICK_CLIENT
        )

    def _client(self, quick: bool) -> Any:
        return self._quick_s3 if quick else self._s3

    def _unreachable(self, doing: str, exc: Exception) -> Unavailable:
        code = exc.response.get("Error", {}).get("Code", "") if isinstance(exc, botocore.exceptions.ClientError) else ""
        # A wrong setting is no outage: no retry delay, so a client raises it at once rather than
        # waiting out its retry window for an operator's fix.
        retry_after: float | None = None
        if isinstance(exc, _NO_KEYS):  # no answer will come: nothing was sent
            remedy = "no keys for object storage were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        elif code in _MISCONFIGURED:
            remedy = "the replica URL's bucket or the AWS_* keys are wrong: correct them"
        else:
            remedy, retry_after = "retry once it answers", 1.0
        return Unavailable(
            f"object storage (bucket {self.url.bucket} at {self.url.endpoint or 'AWS'}) could not be asked {doing}: "
            f"{exc}; {remedy}",
            reason=UNREACHABLE,
            retry_after_seconds=retry_after,
        )

    def _pages(self, doing: str, **listing: Any) -> Iterator[dict[str, Any]]:
        try:
            yield from self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.url.bucket, **listing)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise self._unreachable(doing, exc) from None

    def generations(self, tenant: str, *, above: int = 0) -> list[int]:
        """The generations the bucket holds of ``tenant`` (those ``above`` only), lowest first:
        those with an object (a store with directories, as SeaweedFS's, may list a deleted one's
        empty directory). One LIST, and one per generation listed above ``above``."""
        found = []
        for page in self._pages(f"for the generations of {tenant}", Prefix=self.url.key(tenant) + "/", Delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                name = common["Prefix"].rstrip("/").rpartition("/")[2]
                if len(name) == GENERATION_DIGITS and name.isdigit() and int(name) > above:
                    if self.holds(tenant, f"{name}/"):
                        found.append(int(name))
        return sorted(found)

    def holds(self, tenant: str, under: str = "") -> bool:
        """Whether any object of ``tenant`` (under its key ``under``, e.g. a generation's file) is
        in the bucket."""
        for page in self._pages(f"whether it holds {tenant}", Prefix=self.url.key(tenant) + "/" + under, MaxKeys=1):
            if page.get("KeyCount", 0):
                return True
        return False

    def uploaded(self, tenant: str, under: str) -> tuple[datetime, datetime] | None:
        """When the first and the last of ``tenant``'s LTX files under its key ``under`` (one
        generation's file) reached the bucket (their LastModified, the times Litestream's restore
        bounds a point in time by); None when it holds none."""
        times = [
            item["LastModified"]
            for page in self._pages(f"for the files of {tenant}", Prefix=self.url.key(tenant) + "/" + under)
            for item in page.get("Contents", [])
            if item["Key"].endswith(".ltx")
        ]
        return (min(times), max(times)) if times else None

    def newest_held(self, tenant: str) -> int:
        """The highest generation the bucket holds of ``tenant`` (0: none): the floor of a copy of
        it installed now (store/replicas.py ``FLOOR_KEY``)."""
        held = self.generations(tenant)
        return held[-1] if held else 0

    def highest_generation(self, tenant: str) -> int:
        """The generation a new one of ``tenant`` must be above: the highest the bucket holds, or
        the one its erasure recorded (0: none)."""
        held = self.generations(tenant)
        erased = self._read_json(self.url.key(tenant, ERASED_OBJECT), f"whether {tenant} was erased")
        return max([*held, int(erased.get("above", 0)) if isinstance(erased, dict) else 0])

    def erased(self, tenant: str) -> bool:
        """Whether ``tenant`` was erased and holds no generation since."""
        return not self.generations(tenant) and bool(
            self._read_json(self.url.key(tenant, ERASED_OBJECT), f"whether {tenant} was erased")
        )

    def record_holder(self, tenant: str, generation: int, holder: str) -> None:
        """Keep beside a generation the member that started it ("" without members), so a member
        without the tenant's file learns cheaply whether the replica is its own (``holder``)."""
        self._write_json(self.url.key(tenant, generation_name(generation), HOLDER_OBJECT), holder, f"{tenant}'s holder")

    def holder(self, tenant: str) -> str | None:
        """The member that started ``tenant``'s highest generation (``record_holder``); None when
        the bucket holds no generation of it, or none that says."""
        held = self.generations(tenant)
        if not held:
            return None
        found = self._read_json(self.url.key(tenant, generation_name(held[-1]), HOLDER_OBJECT), f"{tenant}'s holder")
        return found if isinstance(found, str) else None

    def newer_than(self, tenant: str, generation: int) -> tuple[int, str] | None:
        """(``tenant``'s highest generation, the member that started it) when it is above
        ``generation``; else None (an erased tenant holds none: its stale copy is served where
        it is, and never replicated again)."""
        if time.monotonic() < self._unanswered_until:  # not one wait for its timeouts per open meanwhile
            raise self._unreachable(
                f"whether {tenant}'s file is its newest copy", RuntimeError("it did not answer lately")
            )
        try:
            held = self.generations(tenant, above=generation)
            return (held[-1], self.holder(tenant) or "") if held else None
        except Unavailable:
            self._unanswered_until = time.monotonic() + UNANSWERED_SECONDS
            raise

    def forgotten(self, tenant: str, *, quick: bool = False) -> set[ForgottenMemory]:
        """The memories of ``tenant`` forgotten so far (``add_forgotten``)."""
        kept = self._read_json(self.url.key(tenant, FORGOTTEN_OBJECT), f"for {tenant}'s forgotten memories", quick)
        return {(int(memory_id), float(created_at)) for memory_id, created_at in kept or []}

    def add_forgotten(self, tenant: str, memories: Iterable[ForgottenMemory], *, quick: bool = False) -> None:
        """Keep these forgotten memories of ``tenant`` with those kept before (a union: a
        restored file may lack forgets the bucket has, and re-applies them first). ``quick``:
        with the short timeouts of a call a client waits for."""
        kept = self.forgotten(tenant, quick=quick)
        wanted = kept.union(memories)
        if wanted != kept:
            key = self.url.key(tenant, FORGOTTEN_OBJECT)
            self._write_json(key, sorted(wanted), f"{tenant}'s forgotten memories", quick)

    def _read_json(self, key: str, doing: str, quick: bool = False) -> Any:
        try:
            body = self._client(quick).get_object(Bucket=self.url.bucket, Key=key)["Body"].read()
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise self._unreachable(doing, exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._unreachable(doing, exc) from None
        return json.loads(body)

    def _write_json(self, key: str, value: Any, what: str, quick: bool = False) -> None:
        try:
            self._client(quick).put_object(Bucket=self.url.bucket, Key=key, Body=json.dumps(value).encode())
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise self._unreachable(f"to keep {what}", exc) from None

    def tenants(self) -> list[str]:
        """The tenants the bucket holds a replica of, in lexical order."""
        prefix = self.url.key() + "/" if self.url.prefix else ""
        names = []
        for page in self._pages("for its tenants", Prefix=prefix, Delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                names.append(common["Prefix"][len(prefix) :].rstrip("/"))
        return sorted(names)

    def delete_tenant(self, tenant: str, given_up: threading.Event | None = None) -> int:
        """Delete every object of ``tenant`` (every generation, every version, its forgotten
        memories), then record its erasure: a copy of it left anywhere (a member's stale volume)
        is below the generation recorded, so it is never replicated again, and a tenant of that
        name created later starts above it. How many objects went. Once ``given_up`` is set (the
        erasure was given up) it stops at its next call to object storage and records none."""
        above = self.highest_generation(tenant) + 1
        deleted = self._delete_under(self.url.key(tenant) + "/", f"the replicas of {tenant}", given_up)
        if given_up is None or not given_up.is_set():
            self._write_json(self.url.key(tenant, ERASED_OBJECT), {"above": above}, f"the erasure of {tenant}")
        return deleted

    def delete_generations(self, tenant: str, below: int) -> int:
        """Delete ``tenant``'s generations lower than ``below`` (every version of every object);
        how many objects went."""
        return sum(
            self._delete_under(self.url.key(tenant, generation_name(generation)) + "/", f"{tenant}'s old generation")
            for generation in self.generations(tenant)
            if generation < below
        )

    def _delete_under(self, prefix: str, what: str, given_up: threading.Event | None = None) -> int:
        """Every version and delete marker under ``prefix`` (a versioned bucket keeps an object's
        bytes in its old versions after a plain delete; an unversioned one lists each object once,
        version "null")."""
        doomed = []
        try:
            for page in self._s3.get_paginator("list_object_versions").paginate(Bucket=self.url.bucket, Prefix=prefix):
                for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
                    doomed.append({"Key": entry["Key"], "VersionId": entry.get("VersionId") or "null"})
            for start in range(0, len(doomed), 1000):  # DeleteObjects takes 1,000 keys a call
                if given_up is not None and given_up.is_set():
                    return start
                chunk = doomed[start : start + 1000]
                self._s3.delete_objects(Bucket=self.url.bucket, Delete={"Objects": chunk, "Quiet": True})
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise self._unreachable(f"to delete {what}", exc) from None
        return len(doomed)
