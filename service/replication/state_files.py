"""The replication's small files in the data directory (its planned sweeps, the forgotten
memories not yet in object storage): JSON, written through a temporary name, so a kill leaves the
old file or the new one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_json(path: Path) -> dict[str, Any]:
    try:
        found: dict[str, Any] = json.loads(path.read_text())
        return found
    except FileNotFoundError:
        return {}


def write_json(path: Path, value: dict[str, Any]) -> None:
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)
