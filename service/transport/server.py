"""Building and running the gRPC server: ``create_server(config) -> RunningServer``."""

from __future__ import annotations

import logging
import os
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from mnemosyne.engine.engine import Engine, EngineConfig
from mnemosyne.engine.limits import Limits
from mnemosyne.errors import FailedPrecondition
from mnemosyne.transport.auth import TokenAuthenticator
from mnemosyne.transport.edge import EdgeInterceptor
from mnemosyne.transport.hot_path_servicers import EventsServicer, HotPathServicer
from mnemosyne.transport.servicers import AdminServicer, MemoryServicer
from mnemosyne.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    events_pb2,
    events_pb2_grpc,
    hot_path_pb2,
    hot_path_pb2_grpc,
    memory_pb2,
    memory_pb2_grpc,
    workspace_pb2,
    workspace_pb2_grpc,
)

log = logging.getLogger("mnemosyne.server")

SERVICE_NAMES = [
    memory_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name,
    workspace_pb2.DESCRIPTOR.services_by_name["WorkspaceService"].full_name,
    hot_path_pb2.DESCRIPTOR.services_by_name["HotPathService"].full_name,
    events_pb2.DESCRIPTOR.services_by_name["EventsService"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
]
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 50051
    tokens_file: Path | None = None
    tokens_json: str | None = None
    allow_unauthenticated: bool = False
    max_open_tenants: int = 1024
    grace_seconds: float = 20.0
    max_workers: int = 32
    max_message_bytes: int = 16 * 1024 * 1024
    synchronous: str = "FULL"
    limits: Limits = field(default_factory=Limits)
    store_faults: frozenset[str] = frozenset()
    crash_after_commit: frozenset[str] = frozenset()
    near_duplicate_threshold: float = 0.85
    hot_path_workers: int = 2
    hot_path_batch: int = 16
    test_hold_workers_file: Path | None = None
    test_poison_marker: str = ""


@dataclass
class RunningServer:
    server: grpc.Server
    port: int
    engine: Engine
    health: health.HealthServicer
    grace_seconds: float

    def stop(self) -> None:
        """Graceful stop: NOT_SERVING first, then drain in-flight calls, then close the files."""
        self.health.enter_graceful_shutdown()
        self.engine.hot_path.end_streams()  # open WatchEvents streams end; clients resume by sequence
        self.server.stop(self.grace_seconds).wait()
        self.engine.close()
        log.info("stopped")


def _authenticator(config: ServerConfig) -> TokenAuthenticator | None:
    if config.tokens_file is not None:
        return TokenAuthenticator.from_file(config.tokens_file)
    if config.tokens_json:
        return TokenAuthenticator.from_json(config.tokens_json, source="MNEMOSYNE_TOKENS")
    if config.host not in LOOPBACK_HOSTS and not config.allow_unauthenticated:
        raise FailedPrecondition(
            f"refusing to serve {config.host} without authentication: give --tokens-file (or "
            "MNEMOSYNE_TOKENS), bind a loopback host, or set MNEMOSYNE_ALLOW_UNAUTHENTICATED=1",
            reason="AUTH_REQUIRED",
        )
    log.warning("no tokens configured: serving WITHOUT authentication on %s", config.host)
    return None


def create_server(config: ServerConfig) -> RunningServer:
    authenticator = _authenticator(config)
    engine = Engine(
        EngineConfig(
            data_dir=config.data_dir,
            max_open_tenants=config.max_open_tenants,
            synchronous=config.synchronous,
            limits=config.limits,
            store_faults=config.store_faults,
            crash_after_commit=config.crash_after_commit,
            near_duplicate_threshold=config.near_duplicate_threshold,
            hot_path_workers=config.hot_path_workers,
            hot_path_batch=config.hot_path_batch,
            test_hold_workers_file=config.test_hold_workers_file,
            test_poison_marker=config.test_poison_marker,
        )
    )
    try:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=config.max_workers, thread_name_prefix="rpc"),
            interceptors=[EdgeInterceptor(authenticator)],
            options=[
                ("grpc.max_receive_message_length", config.max_message_bytes),
                ("grpc.max_send_message_length", config.max_message_bytes),
                ("grpc.so_reuseport", 0),
            ],
        )
        memory_pb2_grpc.add_MemoryServiceServicer_to_server(MemoryServicer(engine), server)
        admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(engine), server)
        # Declared services whose issues have not landed answer UNIMPLEMENTED.
        workspace_pb2_grpc.add_WorkspaceServiceServicer_to_server(workspace_pb2_grpc.WorkspaceServiceServicer(), server)
        hot_path_pb2_grpc.add_HotPathServiceServicer_to_server(HotPathServicer(engine), server)
        events_pb2_grpc.add_EventsServiceServicer_to_server(EventsServicer(engine), server)

        health_servicer = health.HealthServicer(experimental_non_blocking=True)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        for name in ["", *SERVICE_NAMES]:
            health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        reflection.enable_server_reflection([*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME], server)

        address = f"[{config.host}]:{config.port}" if ":" in config.host and not config.host.startswith("[") else f"{config.host}:{config.port}"
        port = server.add_insecure_port(address)
        if port == 0:
            raise FailedPrecondition(f"cannot listen on {address}: is the port in use?", reason="LISTEN_FAILED")
        server.start()
    except BaseException:
        engine.close()
        raise
    log.info("listening on %s:%d (pid %d, data %s)", config.host, port, os.getpid(), config.data_dir)
    return RunningServer(server, port, engine, health_servicer, config.grace_seconds)
