"""The checks of a manifest's values, shared by a tenant archive's (cli/archive.py) and a backup
directory's (cli/backup.py): a manifest is outside data, so each value is held to its type and
range once, as it is read, and a malformed one is said in one line (ValueError, naming the field),
never met later as a traceback or as gRPC's UNKNOWN inside a call."""

from __future__ import annotations

import json
import re
from typing import Any

from mnemosyne.host.unicode import lone_surrogate

# The largest count or size a manifest may give: the protocol carries them as int64 (admin.proto).
INT64_MAX = (1 << 63) - 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
# The most bytes a manifest may have, checked before any is read: a hostile archive's header (or a
# sparse manifest.json) can claim gigabytes, which a read would take into memory at once.
ARCHIVE_MANIFEST_MAX_BYTES = 16 << 20  # one tenant's: its figures and a generation per scope
BACKUP_MANIFEST_MAX_BYTES = 256 << 20  # every tenant's, some 700 bytes each: 350,000 tenants


def within_size(size: int, limit: int) -> None:
    """ValueError, to follow "is", when a manifest of ``size`` bytes is more than ``limit``."""
    if size > limit:
        raise ValueError(f"{size} bytes, more than the {limit} bytes a manifest may have")


def parse_manifest(data: bytes) -> Any:
    """The JSON value of a manifest's bytes; ValueError saying what they are instead, to follow
    "is": not UTF-8, not JSON, or JSON nested deeper than the parser's recursion goes (its
    RecursionError said like the rest, never a traceback)."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 JSON ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None


def shown(value: Any) -> str:
    """A manifest's value as a message names it: a number or text itself (cut short), else its kind."""
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    return json.dumps(value)[:40]  # JSON's spelling: null, true, Infinity, "1"


def field(entry: dict[str, Any], name: str, where: str) -> Any:
    """``entry[name]``; ValueError when ``entry`` (``where``, for the message) has none."""
    if name not in entry:
        raise ValueError(f"{where} has no {name!r}")
    return entry[name]


def json_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is {shown(value)}, not an object")
    return value


def whole_number(value: Any, what: str) -> int:
    """``value`` if it is a count or size a manifest may hold: an integer (not a float, nor
    true) from 0 to 2^63-1. A larger one would fail only inside the gRPC call, as UNKNOWN."""
    if type(value) is not int or not 0 <= value <= INT64_MAX:
        raise ValueError(f"{what} is {shown(value)}, not a whole number from 0 to 2^63-1")
    return value


def text(value: Any, what: str) -> str:
    """``value`` if it is text UTF-8 can carry (JSON's lone surrogates, "\\ud800", cannot)."""
    if not isinstance(value, str):
        raise ValueError(f"{what} is {shown(value)}, not text")
    refusal = lone_surrogate(value, what)
    if refusal is not None:
        raise ValueError(refusal)
    return value


def sha256_hex(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ValueError(f"{what} is {shown(value)}, not a SHA-256 (64 lowercase hex digits)")
    return value


def copy_figures(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """The figures of a tenant's copy as a manifest's ``entry`` records them (``TenantBackup.figures``),
    each of its type and range; ValueError naming the first that is not."""
    counts = ("change_counter", "inbox_sequence", "ledger_entries", "memories", "last_event_id")
    figures: dict[str, Any] = {name: whole_number(field(entry, name, where), f"{where}.{name}") for name in counts}
    figures["head_hash"] = text(field(entry, "head_hash", where), f"{where}.head_hash")
    generations = json_object(field(entry, "generations", where), f"{where}.generations")
    figures["generations"] = {
        text(scope, f"a scope of {where}.generations"): whole_number(g, f"{where}.generations[{shown(scope)}]")
        for scope, g in generations.items()
    }
    return figures
