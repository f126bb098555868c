"""Input limits and validation of everything a client sends.

Every string from a client is hostile until checked here: tenant ids, sizes, counts, scope names,
metadata, numbers given as text. Each violation is an ``InvalidArgument`` whose message names
the limit and the value allowed. The surfaces (transport/) validate through this module only.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from mnemosyne.engine.options import option, option_of
from mnemosyne.engine.types import GLOBAL_SCOPE, Memory, ThreadRef
from mnemosyne.errors import InvalidArgument
from mnemosyne.host.numbers import decimal_number, whole_number

# The tenant-id rule is the store's, where an id becomes a file name (store/pool.py): the store
# holds every name to it whoever hands the name over (a client, a backup manifest, a peer's list)
# and cannot import the engine. Here it is one validation among the others, the one the
# surfaces call.
from mnemosyne.store.tenant_ids import TENANT_ID_PATTERN as TENANT_ID_PATTERN
from mnemosyne.store.tenant_ids import validate_tenant as validate_tenant

SCOPE_PATTERN = re.compile(r"global|workspace/[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Distinct scopes one recall may name: each is one value of the statements that filter by them, and
# SQLite takes at most 32,766 values in a statement.
MAX_RECALL_SCOPES = 1_000
REQUEST_ID_PATTERN = re.compile(r"[\x21-\x7e]{1,128}")
THREAD_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}")
# Thread positions stay exact in every JSON reader (a JavaScript number) and in SQLite.
MAX_THREAD_POSITION = 2**53 - 1
# occurred_at: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z (RFC 3339's years, and
# google.protobuf.Timestamp's range), in unix microseconds.
MIN_OCCURRED_AT_US = -62_135_596_800 * 1_000_000
MAX_OCCURRED_AT_US = 253_402_300_800 * 1_000_000 - 1
# A speaker's name: at most this many characters once trimmed.
MAX_SPEAKER_CHARS = 200
# C0 and C1 controls, and the line and paragraph separators: a name is one line of text.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# A call that waits (Flush, Disable) waits this long when the caller gives 0, and never longer
# than the maximum, whatever it asks: every wait ends.
DEFAULT_WAIT_SECONDS = 30.0
MAX_WAIT_SECONDS = 3600.0
# A response stops adding items (memories, hits, records) before its encoded size would pass this,
# always keeping at least one: every response then fits the 4 MiB that gRPC clients accept by
# default, whatever the documented limits let the items be (a memory of 32,768 four-byte
# characters with full metadata is ~0.3 MB). What was left out is said: a next_page_token, or the
# ids and keys to fetch one by one.
RESPONSE_BUDGET_BYTES = 3 * 1024 * 1024
# Per field or map entry: tag, length prefix and nesting, generously.
_FIELD_OVERHEAD = 12
# The largest --max-request-bytes: twice it must fit gRPC's message length, a 32-bit integer.
MAX_REQUEST_BYTES = 1_000_000_000


MAX_TENANT_BYTES_QUOTA = 2**48  # SQLite's largest database: 2**32 - 2 pages of 64 KiB


@dataclass(frozen=True)
class Limits:
    max_text_chars: int = option(32_768, "characters of one memory's text", minimum=1)
    max_query_chars: int = option(4_096, "characters of a recall query", minimum=1)
    max_batch_items: int = option(1_000, "items of one RetainBatch", minimum=1)
    max_k: int = option(100, "largest k of a recall", minimum=1)
    max_metadata_pairs: int = option(32, "metadata pairs of one memory (0 = memories take no metadata)")
    max_metadata_key_chars: int = option(128, "characters of a metadata key", minimum=1)
    max_metadata_value_chars: int = option(1_024, "characters of a metadata value", minimum=1)
    max_page_size: int = option(1_000, "largest page of a list call", minimum=1)
    # Workspace records (enforced by the workspace service).
    max_records_per_workspace: int = option(1_000, "records one workspace may hold", minimum=1)
    max_record_bytes: int = option(262_144, "bytes of one workspace record", minimum=1)
    # Per-tenant quotas, checked inside the write transaction (engine/quotas.py); 0 = unlimited.
    max_tenant_memories: int = option(0, "quota: live memories per tenant (0 = unlimited)")
    # Bytes, not a count: a quota of many GiB is a setting (SQLite's largest database is ~2**48 bytes).
    max_tenant_bytes: int = option(
        0, "quota: database bytes per tenant (0 = unlimited)", maximum=MAX_TENANT_BYTES_QUOTA
    )
    # Fast writes accepted and not applied yet, per tenant: the inbox grows past the workers' pace
    # only this far (its files are in no byte quota), a caller sending faster is told to retry.
    max_tenant_backlog: int = option(
        100_000, "fast writes accepted and not yet applied per tenant (0 = unlimited)", maximum=1_000_000_000
    )
    # Bytes of one encoded request. A request within every other limit can pass it (1,000 items
    # of 32,768 four-byte characters are 131 MB): split such a batch. Refused with
    # REQUEST_TOO_LARGE; the gRPC transport accepts twice this, so the refusal carries its reason.
    max_request_bytes: int = option(
        16 * 1024 * 1024,
        "bytes of one encoded request (the gRPC transport accepts twice this)",
        minimum=1,
        maximum=MAX_REQUEST_BYTES,
    )


# Each limit's serve flag, by its field's name (engine/options.py names the flag).
LIMIT_FLAGS = {
    spec.name: f"--{described.named(spec.name)}"
    for spec in fields(Limits)
    if (described := option_of(spec)) is not None
}


def set_by(name: str) -> str:
    """How a refusal names the limit ``name`` (a field of ``Limits``): by the ``serve`` flag an
    operator changes to raise it. Its field's name means nothing to a caller over gRPC or HTTP,
    nor to an operator reading the refusal in a log."""
    return f"the server's {LIMIT_FLAGS[name]}"


def validate_text(text: str, limits: Limits, *, field: str = "text") -> str:
    if not _visible(text):
        raise InvalidArgument(
            f"{field} is empty or holds only white space, control or format characters; give the text to remember",
            reason="TEXT_EMPTY",
        )
    if len(text) > limits.max_text_chars:
        raise InvalidArgument(
            f"{field} has {len(text)} characters; the limit is {limits.max_text_chars} characters "
            f"({set_by('max_text_chars')})",
            reason="TEXT_TOO_LONG",
            metadata={"limit": str(limits.max_text_chars)},
        )
    if "\x00" in text:
        raise InvalidArgument(f"{field} contains a NUL character", reason="TEXT_INVALID")
    return text


def _visible(text: str) -> bool:
    """Whether a character of ``text`` is neither white space nor a control or format character
    (a zero-width space, a byte-order mark): a text of only those says nothing to remember, and
    the default embedder's model reads nothing of it."""
    return any(not c.isspace() and unicodedata.category(c) not in ("Cc", "Cf") for c in text)


def validate_scope(scope: str) -> str:
    """A valid scope; GLOBAL_SCOPE for none."""
    scope = scope or GLOBAL_SCOPE
    if not SCOPE_PATTERN.fullmatch(scope):
        raise InvalidArgument(
            f"scope {scope[:80]!r} is not valid: use 'global' or 'workspace/<name>' where name is 1-64 "
            "characters of letters, digits, '.', '_' and '-'",
            reason="SCOPE_INVALID",
        )
    return scope


def validate_scopes(scopes: Iterable[str]) -> list[str]:
    """The distinct valid scopes of a recall, sorted: at most MAX_RECALL_SCOPES (SCOPES_TOO_MANY)."""
    distinct = set(scopes)
    if len(distinct) > MAX_RECALL_SCOPES:
        raise InvalidArgument(
            f"scopes names {len(distinct)} distinct scopes; the limit is {MAX_RECALL_SCOPES}",
            reason="SCOPES_TOO_MANY",
            metadata={"limit": str(MAX_RECALL_SCOPES)},
        )
    return sorted({validate_scope(s) for s in distinct})


def validate_metadata(metadata: Mapping[str, str], limits: Limits, *, field: str = "metadata") -> dict[str, str]:
    if len(metadata) > limits.max_metadata_pairs:
        raise InvalidArgument(
            f"{field} has {len(metadata)} pairs; the limit is {limits.max_metadata_pairs} pairs "
            f"({set_by('max_metadata_pairs')})",
            reason="METADATA_TOO_LARGE",
            metadata={"limit": str(limits.max_metadata_pairs)},
        )
    for key, value in metadata.items():
        if not key or len(key) > limits.max_metadata_key_chars or "\x00" in key:
            raise InvalidArgument(
                f"{field} key {key[:80]!r} must be 1-{limits.max_metadata_key_chars} characters without NUL "
                f"({set_by('max_metadata_key_chars')})",
                reason="METADATA_INVALID",
                metadata={"limit": str(limits.max_metadata_key_chars)},
            )
        if len(value) > limits.max_metadata_value_chars or "\x00" in value:
            raise InvalidArgument(
                f"{field} value of {key[:80]!r} must be at most {limits.max_metadata_value_chars} characters "
                f"without NUL ({set_by('max_metadata_value_chars')})",
                reason="METADATA_INVALID",
                metadata={"limit": str(limits.max_metadata_value_chars)},
            )
    return dict(metadata)


def validate_occurred_at(occurred_at: int | None, *, field: str = "occurred_at") -> int | None:
    """None (not given) or a time between the years 1 and 9999, in unix microseconds."""
    if occurred_at is not None and not MIN_OCCURRED_AT_US <= occurred_at <= MAX_OCCURRED_AT_US:
        raise InvalidArgument(
            f"{field} is outside 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z; give when it was said or "
            "happened within those years, or leave it unset",
            reason="OCCURRED_AT_INVALID",
        )
    return occurred_at


def validate_expires_at(expires_at: float | None, *, field: str = "expires_at") -> float | None:
    """None (not given) or a time between the years 1 and 9999, in unix seconds. The end is open:
    as a float, the last microsecond of 9999 is 10000-01-01 (the seconds' 18 digits round), which
    no Timestamp holds."""
    if expires_at is not None and not MIN_OCCURRED_AT_US / 1e6 <= expires_at < (MAX_OCCURRED_AT_US + 1) / 1e6:
        raise InvalidArgument(
            f"{field} is outside 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z; give when the memory expires "
            "within those years, or leave it unset",
            reason="EXPIRES_AT_INVALID",
        )
    return expires_at


def validate_thread(thread: ThreadRef | None, *, field: str = "thread") -> ThreadRef | None:
    """None (not given) or a thread id of 1-128 safe characters and a position in 0..2^53 - 1."""
    if thread is None:
        return None
    if not THREAD_ID_PATTERN.fullmatch(thread.id):
        raise InvalidArgument(
            f"{field}.id {thread.id[:40]!r} is not valid: use 1-128 letters, digits, '.', '_', ':', '@', '/' "
            "or '-', starting with a letter or digit (e.g. 'chat-42/session-3')",
            reason="THREAD_INVALID",
        )
    if not 0 <= thread.position <= MAX_THREAD_POSITION:
        raise InvalidArgument(
            f"{field}.position is {thread.position}; it must be between 0 and {MAX_THREAD_POSITION}",
            reason="THREAD_INVALID",
        )
    return thread


def validate_speaker(speaker: str | None, *, field: str = "speaker") -> str | None:
    """None (not given, or only blanks) or the name trimmed of leading and trailing white space:
    at most MAX_SPEAKER_CHARS characters, no control characters."""
    name = (speaker or "").strip()
    if not name:
        return None
    if len(name) > MAX_SPEAKER_CHARS or _CONTROL.search(name) or any(map(_hides, name)):
        raise InvalidArgument(
            f"{field} {name[:40]!r} is not valid: a name of at most {MAX_SPEAKER_CHARS} characters on one line, "
            "without control or invisible format characters (e.g. 'Caroline')",
            reason="SPEAKER_INVALID",
        )
    return name


def _hides(character: str) -> bool:
    """A format character that hides or reorders a name's text (a zero-width space, a byte-order
    mark, a right-to-left override): two names that look alike would be different speakers. The
    joiners some scripts and emoji need (ZWNJ, ZWJ, an emoji flag's tag characters) are kept."""
    return (
        unicodedata.category(character) == "Cf"
        and character not in "\u200c\u200d"
        and not "\U000e0020" <= character <= "\U000e007f"
    )


def validate_request_id(request_id: str | None) -> str | None:
    if not request_id:
        return None
    if not REQUEST_ID_PATTERN.fullmatch(request_id):
        raise InvalidArgument(
            "request_id must be 1-128 printable ASCII characters without spaces (a UUID is ideal)",
            reason="REQUEST_ID_INVALID",
        )
    return request_id


def validate_k(k: int, limits: Limits) -> int:
    """A recall's k: 1 to --max-k; 0 asks for the default, 5 (or --max-k when it is lower)."""
    if k == 0:
        return min(5, limits.max_k)
    if k < 0 or k > limits.max_k:
        raise InvalidArgument(  # the cap in the ErrorInfo: a caller asking for the most asks again with it
            f"k is {k}; it must be between 1 and {limits.max_k} ({set_by('max_k')})",
            reason="K_OUT_OF_RANGE",
            metadata={"limit": str(limits.max_k)},
        )
    return k


def validate_query(query: str, limits: Limits) -> str:
    """A recall's query: the same characters a memory's text may hold, so every query can be
    matched by some memory (a text of only white space, control or format characters is empty;
    NUL is refused)."""
    if len(query) > limits.max_query_chars:
        raise InvalidArgument(
            f"query has {len(query)} characters; the limit is {limits.max_query_chars} characters "
            f"({set_by('max_query_chars')})",
            reason="QUERY_TOO_LONG",
        )
    if not _visible(query):
        raise InvalidArgument(
            "query is empty or holds only white space, control or format characters; give the text to search for",
            reason="QUERY_EMPTY",
        )
    if "\x00" in query:
        raise InvalidArgument("query contains a NUL character", reason="QUERY_INVALID")
    return query


def validate_page_size(page_size: int, limits: Limits, default: int = 100) -> int:
    """A page's size: 1 to --max-page-size; 0 asks for ``default`` (or --max-page-size when it is
    lower: an operator's lower limit never refuses a call that named no size)."""
    if page_size == 0:
        return min(default, limits.max_page_size)
    if page_size < 0 or page_size > limits.max_page_size:
        raise InvalidArgument(
            f"page_size is {page_size}; it must be between 1 and {limits.max_page_size} ({set_by('max_page_size')})",
            reason="PAGE_SIZE_OUT_OF_RANGE",
            metadata={"limit": str(limits.max_page_size)},
        )
    return page_size


# Rows of each list of the cross-tenant figures (the largest, the busiest, the failing).
MAX_FIGURES_ROWS = 100


def validate_figures_rows(limit: int) -> int:
    """Rows per list of ListTenantFigures: 1 to MAX_FIGURES_ROWS, 10 when 0."""
    if limit == 0:
        return 10
    if limit < 0 or limit > MAX_FIGURES_ROWS:
        raise InvalidArgument(
            f"limit is {limit}; it must be between 1 and {MAX_FIGURES_ROWS}", reason="LIMIT_OUT_OF_RANGE"
        )
    return limit


def validate_wait_seconds(seconds: float, *, field: str = "timeout_seconds") -> float:
    """A finite wait between 0 (the default, DEFAULT_WAIT_SECONDS) and MAX_WAIT_SECONDS."""
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_WAIT_SECONDS:
        raise InvalidArgument(
            f"{field} is {seconds!r}; give a number of seconds from 0 (the default, {DEFAULT_WAIT_SECONDS:g}) "
            f"to {MAX_WAIT_SECONDS:g}",
            reason="TIMEOUT_INVALID",
        )
    return seconds or DEFAULT_WAIT_SECONDS


def json_shown(value: object) -> str:
    """``value`` as JSON writes it (the surfaces' values come from JSON): true, null, {"a": 1},
    NaN, not Python's True, None, {'a': 1}, nan; an infinity read from a number past a float's
    range (1e400, an integer of thousands of digits) said to be one. Text keeps its quotes ('10')."""
    if isinstance(value, float) and math.isinf(value):
        shown = "Infinity (a number past 1.8e308)" if value > 0 else "-Infinity (a number past -1.8e308)"
    elif isinstance(value, str):
        shown = repr(value)
    else:
        try:
            shown = json.dumps(value)  # NaN as NaN
        except (TypeError, ValueError):  # not from JSON (an MCP tool's argument may be any object)
            shown = repr(value)
    return shown if len(shown) <= 40 else shown[:36] + "..."


def parse_integer(
    value: object, *, field: str, minimum: int, maximum: int, out_of_range: str = "NUMBER_INVALID"
) -> int:
    """An integer from a JSON integer or from text of ASCII digits with an optional leading '-',
    between ``minimum`` and ``maximum``. Refused, naming the field and its range: a float (even
    1.0 or 1e11), a bool, NaN or Infinity, other scripts' digits, spaces, signs but one '-', hex,
    underscores, the empty string (NUMBER_INVALID); a whole number outside the range with
    ``out_of_range``, the reason of the field's own limit where it has one (K_OUT_OF_RANGE: the
    same mistake is refused alike on every surface). The one rule for every surface where numbers
    arrive as text (host/numbers.py, which the MCP tools apply too)."""
    number = whole_number(value)
    if number is None:
        raise InvalidArgument(
            f"{field} must be a whole number from {minimum} to {maximum}, written with the digits 0-9; "
            f"{json_shown(value)} is not",
            reason="NUMBER_INVALID",
        )
    if not minimum <= number <= maximum:
        raise InvalidArgument(
            f"{field} is {json_shown(value)}; it must be a whole number from {minimum} to {maximum}",
            reason=out_of_range,
        )
    return number


def parse_number(
    value: object, *, field: str, minimum: float, maximum: float, out_of_range: str = "NUMBER_INVALID"
) -> float:
    """A finite number from a JSON number or from text of ASCII digits (a decimal point and an
    exponent allowed: "1.5", "2e3"), between ``minimum`` and ``maximum``. Refused, naming the
    field and its range: NaN, Infinity, a bool, other scripts' digits, spaces, hex, the empty
    string (NUMBER_INVALID); a finite number outside the range with ``out_of_range``. The same
    rule as ``parse_integer``, for a field that takes fractions."""
    number = decimal_number(value)
    if number is None:
        raise InvalidArgument(
            f"{field} must be a number from {minimum:g} to {maximum:g}, written with the digits 0-9 "
            f"(a '.' and an exponent allowed); {json_shown(value)} is not",
            reason="NUMBER_INVALID",
        )
    if not (math.isfinite(number) and minimum <= number <= maximum):
        raise InvalidArgument(
            f"{field} is {json_shown(value)}; it must be a number from {minimum:g} to {maximum:g}",
            reason=out_of_range if math.isfinite(number) else "NUMBER_INVALID",
        )
    return number


def _text_bytes(text: str) -> int:
    return len(text.encode("utf-8")) + _FIELD_OVERHEAD


def memory_bytes(memory: Memory) -> int:
    """An upper bound of a memory's encoded size in a response. Each text field counts its UTF-8
    bytes and ``_FIELD_OVERHEAD`` (``_text_bytes``), summed here in one pass: a recall sizes
    every hit."""
    size = 64 + len(memory.text.encode()) + len(memory.scope.encode()) + 2 * _FIELD_OVERHEAD
    for key, value in memory.metadata.items():
        size += len(key.encode()) + len(value.encode()) + 2 * _FIELD_OVERHEAD
    for a, b, c in (*memory.facts, *memory.triples):
        size += len(a.encode()) + len(b.encode()) + len(c.encode()) + 3 * _FIELD_OVERHEAD
    if memory.thread is not None:
        size += len(memory.thread.id.encode()) + 2 * _FIELD_OVERHEAD
    return size


def record_bytes(key: str, content: str) -> int:
    """An upper bound of a record's encoded size in a response."""
    return _text_bytes(key) + _text_bytes(content) + _FIELD_OVERHEAD


def within_budget(sizes: list[int], budget: int = RESPONSE_BUDGET_BYTES) -> int:
    """How many of the leading items fit the budget together (at least one, if there is one)."""
    used = 0
    for count, size in enumerate(sizes):
        used += size
        if used > budget and count:
            return count
    return len(sizes)


# Memories a re-embedding step embeds at most (each step one transaction): ``mnemosyne reembed``'s
# --chunk-size is held to it as it is parsed, before any call.
MAX_REEMBED_CHUNK = 10_000
