"""FTS5's own length statistics, decoded from its shadow tables.

FTS5's ``bm25()`` has fixed parameters (k1 = 1.2, b = 0.75). To re-weigh length normalisation,
recall needs each hit's token count and the index's mean token count, exactly as FTS5 counted them.
FTS5 keeps both: ``<table>_docsize.sz`` holds one varint per column (the row's token count), and
the averages record, ``<table>_data`` row 1, holds the number of rows and then one varint per column
(the total token count). Both use SQLite's varint format (big-endian groups of 7 bits, the high
bit set on every byte but the last; a 9th byte carries 8 bits). Anything unreadable decodes as 0,
which recall treats as "length unknown" and leaves BM25 as FTS5 ranked it.

The structure record, ``<table>_data`` row 10, starts with a 4-byte cookie, then (in FTS5's
version 2 of the record) the 4 bytes FF 00 00 01, then the number of levels and the number of
segments as varints (FTS5's own varint, the same encoding below 2^56): ``fts5_segments``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TextHits:
    """Full-text hits, best first, as columns: memory ids, FTS5 bm25 relevance (higher is
    better), each hit's token count (0 when unknown); and the index's mean token count per row
    (0.0 when unknown)."""

    ids: list[int]
    relevance: list[float]
    lengths: list[int]
    average_length: float


def fts5_varints(blob: bytes | None, count: int) -> list[int]:
    """The first ``count`` SQLite varints of ``blob`` (0 for each one missing or cut short)."""
    values: list[int] = []
    data = bytes(blob or b"")
    i = 0
    while len(values) < count:
        value = 0
        for n in range(9):
            if i >= len(data):
                return values + [0] * (count - len(values))
            byte = data[i]
            i += 1
            if n == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        values.append(value)
    return values


def fts5_row_length(docsize: bytes | None) -> int:
    """A one-column row's token count from its ``docsize.sz`` (0 when unknown)."""
    if docsize and docsize[0] < 0x80:  # under 128 tokens: one byte, the common case
        return docsize[0]
    return fts5_varints(docsize, 1)[0]


def fts5_row_lengths(docsizes: list[bytes | None]) -> list[int]:
    """``fts5_row_length`` of each row, the one-byte ones without a call each."""
    return [d[0] if d and d[0] < 0x80 else fts5_row_length(d) for d in docsizes]


_STRUCTURE_V2 = b"\xff\x00\x00\x01"


def fts5_segments(structure: bytes | None) -> int:
    """The number of segments of an FTS5 index from its structure record (0 when unreadable)."""
    data = bytes(structure or b"")
    start = 8 if data[4:8] == _STRUCTURE_V2 else 4
    return fts5_varints(data[start:], 2)[1] if len(data) > start else 0


def fts5_average_length(averages: bytes | None) -> float:
    """Mean token count per row of a one-column FTS5 table from its averages record."""
    rows, total = fts5_varints(averages, 2)
    return total / rows if rows > 0 else 0.0
