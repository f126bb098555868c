"""buf lint on the protos: buf.yaml at the root, buf's STANDARD rules, the buf pinned in tools/buf
(run through tools/buf/buf, exactly as scripts/lint does).

The v1 protos were released with 27 names that break the rules; renaming them would break the
released API (protos/descriptor/mnemosyne-v1.binpb, tests/test_protos.py), so buf.yaml excepts
them with ``ignore_only``. That can only name files, so RELEASED_EXCEPTIONS below names the
elements, and a second run of buf lint without the exceptions must report exactly those: a new
message, RPC or enum value in an excepted file is held to the rules like one in a new file.

The buf tests skip only when node or npm are missing (they install the pinned buf with npm ci from
tools/buf/package-lock.json when tools/buf/node_modules is missing); with MNEMOSYNE_NO_SKIP=1 (CI)
that is a failure. Set BUF to run another buf binary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BUF = ROOT / "tools" / "buf" / "buf"
CONFIG = ROOT / "buf.yaml"
V1 = "protos/mnemosyne/v1"

# (file, rule, the stripped source line buf points at): each released name that breaks a rule.
# An RPC that shares its request AND its response type is reported twice by RPC_REQUEST_RESPONSE_UNIQUE.
_ENABLE = "rpc Enable(HotPathRequest) returns (HotPathStatus) {"
_DISABLE = "rpc Disable(HotPathRequest) returns (HotPathStatus) {"
_STATUS = "rpc Status(HotPathRequest) returns (HotPathStatus) {"
_GET_EVENT = "rpc GetEvent(GetEventRequest) returns (Event) {"
_WATCH_EVENTS = "rpc WatchEvents(WatchEventsRequest) returns (stream Event) {"
RELEASED_EXCEPTIONS: Counter[tuple[str, str, str]] = Counter(
    [
        (
            f"{V1}/admin.proto",
            "RPC_RESPONSE_STANDARD_NAME",
            "rpc AggregateStats(AggregateStatsRequest) returns (stream AggregateStatsChunk) {",
        ),
        (f"{V1}/events.proto", "RPC_REQUEST_RESPONSE_UNIQUE", _GET_EVENT),
        (f"{V1}/events.proto", "RPC_RESPONSE_STANDARD_NAME", _GET_EVENT),
        (f"{V1}/events.proto", "RPC_REQUEST_RESPONSE_UNIQUE", _WATCH_EVENTS),
        (f"{V1}/events.proto", "RPC_RESPONSE_STANDARD_NAME", _WATCH_EVENTS),
        *(
            (f"{V1}/events.proto", "ENUM_VALUE_PREFIX", value)
            for value in ("PENDING = 1;", "RUNNING = 2;", "SUCCEEDED = 3;", "FAILED = 4;")
        ),
        *(
            (f"{V1}/hot_path.proto", rule, rpc)
            for rpc in (_ENABLE, _DISABLE, _STATUS)
            for rule in (
                "RPC_REQUEST_RESPONSE_UNIQUE",
                "RPC_REQUEST_RESPONSE_UNIQUE",
                "RPC_REQUEST_STANDARD_NAME",
                "RPC_RESPONSE_STANDARD_NAME",
            )
        ),
        *(
            (f"{V1}/types.proto", "ENUM_VALUE_PREFIX", value)
            for value in ("CREATED = 1;", "DUPLICATE = 2;", "ENQUEUED = 3;", "INVALID = 4;")
        ),
        *((f"{V1}/workspace.proto", "ENUM_VALUE_PREFIX", value) for value in ("PUT = 1;", "DELETE = 2;")),
    ]
)


def _run_buf(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not os.environ.get("BUF") and (shutil.which("node") is None or shutil.which("npm") is None):
        pytest.skip("node and npm are needed to install the pinned buf (tools/buf; install Node.js >= 20)")
    return subprocess.run([str(BUF), *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def _findings(root: Path, *config_args: str) -> list[dict[str, Any]]:
    result = _run_buf(root, "lint", "--error-format=json", *config_args)
    # buf lint exits 100 when it has findings; anything else is buf failing to run.
    assert result.returncode in (0, 100), f"buf lint failed to run ({result.returncode}):\n{result.stderr}"
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _findings_without_exceptions(root: Path) -> Counter[tuple[str, str, str]]:
    """buf lint with root's buf.yaml minus its ignore_only, keyed like RELEASED_EXCEPTIONS."""
    config = yaml.safe_load((root / "buf.yaml").read_text())
    del config["lint"]["ignore_only"]
    found: Counter[tuple[str, str, str]] = Counter()
    for finding in _findings(root, "--config", json.dumps(config)):
        line = (root / finding["path"]).read_text().splitlines()[finding["start_line"] - 1].strip()
        found[(finding["path"], finding["type"], line)] += 1
    return found


def test_buf_lint_reports_nothing() -> None:
    result = _run_buf(ROOT, "lint")
    assert result.returncode == 0 and not result.stdout.strip(), (
        f"buf lint ({result.returncode}):\n{result.stdout}{result.stderr}\n"
        "Follow the rule (buf.yaml's exceptions are only for names released in v1)."
    )


def test_without_the_exceptions_buf_lint_reports_exactly_the_released_names() -> None:
    found = _findings_without_exceptions(ROOT)
    new = found - RELEASED_EXCEPTIONS
    assert not new, (
        "new lint findings in a file that buf.yaml excepts for its released names; follow the rules:\n  "
        + "\n  ".join(f"{path}: {rule}: {line}" for path, rule, line in sorted(new))
    )
    gone = RELEASED_EXCEPTIONS - found
    assert not gone, (
        "released exceptions that buf lint no longer reports (drop them from RELEASED_EXCEPTIONS and buf.yaml):\n  "
        + "\n  ".join(f"{path}: {rule}: {line}" for path, rule, line in sorted(gone))
    )
    assert sum(found.values()) == 27


def test_buf_yaml_excepts_only_the_files_and_rules_of_the_released_names() -> None:
    lint = yaml.safe_load(CONFIG.read_text())["lint"]
    assert lint["use"] == ["STANDARD"]
    # No blanket exceptions, no directory-wide ignores, no `// buf:lint:ignore` in the protos.
    assert "except" not in lint and "ignore" not in lint
    assert lint["disallow_comment_ignores"] is True
    excepted = {(path, rule) for rule, paths in lint["ignore_only"].items() for path in paths}
    assert excepted == {(path, rule) for path, rule, _ in RELEASED_EXCEPTIONS}


BAD_NEW_PROTO = """\
// A new file that breaks the rules.
syntax = "proto3";

package mnemosyne.v1;

option go_package = "github.com/mnemosyne/mnemosyne/gen/go/mnemosyne/v1;mnemosynev1";
option java_multiple_files = true;
option java_package = "dev.mnemosyne.v1";

// A service.
service ScratchService {
  // Shares one message for both ends.
  rpc DoIt(Thing) returns (Thing);
}

// A message.
message Thing {
  // Not lower_snake_case.
  string SomeField = 1;
}

// An enum.
enum Shade {
  // Never sent.
  SHADE_UNSPECIFIED = 0;
  // buf:lint:ignore ENUM_VALUE_PREFIX
  DARK = 1;
}
"""

BAD_ADDITION_TO_AN_EXCEPTED_FILE = """
// A new enum in events.proto, which buf.yaml excepts from ENUM_VALUE_PREFIX for EventStatus.
enum Tone {
  // Never sent.
  TONE_UNSPECIFIED = 0;
  // Not prefixed.
  LOUD = 1;
}
"""


def test_new_protos_and_new_elements_are_held_to_the_rules(tmp_path: Path) -> None:
    shutil.copy(CONFIG, tmp_path / "buf.yaml")
    shutil.copytree(
        ROOT / "protos" / "mnemosyne",
        tmp_path / "protos" / "mnemosyne",
        ignore=shutil.ignore_patterns("*.py", "*.pyi", "__pycache__"),
    )
    shutil.copytree(ROOT / "protos" / "third_party", tmp_path / "protos" / "third_party")
    (tmp_path / V1 / "scratch.proto").write_text(BAD_NEW_PROTO)
    events = tmp_path / V1 / "events.proto"
    events.write_text(events.read_text() + BAD_ADDITION_TO_AN_EXCEPTED_FILE)

    reported = {(f["path"], f["type"]) for f in _findings(tmp_path)}
    scratch = f"{V1}/scratch.proto"
    assert {
        (scratch, "RPC_REQUEST_RESPONSE_UNIQUE"),
        (scratch, "RPC_REQUEST_STANDARD_NAME"),
        (scratch, "RPC_RESPONSE_STANDARD_NAME"),
        (scratch, "FIELD_LOWER_SNAKE_CASE"),
        (scratch, "ENUM_VALUE_PREFIX"),  # the `// buf:lint:ignore` comment is refused
    } <= reported
    # The file-wide exception hides LOUD from buf lint itself ...
    assert (f"{V1}/events.proto", "ENUM_VALUE_PREFIX") not in reported
    # ... and the element check reports it.
    new = _findings_without_exceptions(tmp_path) - RELEASED_EXCEPTIONS
    assert (f"{V1}/events.proto", "ENUM_VALUE_PREFIX", "LOUD = 1;") in new
