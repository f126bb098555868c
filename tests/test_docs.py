"""The documentation is complete and its examples really run; the public surface is deliberate.

The README is for someone deciding whether and how to use Mnemosyne: its set-up, first calls
(Python, grpcurl, curl, MCP, consolidation, in order on one server; Node in
tests/test_node_package.py, mem0 in tests/test_mem0_api.py) and auth quick start run as printed here.
What lives in docs/ is checked there: every RPC in docs/architecture.md's table (flags, variables
and metrics: tests/test_operations_docs.py)."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import re
import shlex
import subprocess
import sys
import typing
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.message import Message
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

import mnemosyne
import mnemosyne.client
from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import PermissionDeniedError, UnauthenticatedError
from mnemosyne.v1 import admin_pb2, events_pb2, hot_path_pb2, memory_pb2, webhooks_pb2, workspace_pb2
from tests.docs_support import DOCS, README, ROOT, code_blocks, section, table_rows
from tests.support import SERVE, ServerProcess

README_TEXT = README.read_text()
PROTO_MODULES = [memory_pb2, workspace_pb2, hot_path_pb2, events_pb2, admin_pb2, webhooks_pb2]
ARCHITECTURE = DOCS / "architecture.md"
SERVICE_ROOT = ROOT / "service"


def _rpcs() -> list[tuple[str, str]]:
    """(service, method) of every RPC, from the proto descriptors: a new one cannot be missed."""
    return [
        (service.name, method.name)
        for module in PROTO_MODULES
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    ]


# -- the README -------------------------------------------------------------------------------


def test_readme_is_at_most_350_lines() -> None:
    lines = len(README_TEXT.splitlines())
    assert lines <= 350, f"README.md has {lines} lines; move detail to docs/"


def test_readme_set_up_is_exactly_two_commands() -> None:
    # CI checks these two on a fresh machine: the server on its embedded defaults, and the tests.
    blocks = code_blocks(section(README_TEXT, "Set up"), "sh")
    assert [b.strip() for b in blocks] == [
        "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/mnemosyne serve",
        "scripts/test",
    ]


def test_ci_runs_the_readme_s_test_command_while_the_readme_s_server_runs() -> None:
    # CI installs what scripts/test would name, checks, then starts the README's server on its
    # embedded defaults (no flag: a test that binds a default port fails CI) before the tests.
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    (serve,) = [i for i, step in enumerate(steps) if '/bin/mnemosyne" serve' in step]
    assert re.search(r'/bin/mnemosyne" serve >', steps[serve]), steps[serve]
    assert (
        steps.index("scripts/setup --apt") < steps.index("scripts/lint") < serve < steps.index("time scripts/test -q")
    )


def test_readme_names_the_checks_ci_runs() -> None:
    # The checks a contributor runs before CI does: named in the README, run by CI.
    assert "scripts/lint" in section(README_TEXT, "Contributing")
    ci_steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "scripts/lint" in ci_steps
    lint = (ROOT / "scripts" / "lint").read_text()
    for check in ("ruff format --check", "ruff check", "mypy", "lint-imports", "buf"):
        assert check in lint and check.split()[0] in section(README_TEXT, "Contributing")


def _reflected(channel: grpc.Channel, full_method: str) -> tuple[type[Message], type[Message]]:
    """The request and response classes of ``service/method``, found by server reflection alone
    (as grpcurl finds them: no .proto file, no generated code)."""
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    service, method = full_method.split("/")
    found = pool.FindServiceByName(service).methods_by_name[method]
    return message_factory.GetMessageClass(found.input_type), message_factory.GetMessageClass(found.output_type)


def test_readme_auth_quick_start_works(tmp_path: Path) -> None:
    """The auth quick start as printed: a token and its hash from `mnemosyne hash-token`, the
    tokens file with that hash, the server started with the flags shown, the client with token=."""
    quick_start = section(README_TEXT, "Auth quick start")
    hash_step, serve_step = code_blocks(quick_start, "sh")
    (tokens_document,) = code_blocks(quick_start, "json")
    (client_code,) = code_blocks(quick_start, "python")
    mnemosyne_command = f"{shlex.quote(sys.executable)} -m mnemosyne.cli"
    assert ".venv/bin/mnemosyne hash-token" in hash_step
    script = hash_step.replace(".venv/bin/mnemosyne", mnemosyne_command).replace(
        "python3 ", f"{shlex.quote(sys.executable)} "
    )
    done = subprocess.run(
        ["bash", "-c", f'set -e\n{script}\necho "$TOKEN"'], capture_output=True, text=True, timeout=60, check=True
    )
    digest, token = done.stdout.split()
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    tokens_file = tmp_path / "tokens.json"
    tokens_file.write_text(tokens_document.replace("<the hash printed above>", digest))
    (serve_line,) = [line for line in serve_step.splitlines() if line.strip()]
    prefix = ".venv/bin/mnemosyne serve "
    assert serve_line.startswith(prefix)
    args = shlex.split(serve_line[len(prefix) :].replace("tokens.json", str(tokens_file)))
    server = ServerProcess(tmp_path / "data", args=args).start()
    try:
        code = client_code.replace("127.0.0.1:50051", server.target)
        out = io.StringIO()
        os.environ["MNEMOSYNE_TOKEN"] = token
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, "README.md auth quick start", "exec"), {"__name__": "readme_example"})
        finally:
            del os.environ["MNEMOSYNE_TOKEN"]
        assert out.getvalue().split() == ["created"]
        with MemoryClient(server.target) as anonymous, pytest.raises(UnauthenticatedError):
            anonymous.recall("acme", "billing")
        with MemoryClient(server.target, token=token) as client, pytest.raises(PermissionDeniedError) as forbidden:
            client.recall("beta", "billing")
        assert forbidden.value.reason == "TENANT_FORBIDDEN"
    finally:
        server.stop()


def test_every_python_example_in_the_docs_runs(target: str, tmp_path, monkeypatch) -> None:
    """Every ```python block of the README and of docs/, against a running server. A page's blocks
    run in order in one namespace (later examples go on from earlier ones), each page in its own
    tenant. The README's auth quick start needs a server with tokens: the test above runs it."""
    # The mem0 client's examples need the mem0ai package, which lives in a venv of its own:
    # tests/test_mem0_api.py runs them there.
    readme = README_TEXT.replace(section(README_TEXT, "Auth quick start"), "").replace(section(README_TEXT, "mem0"), "")
    pages = {README: readme}
    pages.update({path: path.read_text() for path in sorted(DOCS.glob("*.md")) if path.name != "mem0.md"})
    ran = []
    monkeypatch.chdir(tmp_path)  # MemoryBrain("./mem") makes its directory here
    for path, text in pages.items():
        blocks = code_blocks(text, "python")
        if not blocks:
            continue
        tenant = f"docs-{path.stem.lower()}-{uuid.uuid4().hex[:8]}"
        namespace = {"__name__": "docs_example"}
        for number, block in enumerate(blocks):
            code = block.replace("127.0.0.1:50051", target)
            for named in README_TENANTS.values():
                code = code.replace(f'"{named}"', repr(tenant))
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(code, f"{path.relative_to(ROOT)} python block {number}", "exec"), namespace)
        ran.append(path.relative_to(ROOT).as_posix())
    assert {"README.md", "docs/hot-path.md", "docs/host-generations.md", "docs/dedup.md"} <= set(ran), ran


# -- docs/architecture.md ---------------------------------------------------------------------


def _architecture_table() -> dict[str, tuple[str, str]]:
    rows = table_rows(section(ARCHITECTURE.read_text(), "RPC → module that serves it"))
    assert rows[0] == ["RPC", "servicer", "engine"], rows[0]
    table = {}
    for cells in rows[2:]:
        rpc = cells[0].strip("`")
        assert rpc not in table, f"{rpc} appears twice"
        table[rpc] = (cells[1], cells[2])
    return table


def test_every_rpc_is_in_the_architecture_table() -> None:
    table = _architecture_table()
    for service, method in _rpcs():
        rpc = f"{service}.{method}"
        assert rpc in table, f"{rpc} is not in docs/architecture.md's RPC table"
        servicer, engine = table[rpc]
        # The servicer: a module of service/transport/ that defines the method.
        (module,) = re.findall(r"`(transport/[\w/]+\.py)`", servicer)
        source = (SERVICE_ROOT / module).read_text()
        assert re.search(rf"def {method}\(", source), f"{module} does not define {method}"
        # The engine: modules that exist under service/ (or none, for what the servicer answers).
        modules = re.findall(r"`(engine/[\w/]+\.py)`", engine)
        assert modules or engine.startswith("— (answered by the servicer)"), f"{rpc}: no engine module named"
        for name in modules:
            assert (SERVICE_ROOT / name).is_file(), f"{rpc}: {name} does not exist"
    assert set(table) == {f"{s}.{m}" for s, m in _rpcs()}, "the table names an RPC the protos do not have"


def test_every_response_message_is_built_in_the_one_conversion() -> None:
    """The architecture's rule: every RPC's response message is built in transport/convert.py (so
    the in-process MemoryBrain and the server answer alike) or its part for one service kept apart
    for the size of one module (transport/convert_webhooks.py, transport/convert_history.py: the
    revisions' and expiry's); no other module of service/ calls the constructor of a response type
    (the types read from the protos' services)."""
    responses = {
        method.output_type.name
        for module in PROTO_MODULES
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    constructor = re.compile(rf"\b\w+_pb2\.({'|'.join(sorted(responses))})\(")
    built = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted(SERVICE_ROOT.rglob("*.py"))
        if path.parent != SERVICE_ROOT / "transport" or not re.fullmatch(r"convert(_\w+)?\.py", path.name)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if constructor.search(line)
    ]
    assert built == [], "build these responses in transport/convert.py:\n" + "\n".join(built)


# -- the public surface -----------------------------------------------------------------------

CLIENT_METHOD_OF_RPC = {
    "Retain": "retain",
    "RetainBatch": "retain_batch",
    "Recall": "recall",
    "GetMemory": "get_memory",
    "ListMemories": "list_memories",
    "ForgetMemory": "forget",
    "UpdateMemory": "update_memory",
    "ForgetMemories": "forget_memories",
    "ListMemoryVersions": "list_memory_versions",
    "ListMemoryRevisions": "list_memory_revisions",
    "RevertMemory": "revert_memory",
    "GetExpiryPolicy": "get_expiry_policy",
    "SetExpiryPolicy": "set_expiry_policy",
    "ListRecordRevisions": "list_record_revisions",
    "RevertRecord": "revert_record",
    "VerifyIntegrity": "verify_integrity",
    "Stats": "stats",
    "Ping": "ping",
    "Dedup": "dedup",
    "ReembedTenant": "reembed_tenant",
    "ListTenants": "list_tenants",
    "WhoAmI": "whoami",
    "GetTenantFigures": "tenant_figures",
    "ListTenantFigures": "list_tenant_figures",
    "ListScopes": "list_scopes",
    "AggregateStats": "aggregate_stats",
    "EraseTenant": "erase_tenant",
    "Backup": "backup",
    "ExportTenant": "export_tenant",
    "ImportTenant": "import_tenant",
    "MoveTenant": "move_tenant",
    "ActivateTenant": "activate_tenant",
    "ChangeMembers": "change_members",
    "AssembleContext": "assemble_context",
    "UpdateGlobal": "update_global",
    "UpdateWorkspace": "update_workspace",
    "GetRecord": "get_record",
    "ListRecords": "list_records",
    "EditRecords": "edit_records",
    "Consolidate": "consolidate",
    "ConsolidateSession": "consolidate_session",
    "Enable": "hot_path",
    "Disable": "hot_path",
    "Status": "hot_path",
    "Flush": "hot_path",
    "GetEvent": "get_event",
    "ListEvents": "list_events",
    "WatchEvents": "watch_events",
    "CreateWebhook": "create_webhook",
    "ListWebhooks": "list_webhooks",
    "DeleteWebhook": "delete_webhook",
    "RotateWebhookSecret": "rotate_webhook_secret",
    "ResumeWebhook": "resume_webhook",
    "ListWebhookDeliveries": "list_webhook_deliveries",
}


# The Node client's (client/node/src/client.js) method of each RPC.
NODE_METHOD_OF_RPC = {
    "Retain": "retain",
    "RetainBatch": "retainBatch",
    "Recall": "recall",
    "GetMemory": "getMemory",
    "ListMemories": "listMemories",
    "ForgetMemory": "forget",
    "UpdateMemory": "updateMemory",
    "ForgetMemories": "forgetMemories",
    "ListMemoryVersions": "listMemoryVersions",
    "ListMemoryRevisions": "listMemoryRevisions",
    "GetTenantFigures": "tenantFigures",
    "ListTenantFigures": "listTenantFigures",
    "RevertMemory": "revertMemory",
    "GetExpiryPolicy": "getExpiryPolicy",
    "SetExpiryPolicy": "setExpiryPolicy",
    "ListRecordRevisions": "listRecordRevisions",
    "RevertRecord": "revertRecord",
    "VerifyIntegrity": "verifyIntegrity",
    "Stats": "stats",
    "Ping": "ping",
    "Dedup": "dedup",
    "ReembedTenant": "reembedTenant",
    "ListTenants": "listTenants",
    "WhoAmI": "whoAmI",
    "ListScopes": "listScopes",
    "AggregateStats": "aggregateStats",
    "EraseTenant": "eraseTenant",
    "Backup": "backup",
    "ExportTenant": "exportTenant",
    "ImportTenant": "importTenant",
    "MoveTenant": "moveTenant",
    "ActivateTenant": "activateTenant",
    "ChangeMembers": "changeMembers",
    "AssembleContext": "assembleContext",
    "UpdateGlobal": "updateGlobal",
    "UpdateWorkspace": "updateWorkspace",
    "GetRecord": "getRecord",
    "ListRecords": "listRecords",
    "EditRecords": "editRecords",
    "Consolidate": "consolidate",
    "ConsolidateSession": "consolidateSession",
    "Enable": "hotPath",
    "Disable": "hotPath",
    "Status": "hotPath",
    "Flush": "hotPath",
    "GetEvent": "getEvent",
    "ListEvents": "listEvents",
    "WatchEvents": "watchEvents",
    "CreateWebhook": "createWebhook",
    "ListWebhooks": "listWebhooks",
    "DeleteWebhook": "deleteWebhook",
    "RotateWebhookSecret": "rotateWebhookSecret",
    "ResumeWebhook": "resumeWebhook",
    "ListWebhookDeliveries": "listWebhookDeliveries",
}


def _node_client_methods() -> set[str]:
    """The public methods of the Node client's MemoryClient, as Node.js sees them."""
    from tests.node_support import node_package

    listed = subprocess.run(
        [
            "node",
            "-e",
            "const { MemoryClient } = require('./src');"
            "console.log(JSON.stringify(Object.getOwnPropertyNames(MemoryClient.prototype)"
            ".filter((n) => typeof MemoryClient.prototype[n] === 'function' && !n.startsWith('_'))))",
        ],
        cwd=node_package(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    return set(json.loads(listed.stdout))


@pytest.mark.parametrize("client", ["python", "node"])
def test_each_client_has_a_method_for_every_rpc(client: str) -> None:
    """A new RPC fails here until both clients (Python and Node) have a method for it."""
    if client == "python":
        method_of, methods = CLIENT_METHOD_OF_RPC, {n for n in dir(MemoryClient) if callable(getattr(MemoryClient, n))}
    else:
        method_of, methods = NODE_METHOD_OF_RPC, _node_client_methods()
    for module in PROTO_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                name = method_of.get(method.name)
                assert name and name in methods, f"no {client} client method for {method.full_name}"


def test_public_exports_are_complete() -> None:
    for module in (mnemosyne, mnemosyne.client):
        public = {
            name
            for name in vars(module)
            if not name.startswith("_") and not isinstance(getattr(module, name), type(module))
        }
        exported = set(module.__all__)
        assert all(hasattr(module, name) for name in exported)  # some load on first use (PEP 562)
        for name in public - exported - {"annotations"}:
            assert name in {"errors", "types", "memory_client"} or name.startswith("__"), (
                f"{module.__name__}.{name} not in __all__"
            )


def _classes_in(hint: object) -> set[type]:
    """The classes a type hint names, through unions and generics (``list[Hit] | None`` -> Hit)."""
    found = {hint} if isinstance(hint, type) else set()
    for argument in typing.get_args(hint):
        found |= _classes_in(argument)
    return found


def test_every_type_the_client_takes_or_returns_is_exported() -> None:
    """A user imports, from ``mnemosyne.client`` itself, every type a public method of
    MemoryClient, MemoryHost or MemoryBrain takes or returns, and every error it raises."""
    exported = {getattr(mnemosyne.client, name) for name in mnemosyne.client.__all__}
    for cls in (MemoryClient, mnemosyne.client.MemoryHost, mnemosyne.MemoryBrain):
        for name, method in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_"):
                continue
            for hint in typing.get_type_hints(method).values():
                for named in _classes_in(hint):
                    if named.__module__.startswith("mnemosyne.client."):
                        assert named in exported, f"{cls.__name__}.{name} uses {named.__name__}, not in __all__"
    errors = vars(mnemosyne.client.errors).values()
    raised = {e for e in errors if isinstance(e, type) and issubclass(e, mnemosyne.client.MnemosyneClientError)}
    assert raised <= exported, sorted(e.__name__ for e in raised - exported)


# The README's first calls, each on a tenant of its own: whatever ran before on the same server,
# each prints what the README shows (ids count per tenant, generations per scope of a tenant).
README_TENANTS = {
    "Python": "acme",
    "LangGraph": "dunder",
    "Node": "globex",
    "grpcurl": "initech",
    "curl": "umbrella",
    "MCP": "hooli",
    "Session consolidation": "wonka",
}


def test_the_readme_first_calls_print_what_they_show_run_in_order_on_one_server(tmp_path: Path) -> None:
    """The README's examples in the order a reader meets them, on ONE fresh server with the HTTP
    API, each as printed (only the addresses are this server's): Python, the LangGraph store,
    grpcurl, curl, the MCP session, the session consolidation. (Node runs in tests/test_node_package.py and mem0 in
    tests/test_mem0_api.py, each on a fresh server: their tenants are checked distinct here.)"""
    for title, tenant in README_TENANTS.items():
        named = {t for t in README_TENANTS.values() if re.search(rf"\b{t}\b", section(README_TEXT, title))}
        assert named == {tenant}, f"the README's {title} example names the tenants {named}, not only {tenant}"
    server = ServerProcess(tmp_path / "data", http=True).start()
    try:
        _readme_python(server.target)
        _readme_langgraph(server.target)
        _readme_grpcurl(server.target)
        _readme_curl(server.http_port)
        _readme_mcp(server.target)
        _readme_consolidation(server.target)
    finally:
        server.stop()


def _readme_python(target: str) -> None:
    block = code_blocks(section(README_TEXT, "Python"), "python")[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.replace("127.0.0.1:50051", target), "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0] == "created 1"
    assert "RF-88213" in lines[1]
    assert lines[-1] == "True"


def _readme_langgraph(target: str) -> None:
    """The LangGraph store's five lines, going on from the Python example's client."""
    block = code_blocks(section(README_TEXT, "LangGraph"), "python")[0]
    assert len(block.strip().splitlines()) == 5
    out = io.StringIO()
    with contextlib.redirect_stdout(out), MemoryClient(target) as client:
        exec(compile(block, "README.md", "exec"), {"client": client})
    assert out.getvalue() == "{'likes': 'margherita pizza'}\n"


def _readme_grpcurl(target: str) -> None:
    """Each grpcurl line of the README, done the way grpcurl does it: the method and its message
    types from the server's reflection service, the request from the -d JSON."""
    grpcurl = section(README_TEXT, "grpcurl")
    (block,) = code_blocks(grpcurl, "sh")
    commands = [shlex.split(line) for line in block.splitlines() if line.strip()]
    assert len(commands) == 4
    answers: dict[str, dict[str, Any]] = {}
    with grpc.insecure_channel(target) as channel:
        for argv in commands:
            assert argv[0] == "grpcurl" and argv[1] == "-plaintext" and "127.0.0.1:50051" in argv, argv
            address = argv.index("127.0.0.1:50051")
            what = argv[address + 1 :]
            if what == ["list"]:
                pool = ProtoReflectionDescriptorDatabase(channel)
                listed = set(pool.get_services())
                assert {f"mnemosyne.v1.{s}" for s, _ in _rpcs()} | {"grpc.health.v1.Health"} <= listed
                continue
            (full_method,) = what
            request_class, response_class = _reflected(channel, full_method)
            data = argv[argv.index("-d") + 1] if "-d" in argv else "{}"
            request = json_format.Parse(data, request_class())
            call: grpc.UnaryUnaryMultiCallable[Message, Message] = channel.unary_unary(
                f"/{full_method}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=response_class.FromString,
            )
            answers[full_method] = json_format.MessageToDict(call(request, timeout=10))
    (printed,) = re.findall(r"Retain answers `([^`]*)`", grpcurl)
    retained, shown = answers["mnemosyne.v1.MemoryService/Retain"], json.loads(printed)
    assert retained.pop("consistencyToken") and shown.pop("consistencyToken")  # a token: its value varies
    assert retained == shown
    hits = answers["mnemosyne.v1.MemoryService/Recall"]["hits"]
    assert "RF-88213" in hits[0]["memory"]["text"]
    assert answers["grpc.health.v1.Health/Check"] == {"status": "SERVING"}


def _readme_curl(http_port: int) -> None:
    """Each curl line of the README, run by curl itself (its port in place of the printed 8080)."""
    (block,) = code_blocks(section(README_TEXT, "curl"), "sh")
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) == 3 and all(line.startswith("curl -s ") for line in lines)
    answers = []
    for line in lines:
        argv = shlex.split(line.replace("127.0.0.1:8080", f"127.0.0.1:{http_port}"))
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
        answers.append(json.loads(result.stdout))
    assert answers[0].pop("consistencyToken") and answers[0] == {"result": {"status": "CREATED", "memoryId": "1"}}
    assert "INV-7" in answers[1]["hits"][0]["memory"]["text"]
    assert [m["id"] for m in answers[2]["memories"]] == ["1"]


def _readme_mcp(target: str) -> None:
    """The README's Claude Desktop entry, launched as a desktop agent would (its command from the
    repository's .venv, this server as target), and its transcript replayed through the MCP SDK's
    client: each answer starts as printed."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    mcp = section(README_TEXT, "MCP")
    (config,) = code_blocks(mcp, "json")
    (transcript,) = code_blocks(mcp, "text")
    entry = json.loads(config)["mcpServers"]["memory"]
    assert entry["command"] == ".venv/bin/mnemosyne"
    args = [a.replace("127.0.0.1:50051", target) for a in entry["args"]]
    steps = []
    for line in transcript.splitlines():
        call, _, answer = line.partition("->")
        name, _, arguments = call.strip().partition(" ")
        steps.append((name, json.loads(arguments), answer.strip().split(" ...")[0]))
    assert [s[0] for s in steps] == ["read_memory", "memory_update", "retain", "recall"]

    async def replay() -> None:
        server = StdioServerParameters(command=sys.executable, args=["-m", "mnemosyne.cli", *args])
        async with Client(server) as client:
            for name, arguments, answer in steps:
                result = await client.call_tool(name, arguments)
                text = "\n".join(getattr(part, "text", "") for part in result.content)
                assert not result.is_error and text.startswith(answer), (name, text)

    anyio.run(replay)


def _readme_consolidation(target: str) -> None:
    """The README's session of three turns, then its consolidate command: it prints what the README
    shows, and the Global MEMORY.md reads as docs/consolidation.md shows it (the same turns)."""
    consolidation = section(README_TEXT, "Session consolidation")
    (turns,) = code_blocks(consolidation, "python")
    (shown,) = code_blocks(consolidation, "text")
    exec(compile(turns.replace("127.0.0.1:50051", target), "README.md consolidation", "exec"), {})
    command, *expected = shown.splitlines()
    argv = shlex.split(command.replace("127.0.0.1:50051", target))
    assert argv[0] == ".venv/bin/mnemosyne"
    ran = subprocess.run([*SERVE, *argv[1:]], capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout.splitlines()) == (0, expected), ran.stderr
    page = (DOCS / "consolidation.md").read_text()
    record = next(b for b in code_blocks(page, "text") if b.startswith("## Session"))
    with MemoryClient(target) as client:
        content = client.get_record(README_TENANTS["Session consolidation"], "global", "MEMORY.md")[0].content
    assert content == record.rstrip("\n") + "\n"
