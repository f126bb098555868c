"""The metadata keys with an index of their own: a tenant file's partial expression indexes
(schema.py's migration) and the filter clauses that use them (store/memory_reads.py
``metadata_clause``, ``holding`` below)."""

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


def pair_scan(column: str) -> str:
    """The SQL of a metadata ``column`` holding the pair bound after it (key, then value), for a
    key of no index: every memory's metadata read with json_each (bound parameters, so keys from
    clients never become JSON path syntax)."""
    return f"EXISTS (SELECT 1 FROM json_each({column}) j WHERE j.key = ? AND j.value = ?)"


def holding(key: str, value: str) -> tuple[str, tuple[str, ...]]:
    """A SELECT of the ids of the memories whose metadata holds ``key`` = ``value``, and its
    parameters: an indexed key's reads its index's entries only, any other key's every memory's
    metadata. A forgotten memory holds no metadata, so none is among them."""
    if key in INDEXED_METADATA_KEYS:
        return f"SELECT id FROM memories WHERE {metadata_value('metadata', key)} = ?", (value,)
    return f"SELECT id FROM memories WHERE {pair_scan('metadata')}", (key, value)
