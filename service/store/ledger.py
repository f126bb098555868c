"""The audit ledger: an append-only SHA-256 chain, one per tenant file.

Entry ``n`` stores ``hash_n = SHA-256(hash_{n-1} ‖ canonical_entry_n)`` with ``hash_0`` 64 zeros.
Entries hold hashes of content, never the text, so forgetting a memory erases its text while the
chain stays verifiable. Every mutation appends its entry in the same transaction as the mutation,
so a chain and the data it describes can only be torn by editing the file.

A memory's hashes are keyed (HMAC-SHA256) with a random key of its own, kept in the tenant file
(``memory_keys``) while the memory lives and destroyed when it is forgotten: a plain SHA-256 of a
short text confirms a guess of it for ever, a keyed one only while the text itself is still there.
Entries of memories retained before keys existed (schema version 5 and older) say nothing of a
key and hold plain SHA-256 hashes; they stay as they are (rewriting them would break the chain).

The chain is unkeyed and lives in the same file: it catches torn writes and stray edits, not
someone able to rewrite the whole file. ``head_hash`` exists so an operator can record it elsewhere.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

GENESIS_HASH = "0" * 64
# The field of a retain entry whose hashes are keyed with the memory's own key.
KEYED_FIELD = "digests"
KEYED_VALUE = "hmac-sha256"
MEMORY_KEY_BYTES = 32


# What ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` builds on
# every call, built once (the same bytes; several calls per retained memory).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """One byte-exact JSON form for hashing: sorted keys, no spaces, UTF-8 text kept as is."""
    if not value and type(value) in (dict, list):  # most metadata, facts and triples are empty
        return "{}" if type(value) is dict else "[]"
    return _CANONICAL.encode(value)


def sha256_hex(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def chain_hash(previous_hash: str, entry_json: str) -> str:
    return sha256_hex(previous_hash.encode("ascii") + entry_json.encode("utf-8"))


_EMPTY_LIST_SHA = sha256_hex("[]")
_EMPTY_OBJECT_SHA = sha256_hex("{}")


def keyed_hex(key: bytes, data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _digester(key: bytes | None) -> Callable[[str | bytes], str]:
    return sha256_hex if key is None else lambda data: keyed_hex(key, data)


def facts_digest(facts: Sequence[tuple[str, str, str]], key: bytes | None = None) -> str:
    # Tuples encode as JSON arrays, like lists; most memories have no facts.
    if key is not None:
        return keyed_hex(key, canonical_json(list(facts)))
    return sha256_hex(canonical_json(list(facts))) if facts else _EMPTY_LIST_SHA


def triples_digest(triples: Sequence[tuple[str, str, str]], key: bytes | None = None) -> str:
    if key is not None:
        return keyed_hex(key, canonical_json(list(triples)))
    return sha256_hex(canonical_json(list(triples))) if triples else _EMPTY_LIST_SHA


@dataclass(frozen=True)
class MemoryDigest:
    """What the ledger remembers of one retained memory: hashes of every stored part (keyed with
    the memory's own key when it has one). The scope stays plain: it is not erased by a forget."""

    scope: str
    body: str
    metadata: str
    facts: str
    triples: str
    embedding: str
    fingerprint: str

    @classmethod
    def of(
        cls,
        *,
        scope: str,
        body: str,
        metadata_json: str,
        facts: Sequence[tuple[str, str, str]],
        triples: Sequence[tuple[str, str, str]],
        embedding: bytes,
        fingerprint: str,
        key: bytes | None = None,
    ) -> MemoryDigest:
        digest = _digester(key)
        if key is None:
            metadata = _EMPTY_OBJECT_SHA if metadata_json == "{}" else sha256_hex(metadata_json)
        else:
            metadata = digest(metadata_json)
        return cls(
            scope=scope,
            body=digest(body),
            metadata=metadata,
            facts=facts_digest(facts, key),
            triples=triples_digest(triples, key),
            embedding=digest(embedding),
            # The fingerprint is itself a hash of the text: kept plain, it would confirm a guess.
            fingerprint=fingerprint if key is None else digest(fingerprint),
        )

    def as_entry_fields(self) -> dict[str, str]:
        return {
            "scope": self.scope,
            "body": self.body,
            "metadata": self.metadata,
            "facts": self.facts,
            "triples": self.triples,
            "embedding": self.embedding,
            "fingerprint": self.fingerprint,
        }

    def differences(self, other: MemoryDigest) -> list[str]:
        """Names of the parts that differ, e.g. ["body", "facts"]."""
        mine, theirs = self.as_entry_fields(), other.as_entry_fields()
        return [name for name in mine if mine[name] != theirs[name]]
