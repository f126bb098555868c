"""A tenant's files brought back from object storage: Litestream's ``restore`` of each file's
replica URL (its restore from a configuration of databases does not serve ours: we register
each file through the control socket), into a directory of the caller's, never over a tenant file.

Which generation: the highest the bucket holds (replication/replicator.py: each file replicates to
one generation; a newer generation replaced every older one), or for a point in time the highest
that holds a state at or before it. The inbox is restored beside the database when its generation
has one. The memories the bucket keeps forgotten are forgotten again in what is restored
(``forget_again``)."""

from __future__ import annotations

import logging
import re
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from mnemosyne.errors import DataLoss, FailedPrecondition, InvalidArgument, Unavailable
from mnemosyne.replication.bucket import Bucket
from mnemosyne.replication.litestream import litestream_binary, litestream_environment
from mnemosyne.replication.url import DATABASE_REPLICA, INBOX_REPLICA, generation_name
from mnemosyne.store.data_dir import INBOX_FILE_SUFFIX, TENANT_FILE_SUFFIX
from mnemosyne.store.page_scrub import scrub_file
from mnemosyne.store.tenant_store import TenantStore

log = logging.getLogger("mnemosyne.replication")

RESTORE_SECONDS = 600.0
# What Litestream says when a replica holds nothing at or before the time asked for.
_NOTHING_THEN = ("no matching backup", "no snapshots available", "timestamp does not exist", "not found")


# RFC 3339's date-time, as Litestream's -timestamp reads it (Go's time.RFC3339); the offset is
# matched apart, so a time without one is told so.
_RFC_3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})?"
)


def point_in_time(timestamp: str | None) -> datetime | None:
    """A restore's ``--timestamp``: an RFC 3339 time with its offset (``Z`` for UTC), not after
    this machine's clock; INVALID_ARGUMENT TIMESTAMP_INVALID otherwise, saying what to give."""
    if timestamp is None:
        return None
    example = "give an RFC 3339 time with its offset, e.g. 2026-12-06T07:45:00Z"
    shown = timestamp[:64]
    found = _RFC_3339.fullmatch(timestamp)
    if found is not None and found.group(2) is None:
        raise InvalidArgument(
            f"--timestamp {shown!r} has no offset, so names no one moment: {example}", reason="TIMESTAMP_INVALID"
        )
    try:
        if found is None:
            raise ValueError("not RFC 3339")
        when = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"--timestamp {shown!r} is not an RFC 3339 time: {example}", reason="TIMESTAMP_INVALID"
        ) from None
    now = datetime.now(UTC)
    if when > now:
        raise InvalidArgument(
            f"--timestamp {timestamp!r} is after this machine's clock ({now.isoformat(timespec='seconds')}): "
            "no state of then is known yet; leave --timestamp out for the latest",
            reason="TIMESTAMP_INVALID",
        )
    return when.astimezone(UTC)


@dataclass(frozen=True)
class Fetched:
    """A tenant's files restored from one generation of its replica."""

    generation: int
    database: Path
    inbox: Path | None


def fetch(
    bucket: Bucket,
    tenant: str,
    into: Path,
    *,
    timestamp: str | None = None,
    judge: Callable[[Path], bool] | None = None,
) -> Fetched | None:
    """Restore ``tenant``'s files from object storage into the directory ``into`` (made if need
    be); None when the bucket holds no replica of it (or none at or before ``timestamp``, an
    RFC 3339 time). UNAVAILABLE REPLICA_UNREACHABLE when the store cannot be asked. ``judge``:
    asked of each generation's restored database, highest first, whether to take it (False:
    the generation below; store/replicas.py ``Replicas.fetch``); FAILED_PRECONDITION
    REPLICA_NOT_TAKEN when it took none; INVALID_ARGUMENT TIMESTAMP_INVALID for a time that is
    not one (``point_in_time``)."""
    when = point_in_time(timestamp)
    generations = bucket.generations(tenant)
    into.mkdir(parents=True, exist_ok=True)
    passed = []
    for generation in reversed(generations):
        database = into / f"{tenant}{TENANT_FILE_SUFFIX}"
        if not bucket.holds(tenant, f"{generation_name(generation)}/{DATABASE_REPLICA}/"):
            continue  # started (its holder recorded), nothing replicated yet
        if not _restore(bucket, tenant, generation, DATABASE_REPLICA, database, when):
            continue
        if judge is not None and not judge(database):
            log.info(
                "tenant %s: generation %d of its replica passed over (a move's copy not active)", tenant, generation
            )
            passed.append(generation)
            continue
        inbox: Path | None = into / f"{tenant}{INBOX_FILE_SUFFIX}"
        assert inbox is not None
        if not bucket.holds(tenant, f"{generation_name(generation)}/{INBOX_REPLICA}/") or not _restore(
            bucket, tenant, generation, INBOX_REPLICA, inbox, when
        ):
            inbox = None
        forget_again(bucket, tenant, database, inbox)
        log.info("tenant %s: restored from generation %d of its replica", tenant, generation)
        return Fetched(generation, database, inbox)
    if passed:
        raise FailedPrecondition(
            f"tenant {tenant}'s replica holds only copies a move made and never activated (generations {passed}); "
            "finish or restart the move (mnemosyne rebalance) on its source",
            reason="REPLICA_NOT_TAKEN",
        )
    return None


def forget_again(bucket: Bucket, tenant: str, database: Path, inbox: Path | None) -> list[int]:
    """The memories the bucket keeps forgotten (replication/bucket.py ``forgotten``) forgotten
    again in a restored file that holds them (a point in time before their forget), their
    traces erased: a restore never brings back what was forgotten. Returns their ids."""
    forgotten = bucket.forgotten(tenant)
    if not forgotten:
        return []
    store = TenantStore(database, write_lock=threading.Lock(), inbox_path=inbox)
    try:
        with store.write(internal=True) as txn:
            again = txn.forget_again(sorted(forgotten))
        if again:
            store.erase_traces()
            log.info("tenant %s: %d memories forgotten after the restored point forgotten again", tenant, len(again))
    finally:
        store.close()
    return again


def _restore(bucket: Bucket, tenant: str, generation: int, file: str, output: Path, when: datetime | None) -> bool:
    """``litestream restore`` of one file's replica to ``output``; False when it holds no state
    at or before ``when``. Litestream refuses a time outside the span its files were uploaded in,
    after the last as well as before the first: a time after the last (a tenant not written
    since, a generation replaced since) is its latest state, restored without a time."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{output}{suffix}").unlink(missing_ok=True)
    if when is not None:
        span = bucket.uploaded(tenant, f"{generation_name(generation)}/{file}/")
        if span is None or when < span[0]:
            return False
        if when >= span[1]:
            when = None
    command = [litestream_binary(), "restore", "-o", str(output)]
    if when is not None:
        command += ["-timestamp", when.isoformat(timespec="microseconds").replace("+00:00", "Z")]
    command.append(bucket.url.of(tenant, generation, file))
    try:
        done = subprocess.run(
            command,
            env=litestream_environment(),
            capture_output=True,
            text=True,
            timeout=RESTORE_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise Unavailable(
            f"restoring tenant {tenant} from object storage took more than {RESTORE_SECONDS:.0f}s; retry",
            reason="REPLICA_UNREACHABLE",
            retry_after_seconds=1.0,
        ) from None
    if done.returncode == 0:
        scrub_file(output)  # Litestream wrote its pages: what splits left in them goes (store/page_scrub.py)
        return True
    said = (done.stderr or done.stdout).strip()
    if when is not None and any(words in said.lower() for words in _NOTHING_THEN):
        return False
    raise DataLoss(
        f"Litestream could not restore tenant {tenant}'s {file} from generation {generation}: {said[-500:]}",
        reason="REPLICA_RESTORE_FAILED",
    )
