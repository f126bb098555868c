"""The revisions of memories and records (schema.py ``_V_EXPIRY_AND_REVISIONS``): one row per change,
written in the transaction of the change beside its ledger entry, and their retention.

A memory revision holds no text: it names the content version it left (``version``), whose text
and metadata are ``memory_versions``' row of that version, or the memory's own row while it is the
current one. A record revision holds the content a put wrote once a later change replaced it
(NULL while it is the record's current content, ``records.content``). So nothing is kept twice, and
an erasure that deletes a memory's versions, or a record, leaves no revision holding its text.

Retention: each memory and each record keeps its newest ``REVISIONS_KEPT`` revisions; an older one
is deleted by the change that passes the count (with the versions no kept revision names), so
neither table grows without bound with the changes of one memory or record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import NamedTuple

from mnemosyne.store.bookkeeping import BookkeepingReads, BookkeepingWrites

# The newest revisions each memory and each record keeps (docs/revisions.md "Retention").
REVISIONS_KEPT = 100

# The kinds of memory revisions, as stored.
RETAINED, UPDATED, REVERTED, SUPERSEDED, MERGED = "retained", "updated", "reverted", "superseded", "merged"


class Changer(NamedTuple):
    """Who made a change: the surface its call came through and the caller's token name."""

    surface: str
    token_name: str


# Who the changes made on this thread (or task) are by: set by the engine for each call
# (engine/changers.py), read where a revision is written without its own changer.
# A change made in process with no call named (MemoryBrain on a directory).
IN_PROCESS = Changer("in_process", "")
CHANGER: ContextVar[Changer] = ContextVar("mnemosyne_changer", default=IN_PROCESS)


@dataclass(frozen=True)
class MemoryRevisionRow:
    """One stored revision of a memory (text and metadata are its ``version``'s)."""

    revision: int
    kind: str
    at: float
    by: Changer
    changed: tuple[str, ...]
    version: int
    expires_at: float | None
    ledger_seq: int
    related_memory_id: int
    reverted_to: int


@dataclass(frozen=True)
class RecordRevisionRow:
    """One stored revision of a record; ``content`` None: the record's current content."""

    generation: int
    op: str
    content: str | None
    at: float
    by: Changer
    source: str
    ledger_seq: int


class RevisionReads(BookkeepingReads):
    """Revisions as stored; valid inside one transaction (read or write)."""

    def memory_revisions(self, memory_id: int) -> list[MemoryRevisionRow]:
        """A memory's revisions, oldest first (none for a forgotten one)."""
        return [
            MemoryRevisionRow(
                revision=r[0],
                kind=r[1],
                at=r[2],
                by=Changer(r[3], r[4]),
                changed=tuple(json.loads(r[5])),
                version=r[6],
                expires_at=r[7],
                ledger_seq=r[8],
                related_memory_id=r[9] or 0,
                reverted_to=r[10] or 0,
            )
            for r in self.connection.execute(
                "SELECT revision, kind, at, surface, token_name, changed, version, expires_at, ledger_seq, "
                "related_memory_id, reverted_to FROM memory_revisions WHERE memory_id = ? ORDER BY revision",
                (memory_id,),
            )
        ]

    def newest_revision(self, memory_id: int) -> int:
        """The number of a memory's newest revision (0: none)."""
        return int(
            self._one("SELECT coalesce(max(revision), 0) FROM memory_revisions WHERE memory_id = ?", (memory_id,))
        )

    def current_version(self, memory_id: int) -> int:
        """The version number of a memory's current content: its newest revision's (a memory
        without revisions: one more than its earlier versions)."""
        version = self._one(
            "SELECT version FROM memory_revisions WHERE memory_id = ? ORDER BY revision DESC LIMIT 1", (memory_id,)
        )
        if version is not None:
            return int(version)
        return 1 + int(self._one("SELECT count(*) FROM memory_versions WHERE memory_id = ?", (memory_id,)) or 0)

    def version_content(self, memory_id: int, version: int) -> tuple[str, str] | None:
        """(body, metadata JSON) of an earlier version of a memory, if it is still kept."""
        row = self.connection.execute(
            "SELECT body, metadata FROM memory_versions WHERE memory_id = ? AND version = ?", (memory_id, version)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def record_revisions(self, scope: str, key: str) -> list[RecordRevisionRow]:
        """A record's revisions, oldest first."""
        return [
            RecordRevisionRow(r[0], r[1], r[2], r[3], Changer(r[4], r[5]), r[6], r[7])
            for r in self.connection.execute(
                "SELECT generation, op, content, at, surface, token_name, source, ledger_seq FROM record_revisions "
                "WHERE scope = ? AND key = ? ORDER BY generation",
                (scope, key),
            )
        ]


class RevisionWrites(RevisionReads, BookkeepingWrites):
    """Revisions written; valid only inside ``TenantStore.write()``."""

    def add_memory_revisions(
        self,
        rows: Sequence[tuple[int, int]],
        *,
        kind: str,
        changers: Sequence[Changer | None] = (),
        changed: Sequence[str] = (),
        ledger_seq: int = 0,
        related_memory_id: int = 0,
        reverted_to: int = 0,
        version: int = 0,
    ) -> None:
        """One revision of ``kind`` for each (memory id, ledger entry) of ``rows`` (``ledger_seq``
        when a row's is 0), numbered after the memory's newest, naming the memory's current
        version (``version`` when the change made a new one) and expiry, by its ``changers`` entry (else ``CHANGER``'s); then each memory's
        revisions past the retention go."""
        if not rows:
            return
        now = time.time()
        default = CHANGER.get()
        by = [(changers[i] if i < len(changers) else None) or default for i in range(len(rows))]
        changed_json = json.dumps(list(changed))
        self.connection.executemany(
            "INSERT INTO memory_revisions(memory_id, revision, kind, at, surface, token_name, changed, version, "
            "expires_at, ledger_seq, related_memory_id, reverted_to) "
            "SELECT ?1, coalesce((SELECT max(revision) FROM memory_revisions WHERE memory_id = ?1), 0) + 1, ?2, ?3, ?4, "
            "?5, ?6, ?7, (SELECT expires_at FROM memories WHERE id = ?1), ?8, ?9, ?10",
            [
                (
                    memory_id,
                    kind,
                    now,
                    by[i].surface,
                    by[i].token_name,
                    changed_json,
                    version or (self.current_version(memory_id) if kind != RETAINED else 1),
                    seq or ledger_seq,
                    related_memory_id or None,
                    reverted_to or None,
                )
                for i, (memory_id, seq) in enumerate(rows)
            ],
        )
        if kind != RETAINED:  # a retain's first revision passes no count
            for memory_id, _ in rows:
                self._prune_memory_revisions(memory_id)

    def _prune_memory_revisions(self, memory_id: int) -> None:
        """Keep the memory's newest ``REVISIONS_KEPT`` revisions, and only the earlier versions
        one of them names."""
        c = self.connection
        c.execute(
            "DELETE FROM memory_revisions WHERE memory_id = ?1 AND revision <= "
            "(SELECT max(revision) FROM memory_revisions WHERE memory_id = ?1) - ?2",
            (memory_id, REVISIONS_KEPT),
        )
        if c.changes():
            c.execute(
                "DELETE FROM memory_versions WHERE memory_id = ?1 AND version NOT IN "
                "(SELECT version FROM memory_revisions WHERE memory_id = ?1)",
                (memory_id,),
            )

    def add_record_revisions(
        self,
        scope: str,
        changes: Sequence[tuple[str, str, str]],
        *,
        generation: int,
        source: str,
        ledger_seq: int,
    ) -> None:
        """One revision per (op, key, content) change of a generation, before the records table
        takes them: the content a put replaces moves into its revision; a delete erases the
        record's earlier revisions with it (their content is the record's: erasure wins)."""
        c = self.connection
        now = time.time()
        by = CHANGER.get()
        for op, key, _content in changes:
            if op == "delete":
                c.execute("DELETE FROM record_revisions WHERE scope = ? AND key = ?", (scope, key))
            else:
                c.execute(
                    "UPDATE record_revisions SET content = (SELECT content FROM records WHERE scope = ?1 AND key = ?2) "
                    "WHERE scope = ?1 AND key = ?2 AND content IS NULL",
                    (scope, key),
                )
            c.execute(
                "INSERT INTO record_revisions(scope, key, generation, op, content, at, surface, token_name, source, "
                "ledger_seq) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    scope,
                    key,
                    generation,
                    op,
                    None if op == "put" else "",
                    now,
                    by.surface,
                    by.token_name,
                    source,
                    ledger_seq,
                ),
            )
            c.execute(
                "DELETE FROM record_revisions WHERE scope = ?1 AND key = ?2 AND generation NOT IN "
                "(SELECT generation FROM record_revisions WHERE scope = ?1 AND key = ?2 ORDER BY generation DESC LIMIT ?3)",
                (scope, key, REVISIONS_KEPT),
            )
