"""Schema of a tenant file, versioned with ``PRAGMA user_version``.

``MIGRATIONS[i]`` takes a file from version ``i`` to ``i + 1``; each runs inside one transaction
with the version bump, so a crash mid-migration leaves the old version intact. A file whose
version is newer than the code is refused rather than guessed at. ``APPLICATION_ID`` marks the
file as ours ("MNEM"), so a stray SQLite file in the data directory is never mistaken for a tenant.
"""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from mnemosyne.store.metadata_index import METADATA_INDEXES as _V_METADATA_INDEXES
from mnemosyne.store.metadata_index import METADATA_PAIRS as _V_METADATA_PAIRS
from mnemosyne.store.unspaced_scripts import REINDEX as _V_UNSPACED_SCRIPTS
from mnemosyne.store.webhook_schema import WEBHOOKS as _V_WEBHOOKS

APPLICATION_ID = 0x4D4E454D  # "MNEM"

_V1 = """
CREATE TABLE meta(
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;

-- Persisted counters (writes, model calls, ...), updated in the transaction of the work they count.
CREATE TABLE counters(
  name TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;

-- A memory's id is never reused (AUTOINCREMENT) and its row is never deleted: forgetting erases
-- the body and the derived rows, and clears the fingerprint so the same text can be retained again.
CREATE TABLE memories(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  scope TEXT NOT NULL,
  body TEXT NOT NULL,
  metadata TEXT NOT NULL,
  fingerprint TEXT,
  created_at REAL NOT NULL,
  forgotten_at REAL,
  ledger_seq INTEGER NOT NULL
);
-- Exact duplicates are refused by the file itself, across threads and processes alike.
CREATE UNIQUE INDEX memories_fingerprint ON memories(fingerprint);
CREATE INDEX memories_scope ON memories(scope, id);

CREATE TABLE facts(
  memory_id INTEGER NOT NULL REFERENCES memories(id),
  ord INTEGER NOT NULL,
  kind TEXT NOT NULL,
  value TEXT NOT NULL,
  normalized TEXT NOT NULL,
  PRIMARY KEY (memory_id, ord)
) WITHOUT ROWID;

CREATE TABLE triples(
  memory_id INTEGER NOT NULL REFERENCES memories(id),
  ord INTEGER NOT NULL,
  subject TEXT NOT NULL,
  predicate TEXT NOT NULL,
  object TEXT NOT NULL,
  PRIMARY KEY (memory_id, ord)
) WITHOUT ROWID;
CREATE INDEX triples_subject_predicate ON triples(subject, predicate);

-- float32 little-endian vectors; the in-memory matrix is only a cache of this table.
CREATE TABLE embeddings(
  memory_id INTEGER PRIMARY KEY REFERENCES memories(id),
  vector BLOB NOT NULL
);

-- Contentless full-text index keyed by memory id: the text lives once, in memories.body.
-- (Rebuilt at version 7 without contentless_delete, with FTS5's secure-delete.)
CREATE VIRTUAL TABLE memories_fts USING fts5(
  body,
  content='',
  contentless_delete=1,
  tokenize='porter unicode61 remove_diacritics 2'
);

CREATE TABLE ledger(
  seq INTEGER PRIMARY KEY,
  at REAL NOT NULL,
  entry TEXT NOT NULL,
  hash TEXT NOT NULL
);

-- Idempotency keys and the result they produced, written in the transaction of the write.
CREATE TABLE requests(
  request_id TEXT PRIMARY KEY,
  method TEXT NOT NULL,
  payload_hash TEXT NOT NULL,
  result TEXT NOT NULL,
  created_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX requests_created_at ON requests(created_at);
"""

# Consolidation (dedup merges) and conflict adjudication (superseded facts). A merged memory keeps
# its row, body, facts and fingerprint (history), loses its embedding and full-text row (so no
# recall path finds it) and names the memory it was merged into. A superseded memory is kept whole
# and names the newer memory whose facts replaced its own.
_V2_CONSOLIDATION = """
ALTER TABLE memories ADD COLUMN merged_into INTEGER;
ALTER TABLE memories ADD COLUMN merged_at REAL;
ALTER TABLE memories ADD COLUMN superseded_by INTEGER;
ALTER TABLE memories ADD COLUMN superseded_at REAL;
CREATE INDEX memories_merged_into ON memories(merged_into) WHERE merged_into IS NOT NULL;

-- One row per (older memory, subject, predicate) whose value a newer memory replaced.
CREATE TABLE supersessions(
  memory_id INTEGER NOT NULL REFERENCES memories(id),
  subject TEXT NOT NULL,
  predicate TEXT NOT NULL,
  object TEXT NOT NULL,
  superseded_by INTEGER NOT NULL REFERENCES memories(id),
  new_object TEXT NOT NULL,
  at REAL NOT NULL,
  PRIMARY KEY (memory_id, subject, predicate)
) WITHOUT ROWID;
CREATE INDEX supersessions_by ON supersessions(superseded_by);
"""

# Host-owned generations (the agent-memory design, docs/seed-mapping.md): scopes with a generation, their records (complete documents)
# and the receipts of applied consolidations. Only record changes advance a generation; retained
# memories never touch this table.
_V3_WORKSPACE = """
CREATE TABLE scopes(
  scope TEXT PRIMARY KEY,
  generation INTEGER NOT NULL
) WITHOUT ROWID;

-- The current content of every record; ledger_seq names the audit entry that wrote it.
CREATE TABLE records(
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  content TEXT NOT NULL,
  ledger_seq INTEGER NOT NULL,
  PRIMARY KEY (scope, key)
) WITHOUT ROWID;

-- Applied consolidation receipts: kept forever (never pruned), so a receipt applies exactly once.
CREATE TABLE receipts(
  receipt_id TEXT PRIMARY KEY,
  scope TEXT NOT NULL,
  payload_hash TEXT NOT NULL,
  result TEXT NOT NULL,
  created_at REAL NOT NULL
) WITHOUT ROWID;
"""

# The hot path's durable operation log (the specification's §9.3, docs/seed-mapping.md): one row per accepted fast write, its
# persisted extraction (so a replay makes no second model call) and its result; every status
# change is also appended to oplog_transitions, which WatchEvents replays. Written in the same
# transactions as the work, so the log and the memories never disagree.
_V4_OPLOG = """
CREATE TABLE oplog(
  event_id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  payload TEXT NOT NULL,
  request_id TEXT,
  attempts INTEGER NOT NULL DEFAULT 0,
  failures INTEGER NOT NULL DEFAULT 0,
  extraction TEXT,
  embedding BLOB,
  result TEXT,
  error_reason TEXT,
  error_message TEXT,
  accepted_at REAL NOT NULL,
  started_at REAL,
  finished_at REAL,
  retry_after REAL
);
CREATE INDEX oplog_open ON oplog(status, event_id) WHERE status IN ('pending', 'running');
CREATE INDEX oplog_status ON oplog(status, event_id);
CREATE INDEX oplog_accepted ON oplog(accepted_at);

CREATE TABLE oplog_transitions(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id INTEGER NOT NULL REFERENCES oplog(event_id),
  status TEXT NOT NULL,
  at REAL NOT NULL
);
CREATE INDEX oplog_transitions_event ON oplog_transitions(event_id, seq);
"""

# The tenant's own secret: page tokens are authenticated with it (engine/page_tokens.py), so a
# token survives a restart and one made up by a client, or issued for another tenant, is refused.
_V5_SECRET = """
INSERT OR IGNORE INTO meta(key, value) VALUES('page_token_secret', lower(hex(randomblob(32))));
"""

# Each memory's own key for its ledger hashes (store/ledger.py): deleted when the memory is
# forgotten, so the ledger's hashes of the erased text confirm no guess afterwards. Memories
# retained before this version have none (their entries are plain SHA-256).
_V6_MEMORY_KEYS = """
CREATE TABLE memory_keys(
  memory_id INTEGER PRIMARY KEY REFERENCES memories(id),
  key BLOB NOT NULL
);
"""

# What a forget touches, found and erased in proportion to the memory forgotten, not to the tenant
# (store/memory_erasure.py ``forget_memory``). The full-text index is rebuilt: a
# ``contentless_delete`` index deletes by tombstone, and the terms stay in their segment until a
# merge rewrites that segment (so a forget rewrote all of them, an 'optimize': ~75 ms at 100k
# memories, and growing). FTS5's 'secure-delete' option removes a deleted row's entries from the
# segment itself, but only for an index that is told the row's text: a plain contentless one,
# deleted with its 'delete' command and the body (the text it indexed). It holds the live,
# unmerged memories. A kept tenant of an older version pays the rebuild once, as it opens
# (~1.2 s at 100k memories).
_V7_ERASURE_IN_PROPORTION = """
DROP TABLE memories_fts;
CREATE VIRTUAL TABLE memories_fts USING fts5(
  body,
  content='',
  tokenize='porter unicode61 remove_diacritics 2'
);
INSERT INTO memories_fts(memories_fts, rank) VALUES('secure-delete', 1);
INSERT INTO memories_fts(rowid, body)
  SELECT id, body FROM memories WHERE forgotten_at IS NULL AND merged_into IS NULL ORDER BY id;

-- A forget scrubs the operation-log rows that wrote the memory, found by their result's memory id
-- (the WHERE of ``forget_memory``'s UPDATE, word for word): an index, not a scan of the whole log
-- (~40 ms per forget at 100k logged fast writes).
CREATE INDEX oplog_result_memory ON oplog(json_extract(result, '$.memory_id'))
  WHERE result IS NOT NULL AND json_valid(result);
"""

# Time and order (recall quality, issue 25): when a memory's content was said or happened
# (unix microseconds, as the writer gave it) and its place in a thread (an id and a position).
# All NULL for a memory retained without them, and for every memory of an older file (nothing is
# backfilled). The index lists a thread in order (ListMemories(thread)) and finds neighbours.
_V_TIME_AND_THREAD = """
ALTER TABLE memories ADD COLUMN occurred_at INTEGER;
ALTER TABLE memories ADD COLUMN thread_id TEXT;
ALTER TABLE memories ADD COLUMN thread_position INTEGER;
CREATE INDEX memories_thread ON memories(thread_id, thread_position, id) WHERE thread_id IS NOT NULL;
"""

# Memory versions (UpdateMemory, the mem0-compatible endpoints): an update replaces a memory in
# place under the same id and keeps what it replaced here, one row per earlier version with the
# time it became current, so a memory's history can be listed. A forget deletes them with the rest
# of the memory (overwritten: secure_delete). ``updated_at`` is when the current version was
# written (NULL: never updated).
_V_MEMORY_VERSIONS = """
ALTER TABLE memories ADD COLUMN updated_at REAL;
CREATE TABLE memory_versions(
  memory_id INTEGER NOT NULL REFERENCES memories(id),
  version INTEGER NOT NULL,
  body TEXT NOT NULL,
  metadata TEXT NOT NULL,
  at REAL NOT NULL,
  PRIMARY KEY (memory_id, version)
) WITHOUT ROWID;
"""

# Index words (recall quality, issue 25: relative times resolved against occurred_at,
# engine/relative_time.py): indexed with the body (the full-text row is the body, a newline and
# the index words) and kept so the row can be deleted with exactly the text it indexed; erased by
# a forget. NULL for a memory without any, and for every memory of an older file.
_V_INDEX_WORDS = """
ALTER TABLE memories ADD COLUMN index_words TEXT;
"""

# Session consolidation (issue 21, engine/consolidator.py): the section proposed for a receipt not
# yet applied, journaled BEFORE its commit, so a consolidator killed after the model answered
# makes no second model call for it. A row goes in the transaction that applies its receipt (the
# receipts table then remembers it), and with every row of its thread when a memory of that
# thread is forgotten (its text may be in the section). A row whose section adds nothing new
# stays (so asking again costs no model call either). And each thread's mark: consolidated
# through its newest memory id then.
_V_CONSOLIDATION_JOURNAL = """
CREATE TABLE consolidation_journal(
  receipt_id TEXT PRIMARY KEY,
  thread_id TEXT NOT NULL,
  scope TEXT NOT NULL,
  section TEXT NOT NULL,
  consolidator TEXT NOT NULL,
  model_calls INTEGER NOT NULL,
  created_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX consolidation_journal_thread ON consolidation_journal(thread_id);

-- Threads consolidated (every scope applied, or nothing new) through their newest memory id then:
-- a call without a thread, and the background, take only threads with newer memories.
CREATE TABLE consolidated_threads(
  thread_id TEXT PRIMARY KEY,
  newest_id INTEGER NOT NULL
) WITHOUT ROWID;
"""

# Speakers (recall quality, issue 25): who said or wrote a memory, as the writer gave it
# (trimmed). NULL for a memory retained without one, and for every memory of an older file
# (nothing is backfilled). Recall keeps each tenant's speakers in its in-memory cache
# (engine/index.py), so no index is needed.
_V_SPEAKER = """
ALTER TABLE memories ADD COLUMN speaker TEXT;
"""

# Forgotten memories of older files lose what a forget of this version clears (metadata, time, thread,
# speaker, update time; ``ERASURE``): an earlier forget kept them, and GetMemory served them. Their
# thread's marks go once no memory names it. Finished as the file opens (``erasure_pending``).
_V_FORGOTTEN_CLEARED = """
UPDATE memories SET metadata = '{}', occurred_at = NULL, thread_id = NULL, thread_position = NULL,
  updated_at = NULL, index_words = NULL, speaker = NULL, fingerprint = NULL
  WHERE forgotten_at IS NOT NULL AND (metadata <> '{}' OR occurred_at IS NOT NULL OR thread_id IS NOT NULL
  OR thread_position IS NOT NULL OR updated_at IS NOT NULL OR index_words IS NOT NULL OR speaker IS NOT NULL
  OR fingerprint IS NOT NULL);
DELETE FROM consolidated_threads WHERE thread_id NOT IN (SELECT thread_id FROM memories WHERE thread_id IS NOT NULL);
INSERT OR REPLACE INTO meta(key, value) SELECT 'erasure_pending', '1'
  WHERE EXISTS (SELECT 1 FROM memories WHERE forgotten_at IS NOT NULL);
"""

# One order of writes (issue 40, docs/hot-path.md "Read your own writes"): each memory's
# acceptance position, from the tenant's one sequence shared by synchronous writes, fast writes
# (an operation's event id is its position) and forgets, so adjudication compares when writes
# were accepted, never when they were applied. NULL for every memory of an older file: before
# every position. An open operation's fingerprint, so a forget finds the queued writes of the same
# content, and a worker taking a write ahead of the backlog takes the earlier ones of its content
# with it (the earliest accepted duplicate survives). The tenant's timeline: a value replaced by
# every install that replaces its content (an import --replace, a restore), so a consistency token
# of an earlier timeline is answered at once.
_V_ACCEPTANCE = """
ALTER TABLE memories ADD COLUMN acceptance INTEGER;
ALTER TABLE oplog ADD COLUMN fingerprint TEXT;
UPDATE oplog SET fingerprint = json_extract(payload, '$.fingerprint')
  WHERE status IN ('pending', 'running') AND json_valid(payload);
CREATE INDEX oplog_open_fingerprint ON oplog(fingerprint, event_id) WHERE status IN ('pending', 'running');
INSERT OR IGNORE INTO meta(key, value) VALUES('timeline', lower(hex(randomblob(8))));
"""

# Expiry and revisions (issue 43, docs/expiry.md, docs/revisions.md). ``expires_at`` (unix
# seconds; NULL: never) hides a memory from then on and its grace's end erases it; the partial
# index finds the next to erase without a scan. Every change to a memory is a row of
# ``memory_revisions``: what it did (``kind``), who (surface, token name), what changed, the
# ledger entry, and the content version it left (``version``: the text and metadata are
# ``memory_versions``' row of that version, or the memory's own row for its current version, so
# no text is kept twice). Every change of a record is a row of ``record_revisions``; its
# ``content`` is NULL while it is the record's current content (``records.content``, kept once).
# Both keep a bounded count per memory and per record (store/revisions.py). The memories and
# records of an older file get one revision each (the retain, each update as a version), named
# by no surface.
_V_EXPIRY_AND_REVISIONS = """
ALTER TABLE memories ADD COLUMN expires_at REAL;
CREATE INDEX memories_expires ON memories(expires_at) WHERE expires_at IS NOT NULL AND forgotten_at IS NULL;
CREATE TABLE memory_revisions(
  memory_id INTEGER NOT NULL REFERENCES memories(id),
  revision INTEGER NOT NULL,
  kind TEXT NOT NULL,
  at REAL NOT NULL,
  surface TEXT NOT NULL,
  token_name TEXT NOT NULL,
  changed TEXT NOT NULL,
  version INTEGER NOT NULL,
  expires_at REAL,
  ledger_seq INTEGER NOT NULL,
  related_memory_id INTEGER,
  reverted_to INTEGER,
  PRIMARY KEY (memory_id, revision)
) WITHOUT ROWID;
INSERT INTO memory_revisions(memory_id, revision, kind, at, surface, token_name, changed, version, ledger_seq)
  SELECT id, 1, 'retained', created_at, '', '', '[]', 1, ledger_seq FROM memories WHERE forgotten_at IS NULL;
INSERT INTO memory_revisions(memory_id, revision, kind, at, surface, token_name, changed, version, ledger_seq)
  SELECT v.memory_id, v.version, 'updated', v.at, '', '', '["text","metadata"]', v.version, 0
  FROM memory_versions v JOIN memories m ON m.id = v.memory_id WHERE v.version > 1 AND m.forgotten_at IS NULL;
INSERT INTO memory_revisions(memory_id, revision, kind, at, surface, token_name, changed, version, ledger_seq)
  SELECT m.id, v.n + 1, 'updated', m.updated_at, '', '', '["text","metadata"]', v.n + 1, 0
  FROM memories m JOIN (SELECT memory_id, count(*) AS n FROM memory_versions GROUP BY memory_id) v ON v.memory_id = m.id
  WHERE m.forgotten_at IS NULL AND m.updated_at IS NOT NULL;
CREATE TABLE record_revisions(
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  generation INTEGER NOT NULL,
  op TEXT NOT NULL,
  content TEXT,
  at REAL NOT NULL,
  surface TEXT NOT NULL,
  token_name TEXT NOT NULL,
  source TEXT NOT NULL,
  ledger_seq INTEGER NOT NULL,
  PRIMARY KEY (scope, key, generation)
) WITHOUT ROWID;
INSERT INTO record_revisions(scope, key, generation, op, content, at, surface, token_name, source, ledger_seq)
  SELECT r.scope, r.key, coalesce(json_extract(l.entry, '$.generation'), 0), 'put', NULL, coalesce(l.at, 0), '', '',
    coalesce(json_extract(l.entry, '$.source'), ''), r.ledger_seq
  FROM records r LEFT JOIN ledger l ON l.seq = r.ledger_seq;
"""

# A change of a memory's expiry alone (UpdateMemory's expires_at, mem0's expiration_date) is a revision
# like any update: its ``expiry`` entry is a ``memory.updated`` delivery too (a revert's ``update`` was).
_V_EXPIRY_CHANGES_DELIVERED = """
INSERT INTO webhook_kind_of_op(op, source, kind) VALUES ('expiry', NULL, 'memory.updated');
"""

# A re-embedding in progress (engine/reembed.py): each memory's vector by the tenant's next embedder,
# beside its current one (recall reads those until the switch), with a CRC-32 of the text it was made
# from (an update since makes it stale). The switch copies them over ``embeddings``, emptying this.
_V_REEMBED = """
CREATE TABLE reembed_vectors(
  memory_id INTEGER PRIMARY KEY REFERENCES memories(id),
  vector BLOB NOT NULL,
  body_crc INTEGER NOT NULL
);
"""

MIGRATIONS: list[str] = [
    _V1,
    _V2_CONSOLIDATION,
    _V3_WORKSPACE,
    _V4_OPLOG,
    _V5_SECRET,
    _V6_MEMORY_KEYS,
    _V7_ERASURE_IN_PROPORTION,
    _V_TIME_AND_THREAD,
    _V_MEMORY_VERSIONS,
    _V_INDEX_WORDS,
    _V_CONSOLIDATION_JOURNAL,
    _V_SPEAKER,
    _V_FORGOTTEN_CLEARED,
    _V_ACCEPTANCE,
    _V_WEBHOOKS,
    _V_EXPIRY_AND_REVISIONS,
    _V_EXPIRY_CHANGES_DELIVERED,
    _V_REEMBED,
    _V_METADATA_INDEXES,
    _V_METADATA_PAIRS,
    _V_UNSPACED_SCRIPTS,
]
# The tables each migration adds: a file at version v holds those of the first v (lacking any: damaged, not migrated).
TABLES_ADDED: list[frozenset[str]] = [
    frozenset({"meta", "counters", "memories", "facts", "triples", "embeddings", "memories_fts", "ledger", "requests"}),
    frozenset({"supersessions"}),
    frozenset({"scopes", "records", "receipts"}),
    frozenset({"oplog", "oplog_transitions"}),
    frozenset(),
    frozenset({"memory_keys"}),
    frozenset(),
    frozenset(),  # _V_TIME_AND_THREAD
    frozenset({"memory_versions"}),
    frozenset(),  # _V_INDEX_WORDS
    frozenset({"consolidation_journal", "consolidated_threads"}),  # _V_CONSOLIDATION_JOURNAL
    frozenset(),  # _V_SPEAKER
    frozenset(),  # _V_FORGOTTEN_CLEARED
    frozenset(),  # _V_ACCEPTANCE
    frozenset({"webhook_subscriptions", "webhook_secrets", "webhook_kinds", "webhook_kind_of_op", "webhook_outbox"}),
    frozenset({"memory_revisions", "record_revisions"}),  # _V_EXPIRY_AND_REVISIONS
    frozenset(),  # _V_EXPIRY_CHANGES_DELIVERED
    frozenset({"reembed_vectors"}),  # _V_REEMBED
    frozenset(),  # _V_METADATA_INDEXES
    frozenset({"metadata_pairs"}),  # _V_METADATA_PAIRS
    frozenset(),  # _V_UNSPACED_SCRIPTS
]


def tables_at(version: int) -> frozenset[str]:
    """The tables a tenant file at schema ``version`` holds."""
    return frozenset().union(*TABLES_ADDED[:version])


# What a tenant file at the current version holds; a file lacking any of these is damaged.
REQUIRED_TABLES = tables_at(len(MIGRATIONS))

SCHEMA_VERSION = len(MIGRATIONS)


# -- what a forget erases ------------------------------------------------------------------------
#
# A forgotten memory keeps its row, and of it only these columns, none of them the client's
# content (docs/operations.md, "What a forgotten memory shows"); ``WriteTxn.forget_memory`` clears
# every other column of ``memories`` (NULL, or the blank of ``FORGET_BLANKS``), found in the file
# itself, so a column added later is erased by default.
FORGET_KEEPS: dict[str, str] = {
    "id": "its identity: never reused, named by the ledger, events and other memories",
    "scope": "a namespace (global, workspace/<name>), not content: it also names records and generations, "
    "and the ledger's entries name it in plain text, so a forget cannot take it back",
    "created_at": "when the server committed it (the server's clock)",
    "forgotten_at": "when it was forgotten: set by the forget",
    "ledger_seq": "its retain entry in the audit chain",
    "merged_into": "the memory a Dedup merge retired it into (an id)",
    "merged_at": "when (the server's clock)",
    "superseded_by": "the newer memory that replaced its facts (an id)",
    "superseded_at": "when (the server's clock)",
}
# What a forget writes into a NOT NULL column it clears (a nullable one becomes NULL): the empty
# text, and the empty object, which metadata filters still read as JSON.
FORGET_BLANKS: dict[str, str] = {"body": "", "metadata": "{}"}


def forgotten_columns(connection: apsw.Connection) -> list[tuple[str, str | None]]:
    """(column, value) of what a forgotten memory's row holds no more: every column of the file's
    ``memories`` but ``FORGET_KEEPS``, NULL or its ``FORGET_BLANKS`` value when it may not be NULL.
    Read from the file, so a column added later is cleared without being named."""
    cleared: list[tuple[str, str | None]] = []
    for _cid, name, _type, not_null, _default, _pk in connection.execute("PRAGMA table_info(memories)"):
        if name in FORGET_KEEPS:
            continue
        if not_null and name not in FORGET_BLANKS:  # pragma: no cover - a schema change without its blank
            raise AssertionError(f"memories.{name} is NOT NULL: give a forget its blank in schema.FORGET_BLANKS")
        cleared.append((name, FORGET_BLANKS.get(name)))
    return cleared


@dataclass(frozen=True)
class Erasure:
    """One table of a tenant file: its columns, and what a forget does to what the table holds of
    the memory (or why it holds nothing of it)."""

    columns: str  # space-separated, in the schema's order
    forget: str


# Every table of a tenant file (FTS5's own tables too). tests/test_erasure.py fails on a table or
# column missing here: say what a forget does to it before it ships.
ERASURE: dict[str, Erasure] = {
    "memories": Erasure(
        "id scope body metadata fingerprint created_at forgotten_at ledger_seq merged_into merged_at superseded_by "
        "superseded_at occurred_at thread_id thread_position updated_at index_words speaker acceptance expires_at",
        "every column but FORGET_KEEPS cleared (a new column too)",
    ),
    "facts": Erasure("memory_id ord kind value normalized", "the memory's rows deleted"),
    "triples": Erasure("memory_id ord subject predicate object", "the memory's rows deleted"),
    "embeddings": Erasure("memory_id vector", "the memory's row deleted"),
    "reembed_vectors": Erasure("memory_id vector body_crc", "the memory's row deleted (a re-embedding's vector)"),
    "memory_keys": Erasure("memory_id key", "the memory's key deleted: its ledger hashes confirm no guess after"),
    "metadata_pairs": Erasure("key value memory_id", "the memory's pairs deleted with its metadata (triggers)"),
    "memory_versions": Erasure("memory_id version body metadata at", "the memory's earlier versions deleted"),
    "memory_revisions": Erasure(
        "memory_id revision kind at surface token_name changed version expires_at ledger_seq related_memory_id "
        "reverted_to",
        "the memory's revisions deleted (they hold no text: a version's text is in memory_versions, deleted too)",
    ),
    "record_revisions": Erasure(
        "scope key generation op content at surface token_name source ledger_seq",
        "a record's own: a forget never edits it; a record's delete deletes its earlier revisions (their content)",
    ),
    "memories_fts": Erasure("body", "the memory's entries deleted from the segments that hold them"),
    "memories_fts_data": Erasure("id block", "FTS5's segments: the memory's entries and lone terms removed"),
    "memories_fts_idx": Erasure("segid term pgno", "FTS5's segment index: a lone term of the memory removed"),
    "memories_fts_docsize": Erasure("id sz", "FTS5's row lengths: the memory's row deleted"),
    "memories_fts_config": Erasure("k v", "FTS5's settings: nothing of any memory"),
    "supersessions": Erasure(
        "memory_id subject predicate object superseded_by new_object at",
        "rows of the memory's own facts deleted; new_object cleared where the memory was the newer",
    ),
    "oplog": Erasure(
        "event_id kind status payload request_id attempts failures extraction embedding result error_reason "
        "error_message accepted_at started_at finished_at retry_after fingerprint",
        "payload, extraction, embedding and fingerprint of the fast writes that wrote it or were found its "
        "duplicates cleared, and of the queued ones a forget matched (never applied); the rest is the event's ids, "
        "statuses, times and counts",
    ),
    "oplog_transitions": Erasure("seq event_id status at", "statuses and times: nothing of any memory"),
    "consolidation_journal": Erasure(
        "receipt_id thread_id scope section consolidator model_calls created_at",
        "every proposal of the memory's thread deleted (a section may quote it)",
    ),
    "consolidated_threads": Erasure("thread_id newest_id", "the thread's mark deleted once no memory names the thread"),
    "ledger": Erasure(
        "seq at entry hash",
        "kept (the chain): a memory's entries hold hashes keyed with its deleted key, ids and its scope",
    ),
    "requests": Erasure(
        "request_id method payload_hash result created_at",
        "kept for the request-id retention, so a retried write returns its first result instead of writing the "
        "memory again: the client's key, a SHA-256 of the request, ids and statuses",
    ),
    "records": Erasure("scope key content ledger_seq", "a record's own: a forget never edits it (its delete does)"),
    "scopes": Erasure("scope generation", "record generations: nothing of any memory"),
    "receipts": Erasure(
        "receipt_id scope payload_hash result created_at", "applied consolidations: hashes and generations"
    ),
    "webhook_subscriptions": Erasure(
        "id url include_text created_at failing_since paused_at pause_reason",
        "the tenant's subscriptions (addresses, a pause's reason): nothing of any memory",
    ),
    "webhook_secrets": Erasure("id subscription_id secret created_at", "signing secrets: nothing of any memory"),
    "webhook_kinds": Erasure("kind subscription_id", "the kinds each subscription wants"),
    "webhook_kind_of_op": Erasure("op source kind", "which ledger entries are which kinds: fixed"),
    "webhook_outbox": Erasure(
        "id delivery_id subscription_id kind at ledger_seq event_id memory_id scope detail text status attempts "
        "next_attempt_at last_attempt_at last_status_code last_error delivered_at",
        "text (the memory's, kept only for a subscription that asked for it) cleared when the memory is forgotten, and "
        "once delivered; the rest "
        "is ids, kinds, record keys, statuses, times and the receiver's errors",
    ),
    "meta": Erasure("key value", "the tenant's settings and marks: nothing of any memory"),
    "counters": Erasure("name value", "counts"),
    "sqlite_sequence": Erasure("name seq", "SQLite's highest ids"),
    # Made by ANALYZE (PRAGMA optimize, as a connection opens), so not in every file.
    "sqlite_stat1": Erasure("tbl idx stat", "the planner's counts"),
    "sqlite_stat4": Erasure(
        "tbl idx neq nlt ndlt sample",
        "samples of index keys (a thread id, a triple's subject): every one deleted when an erasure finishes",
    ),
}
