"""The values a tenant file's memories are written from and read into: ``NewMemory`` (what one
retain or update writes, prepared before its transaction), ``MemoryRow`` (a stored memory as
read), ``MemoryVersion`` (an earlier version of an updated one), and the text their full-text row
indexes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from mnemosyne.store import ledger
from mnemosyne.store.revisions import Changer
from mnemosyne.store.unspaced_scripts import letter_pairs


@dataclass(frozen=True)
class NewMemory:
    """Everything one retain writes, prepared before the transaction starts."""

    scope: str
    body: str
    metadata_json: str
    fingerprint: str
    facts: Sequence[tuple[str, str, str]]  # (kind, value, normalized)
    triples: Sequence[tuple[str, str, str]]  # (subject, predicate, object)
    embedding: bytes
    fts_text: str
    created_at: float
    occurred_at: int | None = None  # unix microseconds
    thread_id: str | None = None
    thread_position: int | None = None
    index_words: str = ""  # indexed with the text (``indexed_text``), e.g. resolved relative dates
    speaker: str | None = None
    acceptance: int | None = None  # its acceptance position (store/acceptance.py)
    expires_at: float | None = None  # unix seconds (None: never)
    changer: Changer | None = None  # who wrote it (None: store/revisions.py CHANGER)

    def digest(self, key: bytes | None) -> ledger.MemoryDigest:
        """What the ledger records of this content, keyed with the memory's ``key``."""
        return ledger.MemoryDigest.of(
            scope=self.scope,
            body=self.body,
            metadata_json=self.metadata_json,
            facts=self.facts,
            triples=self.triples,
            embedding=self.embedding,
            fingerprint=self.fingerprint,
            key=key,
        )


def indexed_text(body: str, index_words: str | None) -> str:
    """What a memory's full-text row indexes: its body, and its index words on a line of their
    own, the runs of scripts without spaces spelt as letter pairs (store/unspaced_scripts.py)."""
    return letter_pairs(f"{body}\n{index_words}" if index_words else body)


def metadata_of(text: str) -> dict[str, str]:
    """A stored metadata column as a mapping: none for a value that is not a JSON object (a row
    damaged by editing the file, which the audit ledger's verify reports), so a recall, a read
    or the forget that meets it goes on."""
    if not text or text == "{}":
        return {}  # most memories have none
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


@dataclass
class MemoryRow:
    id: int
    scope: str
    body: str
    metadata: dict[str, str]
    created_at: float
    forgotten: bool
    facts: list[tuple[str, str, str]] = field(default_factory=list)
    triples: list[tuple[str, str, str]] = field(default_factory=list)
    merged_into: int = 0  # set when Dedup merged this memory into another (then never recalled)
    superseded_by: int = 0  # set when a newer memory replaced all of this one's facts
    superseded_at: float = 0.0
    occurred_at: int | None = None  # unix microseconds
    thread_id: str | None = None
    thread_position: int | None = None
    updated_at: float = 0.0  # when UpdateMemory wrote the current version (0: never updated)
    speaker: str | None = None
    forgotten_at: float = 0.0  # when it was forgotten (0: it is not)
    acceptance: int = 0  # its acceptance position (0: before every position, a memory of an older file)
    expires_at: float | None = None  # when it expires (unix seconds; None: never)


@dataclass(frozen=True)
class MemoryVersion:
    """One earlier version of an updated memory (table ``memory_versions``)."""

    version: int  # 1 is the memory as retained
    body: str
    metadata: dict[str, str]
    at: float  # when this version became current
