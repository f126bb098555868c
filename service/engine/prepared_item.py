"""An item on its way to the store, prepared once: validated, its defaults applied, its
fingerprint and canonical metadata computed. It travels as it is to the synchronous commit
(engine/write_path.py), or through the hot path's inbox and log to a worker (``to_payload``,
``from_payload``), and what is computed for it is never computed again."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field

from mnemosyne.engine import changers, relative_time
from mnemosyne.engine.extractor import Extraction
from mnemosyne.engine.types import RetainItem, ThreadRef
from mnemosyne.store import ledger
from mnemosyne.store.memory_rows import NewMemory
from mnemosyne.store.revisions import Changer


def normalise_text(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def fingerprint(scope: str, text: str) -> str:
    """Identity of content for exact dedup: scope and normalised text (never metadata)."""
    return ledger.sha256_hex(scope + "\n" + normalise_text(text))


def placement(item: RetainItem) -> dict[str, object]:
    """An item's time, thread and speaker as JSON values (only those it has)."""
    placed: dict[str, object] = {}
    if item.occurred_at is not None:
        placed["occurred_at"] = item.occurred_at
    if item.thread is not None:
        placed["thread"] = [item.thread.id, item.thread.position]
    if item.speaker:
        placed["speaker"] = item.speaker
    if item.expires_at is not None:
        placed["expires_at"] = item.expires_at
    return placed


def placed_item(text: str, scope: str, metadata: dict[str, str], payload: dict[str, object]) -> RetainItem:
    """An item rebuilt from JSON holding ``placement``'s keys (or none of them)."""
    thread = payload.get("thread")
    occurred_at = payload.get("occurred_at")
    speaker = payload.get("speaker")
    expires_at = payload.get("expires_at")
    return RetainItem(
        text=text,
        scope=scope,
        metadata=metadata,
        occurred_at=int(occurred_at) if isinstance(occurred_at, int) else None,
        thread=ThreadRef(str(thread[0]), int(thread[1])) if isinstance(thread, list) else None,
        speaker=speaker if isinstance(speaker, str) else None,
        expires_at=float(expires_at) if isinstance(expires_at, (int, float)) else None,
    )


@dataclass
class PreparedItem:
    """An item on its way to the store, with what was computed for it once."""

    position: int
    item: RetainItem  # validated, defaults applied
    fingerprint: str
    metadata_json: str  # canonical
    extraction: Extraction | None = None
    vector: bytes | None = None
    # The embedder that made ``vector`` ("<name>/<dim>"): a re-embedding may switch the tenant to
    # another before the commit (engine/write_path.py ``check_vectors``).
    vector_by: str = ""
    # Its vector by the embedder a re-embedding moves the tenant to, made with ``vector`` while one
    # runs, and that embedder: the move's vector of the memory, written with it (engine/reembed.py).
    next_vector: bytes | None = None
    next_vector_by: str = ""
    counted: bool = False  # its model call is already in the persisted counters
    near_duplicate_of: list[int] = field(default_factory=list)  # found outside the transaction
    near_batch: list[PreparedItem] = field(default_factory=list)  # earlier items of the same commit
    # Its acceptance position (store/acceptance.py): an operation's event id, or what a synchronous
    # write takes in its commit (None until then).
    acceptance: int | None = None
    # Similar stored memories accepted AFTER it, (id, position): their events name it once it exists.
    near_later: list[tuple[int, int]] = field(default_factory=list)
    # Who wrote it (store/revisions.py): the caller when it was accepted, kept with a fast write.
    changer: Changer = field(default_factory=changers.current)

    def new_memory(self, now: float, *, resolve_relative_time: bool) -> NewMemory:
        """What the store writes of this item (it must be extracted and embedded): with relative
        times ("yesterday") read against its occurred_at as date facts and indexed words."""
        assert self.extraction is not None and self.vector is not None
        thread = self.item.thread
        times, index_words = relative_time.resolve(
            self.item.text, self.item.occurred_at if resolve_relative_time else None
        )
        return NewMemory(
            scope=self.item.scope,
            body=self.item.text,
            metadata_json=self.metadata_json,
            fingerprint=self.fingerprint,
            facts=[*self.extraction.facts, *times],
            triples=self.extraction.triples,
            embedding=self.vector,
            fts_text=self.item.text,
            created_at=now,
            occurred_at=self.item.occurred_at,
            thread_id=thread.id if thread else None,
            thread_position=thread.position if thread else None,
            index_words=index_words,
            speaker=self.item.speaker,
            acceptance=self.acceptance,
            expires_at=self.item.expires_at,
            changer=self.changer,
        )

    def to_payload(self) -> str:
        """The item as a fast write's operation keeps it (inbox, then log), with what was computed
        for it: the worker takes it from there as it is."""
        return ledger.canonical_json(
            {
                "text": self.item.text,
                "scope": self.item.scope,
                "fingerprint": self.fingerprint,
                "metadata_json": self.metadata_json,
                "by": list(self.changer),
                **placement(self.item),
            }
        )

    @classmethod
    def from_payload(
        cls, position: int, payload_json: str, *, extraction: Extraction | None, vector: bytes | None
    ) -> PreparedItem:
        """An operation's item as it was prepared at enqueue (an operation accepted by an older
        version has its metadata as an object and lacks the fingerprint: they are computed once
        here)."""
        payload = json.loads(payload_json)
        metadata_json = payload.get("metadata_json") or ledger.canonical_json(payload["metadata"])
        item = placed_item(payload["text"], payload["scope"], json.loads(metadata_json), payload)
        by = payload.get("by")
        return cls(
            position=position,
            item=item,
            fingerprint=payload.get("fingerprint") or fingerprint(item.scope, item.text),
            metadata_json=metadata_json,
            extraction=extraction,
            vector=vector,
            counted=extraction is not None,  # its model call was counted when it was stored
            changer=Changer(str(by[0]), str(by[1])) if isinstance(by, list) and len(by) == 2 else Changer("", ""),
        )
