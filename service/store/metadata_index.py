"""How a filter by metadata finds its memories without reading every memory's metadata: the keys
with an expression index of their own (the mem0 surface's entities), a table of every other pair
(``metadata_pairs``, kept by triggers), both made by schema.py's migrations, and the filter
clauses that read them (store/memory_reads.py ``metadata_clause``, ``holding`` below)."""

from __future__ import annotations

# The metadata keys under which the mem0 surface keeps a memory's user, agent, app and run
# (transport/http/mem0_endpoints.py), one of which every mem0 search and listing filters by: each
# has a partial expression index, so such a filter (store/memory_reads.py ``metadata_clause``)
# finds its memories by the index instead of reading every memory's metadata.
INDEXED_METADATA_KEYS = ("mem0.user_id", "mem0.agent_id", "mem0.app_id", "mem0.run_id")


def metadata_value(column: str, key: str) -> str:
    """The SQL of an indexed key's value in a metadata ``column``, as its index and its filter both
    spell it: NULL for metadata that is not JSON (a damaged row is a finding of verify, never an
    error of the write, forget or filter that meets it)."""
    return f"CASE WHEN json_valid({column}) THEN json_extract({column}, '$.\"{key}\"') END"


METADATA_INDEXES = "".join(
    f"CREATE INDEX memories_metadata_{key.replace('.', '_')} ON memories({metadata_value('metadata', key)}) "
    f"WHERE {metadata_value('metadata', key)} IS NOT NULL;\n"
    for key in INDEXED_METADATA_KEYS
)


def _object(column: str) -> str:
    """A metadata ``column`` as json_each may read it: '{}' for metadata that is not a JSON object
    (a damaged row is a finding of verify, never an error of a write or a filter)."""
    return f"CASE WHEN json_valid({column}) AND json_type({column}) = 'object' THEN {column} ELSE '{{}}' END"


def _pairs_of(column: str, memory_id: str, rows: str = "") -> str:
    """The SELECT of (key, value, memory id) for each pair under a key of no index of its own, of
    the memory whose metadata is ``column`` (of each of ``rows``, when given)."""
    indexed = ", ".join(f"'{key}'" for key in INDEXED_METADATA_KEYS)
    return (
        f"SELECT j.key, j.value, {memory_id} FROM {rows}json_each({_object(column)}) j WHERE j.key NOT IN ({indexed})"
    )


# Every pair of a memory's metadata under a key of the caller's own, one row each (its value as
# json_each gives it, so a filter compares as reading the metadata would), kept by triggers on
# every write of a memory's metadata: a filter by such a key reads the pair's entries only. A
# forget clears the metadata, and so the memory's rows. The last statement fills it for a file
# of the version before.
METADATA_PAIRS = f"""
CREATE TABLE metadata_pairs(
  key TEXT NOT NULL,
  value,
  memory_id INTEGER NOT NULL,
  PRIMARY KEY(key, value, memory_id)
) WITHOUT ROWID;
CREATE TRIGGER metadata_pairs_added AFTER INSERT ON memories BEGIN
  INSERT OR IGNORE INTO metadata_pairs(key, value, memory_id) {_pairs_of("NEW.metadata", "NEW.id")};
END;
CREATE TRIGGER metadata_pairs_changed AFTER UPDATE OF metadata ON memories
  WHEN NEW.metadata IS NOT OLD.metadata BEGIN
  DELETE FROM metadata_pairs WHERE (key, value, memory_id) IN ({_pairs_of("OLD.metadata", "OLD.id")});
  INSERT OR IGNORE INTO metadata_pairs(key, value, memory_id) {_pairs_of("NEW.metadata", "NEW.id")};
END;
CREATE TRIGGER metadata_pairs_removed AFTER DELETE ON memories BEGIN
  DELETE FROM metadata_pairs WHERE (key, value, memory_id) IN ({_pairs_of("OLD.metadata", "OLD.id")});
END;
INSERT OR IGNORE INTO metadata_pairs(key, value, memory_id) {_pairs_of("m.metadata", "m.id", "memories m, ")};
"""


def pair_clause(column: str) -> str:
    """The SQL of a memory id ``column`` whose metadata holds the pair bound after it (key, then
    value), for a key of no index of its own: by ``metadata_pairs``' entries (bound parameters,
    so keys from clients never become JSON path syntax)."""
    return f"{column} IN (SELECT memory_id FROM metadata_pairs WHERE key = ? AND value = ?)"


def holding(key: str, value: str) -> tuple[str, tuple[str, ...]]:
    """A SELECT of the ids of the memories whose metadata holds ``key`` = ``value``, and its
    parameters, from index entries only: an indexed key's expression index, any other key's
    ``metadata_pairs``. A forgotten memory holds no metadata, so none is among them."""
    if key in INDEXED_METADATA_KEYS:
        return f"SELECT id FROM memories WHERE {metadata_value('metadata', key)} = ?", (value,)
    return "SELECT memory_id AS id FROM metadata_pairs WHERE key = ? AND value = ?", (key, value)
