"""Whether a file is a tenant file, and bringing one to the current schema (store/schema.py): a
file of another program, or one damaged, is refused (TENANT_CORRUPT) before any connection of ours
changes it; one newer than this code is refused (SCHEMA_TOO_NEW); an older one is migrated in one
transaction."""

from __future__ import annotations

import functools
from pathlib import Path

import apsw

from mnemosyne.errors import FailedPrecondition
from mnemosyne.store import unspaced_scripts
from mnemosyne.store.bookkeeping import BookkeepingWrites
from mnemosyne.store.schema import APPLICATION_ID, MIGRATIONS, REQUIRED_TABLES, SCHEMA_VERSION, tables_at
from mnemosyne.store.transactions import damaged


def check_and_migrate(connection: apsw.Connection, path: Path) -> None:
    """Refuse a file that is not a Mnemosyne tenant file (another program's database, a wrong
    schema) with TENANT_CORRUPT, refuse one newer than this code, and bring an older one (or an
    empty new one) to the current schema in one transaction."""
    application_id = connection.pragma("application_id")
    version = connection.pragma("user_version")
    if version > SCHEMA_VERSION and application_id == APPLICATION_ID:
        raise FailedPrecondition(
            f"{path.name} has schema version {version}, newer than this server's {SCHEMA_VERSION}; "
            "upgrade the server instead of opening the file with an older one",
            reason="SCHEMA_TOO_NEW",
        )
    if application_id != APPLICATION_ID and (version or table_names(connection)):
        raise damaged(path.name, f"it is another program's SQLite database (application id {application_id:#x})")
    missing_before = tables_at(min(version, SCHEMA_VERSION)) - table_names(connection)
    if version and missing_before:  # a damaged file is reported as it is, never migrated
        raise damaged(path.name, f"its schema lacks the tables {', '.join(sorted(missing_before))}")
    if version != SCHEMA_VERSION:
        # One transaction: the schema change and its version bump land together or not at all.
        connection.execute("BEGIN IMMEDIATE")
        try:
            version = connection.pragma("user_version")  # re-read under the write lock
            unspaced_scripts.register(connection)
            for step in range(version, SCHEMA_VERSION):
                connection.execute(MIGRATIONS[step])
            connection.pragma("user_version", SCHEMA_VERSION)
            connection.pragma("application_id", APPLICATION_ID)
            # A migrated file is a changed file, for an incremental backup as for any write.
            BookkeepingWrites(connection, frozenset()).count_change()
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
    missing = REQUIRED_TABLES - table_names(connection)
    if missing:
        raise damaged(path.name, f"its schema lacks the tables {', '.join(sorted(missing))}")


def table_names(connection: apsw.Connection) -> set[str]:
    """The names of the file's tables."""
    return {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


_SQLITE_MAGIC = b"SQLite format 3\x00"


def damage_of(path: Path) -> str | None:
    """Why the file at ``path`` is not a usable tenant file, or None. Cheap: it reads the file's
    header, and opens the file only when the header is in doubt (a header still in the WAL)."""
    try:
        with open(path, "rb") as file:
            head = file.read(100)
    except FileNotFoundError:
        return None
    if not head:
        return None  # an empty file becomes a tenant file on its first write
    if len(head) < 100 or head[:16] != _SQLITE_MAGIC:
        return "it is not an SQLite database"
    if int.from_bytes(head[68:72], "big") == APPLICATION_ID:
        return None
    try:
        connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            application_id = connection.pragma("application_id")
            version = connection.pragma("user_version")
            tables = table_names(connection)
        finally:
            connection.close()
    except apsw.CantOpenError:
        if not path.exists():
            return None  # gone meanwhile, as if it had not been there
        raise  # not the file's fault: the process is out of descriptors
    except apsw.Error as exc:
        return str(exc)
    if application_id != APPLICATION_ID and (version or tables):
        return f"it is another program's SQLite database (application id {application_id:#x})"
    return None


# A schema object: (type, name), e.g. ("trigger", "metadata_pairs_added"); SQLite's own (sqlite_*:
# statistics, the sequence, automatic indexes) and Litestream's two tables in a file it replicated
# (docs/replication.md) are not the code's and are left out.
_OBJECTS = (
    "SELECT type, name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
    "AND NOT (type = 'table' AND name IN ('_litestream_seq', '_litestream_lock'))"
)


def _objects(connection: apsw.Connection) -> dict[tuple[str, str], str | None]:
    return {(str(kind), str(name)): sql for kind, name, sql in connection.execute(_OBJECTS)}


@functools.cache
def _made_at(version: int) -> dict[tuple[str, str], str | None]:
    """The schema objects, with their SQL, that this code makes in a tenant file at ``version``:
    its migrations up to it, applied to an empty database."""
    connection = apsw.Connection(":memory:")
    try:
        unspaced_scripts.register(connection)
        for step in MIGRATIONS[:version]:
            connection.execute(step)
        return _objects(connection)
    finally:
        connection.close()


def unmade_objects(connection: apsw.Connection) -> list[str]:
    """The schema objects of the file (a tenant file's copy) that are not as this code makes them
    at its schema version: another's table, index, view or trigger (a trigger runs inside every
    write of the tenant), one of ours changed, or missing. Empty for a file newer than the code
    (SCHEMA_TOO_NEW says that)."""
    version = int(connection.pragma("user_version"))
    if version > SCHEMA_VERSION:
        return []
    found, made = _objects(connection), _made_at(version)
    return sorted(
        f"{kind} {name}" + (" (not as this code makes it)" if (kind, name) in found and (kind, name) in made else "")
        for kind, name in {*found, *made}
        if found.get((kind, name), "") != made.get((kind, name), "")
        or ((kind, name) in found) != ((kind, name) in made)
    )
