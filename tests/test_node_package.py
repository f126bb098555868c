"""The Node package as its users get it: ``npm pack`` in client/node, the tarball installed into an
empty folder outside the repository (with ``--engine-strict``, so a dependency that excludes the
running Node fails the install), and scripts there that ``require`` it by its name, against a real
server: one that uses every service it adds to the host protocol, and the README's Node example
exactly as printed.

Outside the repository the package can only work with the protos it carries: from its installed
location the repository's ``protos/`` is not reachable. Skips only when node/npm are missing (a
failure under MNEMOSYNE_NO_SKIP=1, as in CI); the npm cache that ``npm ci`` filled serves the
install (``--prefer-offline``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs_support import code_blocks, section
from tests.node_support import NODE_PACKAGE, node_package
from tests.support import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_NAME = "@mnemosyne/node-host"
NPM_FLAGS = ["--prefer-offline", "--no-audit", "--no-fund"]

# retain -> recall -> hot path enable -> fast retain -> flush -> getEvent -> listEvents, with the
# package required by its name; prints one JSON line.
CONSUMER = r"""
'use strict';
const path = require('node:path');
const { MemoryClient } = require('@mnemosyne/node-host');
const { PROTO_ROOT } = require('@mnemosyne/node-host/src/protos');

async function main() {
  const client = new MemoryClient(process.argv[2]);
  const tenant = 'packaged';
  try {
    const retained = await client.retain(tenant, 'The customer requested a refund, ticket number RF-88213');
    const hits = await client.recall(tenant, 'refund ticket', { k: 1 });
    const enabled = await client.hotPath(tenant, 'enable');
    const queued = await client.retain(tenant, 'Invoice INV-4242 was paid by wire transfer', { fast: true });
    const flushed = await client.hotPath(tenant, 'flush', { timeoutSeconds: 20 });
    const event = await client.getEvent(tenant, queued.eventId);
    const page = await client.listEvents(tenant);
    const fastHits = await client.recall(tenant, 'INV-4242', { k: 1 });
    process.stdout.write(`${JSON.stringify({
      resolved: require.resolve('@mnemosyne/node-host'),
      protoRoot: PROTO_ROOT,
      retained,
      recalled: hits.map((h) => h.memory.id),
      enabled: enabled.enabled,
      queued,
      flushed,
      event: { eventId: event.eventId, status: event.status, createdMemoryIds: event.createdMemoryIds },
      listed: page.events.map((e) => [e.eventId, e.status]),
      fastRecalled: fastHits.map((h) => h.memory.id),
    })}\n`);
  } finally {
    client.close();
  }
}

main().catch((err) => { console.error(err); process.exitCode = 1; });
"""


def _run(command: list[str], cwd: Path, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert result.returncode == 0, (
        f"{' '.join(command)} failed in {cwd}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def outside() -> Iterator[Path]:
    """An empty folder under the OS temp dir, never inside the repository."""
    folder = Path(tempfile.mkdtemp(prefix="mnemosyne-node-package-")).resolve()
    assert not folder.is_relative_to(ROOT), f"{folder} is inside the repository"
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def tarball(outside: Path) -> Path:
    package = node_package()
    npm = shutil.which("npm")
    assert npm is not None
    packed = json.loads(_run([npm, "pack", "--json", "--pack-destination", str(outside), *NPM_FLAGS], cwd=package))
    path: Path = outside / packed[0]["filename"]
    assert path.is_file(), packed
    return path


@pytest.fixture(scope="module")
def app(outside: Path, tarball: Path) -> Path:
    """A folder with only package.json and the installed tarball (as the README's steps make it)."""
    folder = outside / "my-agent"
    folder.mkdir()
    npm = shutil.which("npm")
    assert npm is not None
    _run([npm, "init", "-y"], cwd=folder)
    _run([npm, "install", "--engine-strict", *NPM_FLAGS, str(tarball)], cwd=folder, timeout=300)
    return folder


@pytest.fixture(scope="module")
def package_server(outside: Path) -> Iterator[ServerProcess]:
    # python -m mnemosyne.cli serve --port 0; start() reads the port from its first stdout line.
    server = ServerProcess(outside / "data").start()
    yield server
    server.stop()


def test_the_tarball_holds_exactly_the_code_the_types_and_the_protos(tarball: Path) -> None:
    with tarfile.open(tarball) as archive:
        names = sorted(archive.getnames())
    protos = sorted(
        f"package/protos/{p.relative_to(ROOT / 'protos')}" for p in (ROOT / "protos" / "mnemosyne").rglob("*.proto")
    )
    sources = sorted(f"package/src/{p.name}" for p in (NODE_PACKAGE / "src").iterdir())
    assert len(protos) >= 6 and "package/src/index.d.ts" in sources
    assert names == sorted(["package/package.json", *protos, *sources])
    # The copy exists only while packing (postpack removes it), so the repository never reads a stale one.
    assert not (NODE_PACKAGE / "protos").exists()


def test_the_installed_tarball_works_outside_the_repository(app: Path, package_server: ServerProcess) -> None:
    (app / "consumer.js").write_text(CONSUMER)
    out = json.loads(_run(["node", "consumer.js", package_server.target], cwd=app, timeout=60).splitlines()[-1])
    installed = app / "node_modules" / "@mnemosyne" / "node-host"
    assert Path(out["resolved"]) == installed / "src" / "index.js"
    assert Path(out["protoRoot"]) == installed / "protos"  # the protos it carries, not the repository's
    assert out["retained"]["status"] == "created"
    assert out["recalled"] == [out["retained"]["memoryId"]]
    assert out["enabled"] is True
    assert out["queued"]["status"] == "enqueued" and int(out["queued"]["eventId"]) > 0
    assert out["flushed"]["failed"] == 0 and out["flushed"]["failedEventIds"] == []
    assert out["event"]["eventId"] == out["queued"]["eventId"] and out["event"]["status"] == "succeeded"
    assert len(out["event"]["createdMemoryIds"]) == 1
    assert out["listed"] == [[out["queued"]["eventId"], "succeeded"]]
    assert out["fastRecalled"] == out["event"]["createdMemoryIds"]


def _node_section() -> str:
    """The README's first calls from Node: its install step and its example."""
    return section((ROOT / "README.md").read_text(), "Node")


def test_the_readme_node_example_runs_as_printed(app: Path, tarball: Path, package_server: ServerProcess) -> None:
    node = _node_section()
    (install,) = code_blocks(node, "sh")
    (example,) = code_blocks(node, "js")
    # The install step is the one this test's fixtures take: npm ci, npm pack, the tarball of this
    # version installed into a fresh package.
    for step in ("npm ci", "npm pack", "npm init -y", 'npm install "$TARBALL"', f"client/node/{tarball.name}"):
        assert step in install, f"the README's install step lacks {step!r}:\n{install}"
    assert f"require('{PACKAGE_NAME}')" in example
    (app / "agent.js").write_text(example)
    env = {**os.environ, "MNEMOSYNE_TARGET": package_server.target}
    env.pop("MNEMOSYNE_TOKEN", None)
    lines = _run(["node", "agent.js"], cwd=app, timeout=60, env=env).splitlines()
    assert lines[0] == "The customer requested a refund, ticket number RF-88213"
    assert lines[1] == "{ ok: true, result: 'MEMORY.md was replaced.' }"
    assert lines[-1] == "succeeded"
