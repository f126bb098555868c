"""The README is complete and its example really runs; the public surface is deliberate."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import mnemosyne
import mnemosyne.client
from mnemosyne.client import MemoryClient
from mnemosyne.v1 import admin_pb2, events_pb2, hot_path_pb2, memory_pb2, workspace_pb2

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PROTO_MODULES = [memory_pb2, workspace_pb2, hot_path_pb2, events_pb2, admin_pb2]


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_every_rpc_is_named_in_the_readme() -> None:
    for module in PROTO_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            assert service.name in README, service.name
            for method in service.methods:
                assert f"`{method.name}`" in README or f"{service.name}.{method.name}" in README, method.full_name


def test_every_serve_flag_is_in_the_readme() -> None:
    from mnemosyne.cli import build_parser

    serve = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    for action in serve._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help":
                assert f"`{flag}`" in README, f"serve flag {flag} is not documented in README.md"


def test_readme_python_example_runs(target: str, tenant: str) -> None:
    block = _python_blocks(README.split("## Use it from Python", 1)[1])[0]
    code = block.replace("127.0.0.1:50051", target).replace('"acme"', repr(tenant))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0] == "created 1"
    assert "RF-88213" in lines[1]
    assert lines[-1] == "True"


CLIENT_METHOD_OF_RPC = {
    "Retain": "retain", "RetainBatch": "retain_batch", "Recall": "recall", "GetMemory": "get_memory",
    "ListMemories": "list_memories", "ForgetMemory": "forget", "VerifyIntegrity": "verify_integrity",
    "Stats": "stats", "Ping": "ping", "Dedup": "dedup", "ListTenants": "list_tenants",
    "AggregateStats": "aggregate_stats", "AssembleContext": "assemble_context", "UpdateGlobal": "update_global",
    "UpdateWorkspace": "update_workspace", "GetRecord": "get_record", "ListRecords": "list_records",
    "EditRecords": "edit_records", "Consolidate": "consolidate", "Enable": "hot_path", "Disable": "hot_path",
    "Status": "hot_path", "Flush": "hot_path", "GetEvent": "get_event", "ListEvents": "list_events",
    "WatchEvents": "watch_events",
}


def test_client_has_a_method_for_every_rpc() -> None:
    for module in PROTO_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                name = CLIENT_METHOD_OF_RPC.get(method.name)
                assert name and callable(getattr(MemoryClient, name, None)), f"no client method for {method.full_name}"


def test_public_exports_are_complete() -> None:
    for module in (mnemosyne, mnemosyne.client):
        public = {name for name in vars(module) if not name.startswith("_") and not isinstance(getattr(module, name), type(module))}
        exported = set(module.__all__)
        assert exported <= public
        for name in public - exported - {"annotations"}:
            assert name in {"errors", "types", "memory_client"} or name.startswith("__"), f"{module.__name__}.{name} not in __all__"


def test_every_python_example_in_the_readme_runs(target: str, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import uuid

    blocks = _python_blocks(README)
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)  # MemoryBrain("./mem") makes its directory here
    for number, block in enumerate(blocks):
        tenant = f"readme-{number}-{uuid.uuid4().hex[:8]}"
        code = block.replace("127.0.0.1:50051", target).replace('"acme"', repr(tenant))
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, f"README.md python block {number}", "exec"), {"__name__": "readme_example"})
