"""Proto hygiene: the committed generated code is current, every proto loads in Node with
@grpc/proto-loader, and the current protos do not break the released API
(protos/descriptor/mnemosyne-v1.binpb; update it deliberately with scripts/update-proto-descriptor).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from mnemosyne.client import convert
from mnemosyne.v1 import revisions_pb2, workspace_pb2
from tests.node_support import node_package
from tests.proto_compat import breaking_changes, compile_descriptor_set, load_descriptor_set

ROOT = Path(__file__).resolve().parents[1]
PROTOS = ROOT / "protos"
V1 = PROTOS / "mnemosyne" / "v1"
RELEASED = PROTOS / "descriptor" / "mnemosyne-v1.binpb"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")


def _generated_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.name.endswith(GENERATED_SUFFIXES)}


def test_committed_python_code_matches_protoc_output(tmp_path: Path) -> None:
    # The same command as scripts/gen-protos, into a temporary directory.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTOS}",
            f"-I{PROTOS / 'third_party'}",
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            *sorted(str(p) for p in V1.glob("*.proto")),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    fresh = _generated_files(tmp_path / "mnemosyne" / "v1")
    committed = _generated_files(V1)
    assert len(fresh) == 3 * len(list(V1.glob("*.proto")))
    assert sorted(committed) == sorted(fresh), "generated files missing or left over: run scripts/gen-protos"
    stale = sorted(name for name in fresh if fresh[name] != committed[name])
    assert not stale, f"generated code is stale for {stale}: run scripts/gen-protos and commit the result"


def test_every_proto_loads_with_grpc_proto_loader() -> None:
    package = node_package()
    result = subprocess.run(
        ["node", "scripts/load-protos.js"], cwd=package, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["files"] == sorted(str(p.relative_to(PROTOS)) for p in V1.glob("*.proto"))
    # Node sees exactly the services and methods that the Python descriptors declare.
    from mnemosyne.v1 import admin_pb2, events_pb2, hot_path_pb2, memory_pb2, types_pb2, webhooks_pb2, workspace_pb2

    expected = {
        service.full_name: sorted(m.name for m in service.methods)
        for module in (admin_pb2, events_pb2, hot_path_pb2, memory_pb2, types_pb2, webhooks_pb2, workspace_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
    }
    assert loaded["services"] == expected


def test_current_protos_keep_the_released_api(tmp_path: Path) -> None:
    current = compile_descriptor_set(PROTOS, tmp_path / "current.binpb")
    problems = breaking_changes(load_descriptor_set(RELEASED), current)
    assert not problems, (
        "breaking change against the released API (protos/descriptor/mnemosyne-v1.binpb):\n  "
        + "\n  ".join(problems)
        + "\nRevert it, or, for a deliberate new API version, run scripts/update-proto-descriptor."
    )


def _edited_protos(tmp_path: Path, file: str, *edits: tuple[str, str]) -> Path:
    """A copy of protos/ with regex ``edits`` (pattern, replacement) applied to one file."""
    root = tmp_path / "protos"
    shutil.copytree(PROTOS / "mnemosyne", root / "mnemosyne", ignore=shutil.ignore_patterns("*.py", "*.pyi"))
    shutil.copytree(PROTOS / "third_party", root / "third_party")
    path = root / "mnemosyne" / "v1" / file
    text = path.read_text()
    for old, new in edits:
        edited = re.sub(old, new, text, flags=re.M)
        assert edited != text, f"the edit {old!r} did not apply to {file}"
        text = edited
    path.write_text(text)
    return root


@pytest.mark.parametrize(
    ("file", "edits", "expected"),
    [
        ("memory.proto", [(r"^  string scope = 3;\n", "")], "field .mnemosyne.v1.RetainRequest.scope = 3 was removed"),
        (
            "memory.proto",
            [(r"^  string scope = 3;", "  string scope = 99;")],
            "RetainRequest.scope = 3 was removed (now number 99)",
        ),
        (
            "memory.proto",
            [(r"^  int32 k = 3;", "  int64 k = 3;")],
            "field .mnemosyne.v1.RecallRequest.k = 3 changed type",
        ),
        (
            "memory.proto",
            [(r"^  repeated string scopes = 4;", "  string scopes = 4;")],
            "RecallRequest.scopes = 4 changed type",
        ),
        (
            "workspace.proto",
            [(r"^  rpc Consolidate\(.*\n(    .*\n)*  }\n", "")],
            "rpc .mnemosyne.v1.WorkspaceService.Consolidate was removed",
        ),
        (
            "types.proto",
            [(r"^    ENQUEUED = 3;", "    ENQUEUED = 7;")],
            "RetainResult.Status.ENQUEUED changed number 3 -> 7",
        ),
        # Renaming a message (with its users, so the file compiles) removes the old name.
        ("workspace.proto", [(r"\bRecord\b(?= )", "RecordV2")], "message .mnemosyne.v1.Record was removed"),
    ],
    ids=[
        "field-removed",
        "field-renumbered",
        "field-type",
        "field-label",
        "rpc-removed",
        "enum-renumbered",
        "message-renamed",
    ],
)
def test_breaking_changes_are_detected(tmp_path: Path, file: str, edits: list[tuple[str, str]], expected: str) -> None:
    root = _edited_protos(tmp_path, file, *edits)
    problems = breaking_changes(load_descriptor_set(RELEASED), compile_descriptor_set(root, tmp_path / "edited.binpb"))
    assert any(expected in p for p in problems), problems


def test_a_changed_http_route_is_breaking(tmp_path: Path) -> None:
    # The released descriptor predates the HTTP mapping, so the current protos stand in for a
    # release that has it: a route, once released, may not change.
    released = compile_descriptor_set(PROTOS, tmp_path / "released.binpb")
    root = _edited_protos(
        tmp_path, "memory.proto", (r'post: "/v1/tenants/\{tenant\}/memories:recall"', 'post: "/v1/recall/{tenant}"')
    )
    problems = breaking_changes(released, compile_descriptor_set(root, tmp_path / "edited.binpb"))
    assert problems == [
        'rpc .mnemosyne.v1.MemoryService.Recall changed its HTTP route post: "/v1/tenants/{tenant}/memories:recall" '
        'body: "*" -> post: "/v1/recall/{tenant}" body: "*"'
    ]


def test_the_googleapis_copy_declares_what_the_installed_package_declares(tmp_path: Path) -> None:
    # protos/third_party/google/api is what protoc and buf read; the runtime's annotations_pb2 is
    # googleapis-common-protos'. Both must describe the same options.
    from google.api import annotations_pb2, http_pb2
    from google.protobuf import descriptor_pb2

    copy = compile_descriptor_set(PROTOS, tmp_path / "current.binpb")
    for module in (annotations_pb2, http_pb2):
        installed = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        ours = next(f for f in copy.file if f.name == installed.name)
        ours.ClearField("source_code_info")
        # protoc fills in the JSON names that the generated code leaves out.
        for field in [*ours.extension, *(f for message in ours.message_type for f in message.field)]:
            field.ClearField("json_name")
        assert ours == installed, f"protos/third_party/{installed.name} differs from googleapis-common-protos'"


def test_additions_are_not_breaking(tmp_path: Path) -> None:
    root = _edited_protos(
        tmp_path,
        "memory.proto",
        (
            r"^  repeated ConversationMessage messages = 7;",
            "  repeated ConversationMessage messages = 7;\n  string added_later = 99;",
        ),
    )
    path = root / "mnemosyne" / "v1" / "memory.proto"
    path.write_text(
        path.read_text()
        + "\nmessage AddedLater { string x = 1; }\nservice AddedService { rpc Added(AddedLater) returns (AddedLater); }\n"
    )
    current = compile_descriptor_set(root, tmp_path / "added.binpb")
    assert not breaking_changes(load_descriptor_set(RELEASED), current)
    names = {m.name for f in current.file for m in f.message_type}
    assert "AddedLater" in names


def test_an_enum_value_a_newer_server_adds_reaches_the_python_client_as_its_number() -> None:
    """A new enum value is an addition (not breaking), so a newer server may send one: the Python
    client read a revision kind or a session outcome it did not know with protobuf's ``Name``, a
    ValueError from the call as if the caller erred. It is the number as text, as a webhook kind
    it does not know is, and as the Node client reads one."""
    revisions = revisions_pb2.ListMemoryRevisionsResponse(
        revisions=[revisions_pb2.MemoryRevision(kind=cast(revisions_pb2.RevisionKind, 99))]
    )
    assert [r.kind for r in convert.memory_revisions_from_proto(revisions)] == ["99"]
    known = revisions_pb2.ListMemoryRevisionsResponse(
        revisions=[revisions_pb2.MemoryRevision(kind=revisions_pb2.REVISION_KIND_RETAINED)]
    )
    assert convert.memory_revisions_from_proto(known)[0].kind == "retained"  # a known one, as before
    outcomes = workspace_pb2.ConsolidateSessionResponse(
        scopes=[workspace_pb2.SessionScopeOutcome(outcome=cast(workspace_pb2.SessionScopeOutcome.Outcome, 99))]
    )
    assert [o.outcome for o in convert.session_outcomes_from_proto(outcomes)] == ["99"]
