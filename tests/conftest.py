"""Test fixtures: real servers on loopback ports, real files under tmp_path.

``server`` is one server process for the session (tests isolate themselves with the ``tenant``
fixture's unique tenant ids); ``server_factory`` starts private server processes for tests that
kill or restart them. Set MNEMOSYNE_TEST_TARGET=host:port to run the shared-server tests against
an external server instead. With MNEMOSYNE_NO_SKIP=1 (CI) a skip fails the run (tests/no_skip.py);
``--durations`` also lists the slowest files (tests/file_durations.py).

Every server and in-process ``MemoryBrain`` a test starts gets the hashing embedder
(``hashing_embedder``: MNEMOSYNE_EMBEDDER=hashing for the session), so no test loads the default
sentence model unless it tests meaning: such a test asks for it by name (``--embedder minilm``,
``env={"MNEMOSYNE_EMBEDDER": "minilm"}``, ``EngineConfig(embedder="minilm")``).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from tests.replica_support import ObjectStorage
from tests.support import ServerFactory, ServerProcess, stop_all

pytest_plugins = ("tests.no_skip", "tests.file_durations")


@pytest.fixture(scope="session", autouse=True)
def hashing_embedder() -> Iterator[None]:
    """MNEMOSYNE_EMBEDDER=hashing in this process, for the session: the servers the tests start
    inherit it, and MemoryBrain in process reads it (autouse and session-scoped, it is set before
    any other session fixture starts a server)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MNEMOSYNE_EMBEDDER", "hashing")
        yield


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess | str]:
    external = os.environ.get("MNEMOSYNE_TEST_TARGET")
    if external:
        yield external
        return
    process = ServerProcess(tmp_path_factory.mktemp("shared-server"))
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def object_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStorage]:
    """SeaweedFS's S3 server for the session's replication tests (tests/replica_support.py)."""
    storage = ObjectStorage(tmp_path_factory.mktemp("object-storage")).start()
    yield storage
    storage.stop()


@pytest.fixture(scope="session")
def target(server: ServerProcess | str) -> str:
    return server if isinstance(server, str) else server.target


@pytest.fixture(scope="session")
def client(target: str) -> Iterator[MemoryClient]:
    with MemoryClient(target) as c:
        yield c


_counter = itertools.count()


@pytest.fixture
def tenant() -> str:
    """A tenant id no other test uses."""
    return f"t{next(_counter)}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    """An engine in this process on files under ``tmp_path / "data"``, with the hashing embedder
    (the environment's MNEMOSYNE_EMBEDDER is read by servers and MemoryBrain, not by the engine)."""
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", embedder="hashing"))
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[ServerFactory]:
    started: list[ServerProcess] = []

    def make(data_dir: Path | None = None, **kwargs: Any) -> ServerProcess:
        process = ServerProcess(data_dir or tmp_path / f"data{len(started)}", **kwargs)
        started.append(process)
        return process

    yield make
    stop_all(started)
