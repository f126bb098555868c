"""``mnemosyne restore --from-replica URL``: tenants brought back from object storage
(docs/replication.md#restore).

* Offline, a whole member (or ``--tenant``s) into ``--data-dir``, which no server may hold (its
  lock is taken): every tenant is fetched and its audit chain checked before any file is placed.
  An erased tenant is not restored (named, it is refused TENANT_ERASED).
* Online, one tenant (``--tenant`` without ``--data-dir``): fetched here, then installed on the
  running server at ``--target`` through ``import --replace`` — the fenced path every import
  takes (calls in flight finish, the tenant's tokens see TIMELINE_CHANGED) — so undoing a bad
  agent run stops no member. ``--timestamp`` (RFC 3339) picks the state at that time.

Each restored file replicates to a new generation once served (store/replicas.py): a copy never
continues the replica it came from."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from mnemosyne.cli.backup import StepDone, listed, place_tenant
from mnemosyne.client import MemoryClient
from mnemosyne.client.types import BackupChunk, BackupFile, ImportResult, TenantBackup
from mnemosyne.errors import DataLoss, FailedPrecondition, InvalidArgument, NotFound
from mnemosyne.replication.bucket import Bucket
from mnemosyne.replication.restore import Fetched, fetch, point_in_time
from mnemosyne.replication.url import ReplicaUrl
from mnemosyne.store.data_dir import (
    INBOX_DIR_NAME,
    NEW_FILE_PREFIX,
    TENANT_FILE_SUFFIX,
    TENANTS_DIR_NAME,
    DataDirLock,
    refuse_inside_another,
    remove_leftovers,
)
from mnemosyne.store.paths import tenant_named_by
from mnemosyne.store.pending_index import PendingIndex
from mnemosyne.store.replicas import forget_generation
from mnemosyne.store.snapshot import file_facts, sha256_file
from mnemosyne.store.tenant_file import unmade_objects
from mnemosyne.store.tenant_ids import validate_tenant
from mnemosyne.store.tenant_store import read_file

CHUNK_BYTES = 1 << 20


def _fetched(bucket: Bucket, tenant: str, into: Path, timestamp: str | None) -> Fetched:
    """The tenant's files from object storage, their chain checked."""
    fetched = _fetched_if_held(bucket, tenant, into, timestamp)
    if fetched is None and bucket.erased(tenant):
        raise NotFound(
            f"tenant {tenant} was erased: object storage keeps none of it, and a restore never brings it back",
            reason="TENANT_ERASED",
        )
    if fetched is None:
        when = f" at or before {timestamp}" if timestamp else ""
        raise NotFound(
            f"object storage ({bucket.url.bucket}/{bucket.url.prefix}) holds no replica of tenant {tenant}{when}",
            reason="TENANT_NOT_IN_REPLICA",
        )
    return fetched


def _fetched_if_held(bucket: Bucket, tenant: str, into: Path, timestamp: str | None) -> Fetched | None:
    """The tenant's files from object storage, their chain checked; None when it holds none of
    them (or none at or before ``timestamp``)."""
    fetched = fetch(bucket, tenant, into, timestamp=timestamp)
    if fetched is None:
        return None
    with read_file(fetched.database) as txn:
        unmade = unmade_objects(txn.connection)
        verdict = txn.audit()
    if unmade:
        raise DataLoss(
            f"the replica of tenant {tenant} (generation {fetched.generation}) is not a tenant file as this program "
            f"makes it: its schema has {', '.join(unmade[:5])}: nothing was restored",
            reason="CHAIN_INVALID",
        )
    if not verdict.valid:
        raise DataLoss(
            f"the replica of tenant {tenant} (generation {fetched.generation}) fails its audit chain at entry "
            f"{verdict.first_broken_at}: nothing was restored",
            reason="CHAIN_INVALID",
        )
    return fetched


def _listed(bucket: Bucket) -> list[str]:
    """The tenants the bucket holds, each held to a client's rule: a name no client could give
    (an object put there by hand, another tool's) is refused, TENANT_INVALID, before anything is
    fetched; a tenant file of that name would never be served, and its open operations never end."""
    where = f"object storage ({bucket.url.bucket}/{bucket.url.prefix})"
    try:
        return [tenant_named_by(tenant, where) for tenant in bucket.tenants()]
    except InvalidArgument as exc:
        raise InvalidArgument(f"{exc.message}; name the tenants to restore with --tenant", reason=exc.reason) from None


def _chosen(bucket: Bucket, tenants: Sequence[str]) -> list[str]:
    """The tenants named (each once), or every tenant the bucket holds but those erased (named
    ones are refused: ``_fetched``); NOT_FOUND when that is none."""
    chosen = list(dict.fromkeys(validate_tenant(t) for t in tenants)) or [
        t for t in _listed(bucket) if not bucket.erased(t)
    ]
    if not chosen:  # a prefix mistyped most likely: said, not "restored 0 tenants" and a new empty directory
        raise _none_held(bucket)
    return chosen


def _none_held(bucket: Bucket) -> NotFound:
    return NotFound(
        f"object storage ({bucket.url.bucket}/{bucket.url.prefix}) holds no tenant's replica (an erased "
        "tenant's is never restored): nothing was restored; check the URL's bucket and prefix",
        reason="TENANT_NOT_IN_REPLICA",
    )


def restore_member(
    url: str,
    data_dir: Path,
    *,
    tenants: Sequence[str] = (),
    timestamp: str | None = None,
    replace: bool = False,
    progress: StepDone = lambda _line: None,
) -> list[str]:
    """Restore ``tenants`` (default: every tenant the bucket holds) into ``data_dir``, no server
    running on it; returns the tenants restored."""
    point_in_time(timestamp)  # a time that is not one is refused before anything is made
    bucket = Bucket(ReplicaUrl.parse(url))
    refuse_inside_another(data_dir)
    existed = data_dir.exists()
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = DataDirLock(data_dir)  # refuses a data directory a server (or another restore) holds
    tenants_dir = data_dir / TENANTS_DIR_NAME
    tenants_made = not tenants_dir.exists()
    # Among the tenant files under a temporary name: on their filesystem (placed by renames), and
    # what a restore killed midway left is removed by the next one, or by the server's start.
    staging = tenants_dir / f"{NEW_FILE_PREFIX}restore-{uuid.uuid4().hex[:12]}"
    restored = False
    try:
        tenants_dir.mkdir(exist_ok=True)
        remove_leftovers(tenants_dir)  # nothing else holds the directory: as at a server's start
        for earlier in data_dir.glob(".restore-*"):  # an earlier version's staging, killed midway
            shutil.rmtree(earlier, ignore_errors=True)
        chosen = _chosen(bucket, tenants)
        present = [t for t in chosen if (data_dir / TENANTS_DIR_NAME / f"{t}{TENANT_FILE_SUFFIX}").exists()]
        if present and not replace:
            raise FailedPrecondition(
                f"{data_dir} already has the tenants {listed(present)}; give --replace to overwrite them",
                reason="TENANT_EXISTS",
            )
        fetched = _fetched_all(bucket, chosen, bool(tenants), staging, timestamp, progress)
        index = PendingIndex(data_dir)
        try:
            for tenant in fetched:
                index.add_placed(tenant)
        finally:
            index.close()
        for tenant, files in fetched.items():
            place_tenant(data_dir / TENANTS_DIR_NAME, data_dir / INBOX_DIR_NAME, tenant, files.database, files.inbox)
            progress(f"{tenant}: restored")
        restored = True
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        lock.release()
        if not restored and not existed:  # a refused restore leaves no data directory it made
            shutil.rmtree(data_dir, ignore_errors=True)
        elif not restored and tenants_made and not any(tenants_dir.iterdir()):
            tenants_dir.rmdir()
    return list(fetched)


def _fetched_all(
    bucket: Bucket, chosen: list[str], named: bool, staging: Path, timestamp: str | None, progress: StepDone
) -> dict[str, Fetched]:
    """Every chosen tenant's files, each chain checked before any file is placed. A tenant only
    listed (not ``named``) whose generations hold no file is passed over: a member killed after it
    started the tenant's generation (its holder recorded) and before Litestream's first upload
    leaves just that, and no write of it was acknowledged at REPLICATED; refusing it refused every
    other tenant's restore. A named one is refused, TENANT_NOT_IN_REPLICA, as is a listing of none."""
    fetched = {}
    for tenant in chosen:
        got = (_fetched if named else _fetched_if_held)(bucket, tenant, staging / tenant, timestamp)
        if got is None:
            progress(f"{tenant}: nothing of it was replicated (its member stopped before a first upload): passed over")
            continue
        forget_generation(got.database, bucket.newest_held(tenant))
        progress(f"{tenant}: fetched from generation {got.generation}, chain valid")
        fetched[tenant] = got
    if not fetched:
        raise _none_held(bucket)
    return fetched


def restore_online(client: MemoryClient, url: str, tenant: str, *, timestamp: str | None = None) -> ImportResult:
    """Restore one tenant on the running server of ``client`` (admin token) through an import
    that replaces it."""
    tenant = validate_tenant(tenant)
    point_in_time(timestamp)
    bucket = Bucket(ReplicaUrl.parse(url))
    with tempfile.TemporaryDirectory(prefix="mnemosyne-restore-") as directory:
        fetched = _fetched(bucket, tenant, Path(directory), timestamp)
        facts = file_facts(fetched.database, fetched.inbox)
        files = {"database": fetched.database, **({"inbox": fetched.inbox} if fetched.inbox else {})}
        manifest = TenantBackup(
            tenant=tenant,
            change_counter=facts.change_counter,
            inbox_sequence=facts.inbox_sequence,
            head_hash=facts.head_hash,
            ledger_entries=facts.ledger_entries,
            memories=facts.memories,
            last_event_id=facts.last_event_id,
            generations=facts.generations,
            files=[BackupFile(name, path.stat().st_size, sha256_file(path)) for name, path in files.items()],
        )
        return client.import_tenant(manifest, _chunks(files), tenant=tenant, replace=True)


def _chunks(files: dict[str, Path]) -> Iterator[BackupChunk]:
    for name, path in files.items():
        with path.open("rb") as file:
            while data := file.read(CHUNK_BYTES):
                yield BackupChunk(name, data)
