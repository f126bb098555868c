"""``mnemosyne serve``: its flags, generated from the server's configuration (transport/config.py and
the classes it nests) and from ``ServeSettings`` below (cli/flags.py); the configuration they make;
the server, run until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemosyne.cli.flags import add_flags, configured, variables_only
from mnemosyne.engine.chat_api import RANGES as LLM_RANGES
from mnemosyne.engine.chat_api import LLMSettings
from mnemosyne.engine.options import option
from mnemosyne.engine.targets import check_member_addresses
from mnemosyne.errors import FailedPrecondition, InvalidArgument
from mnemosyne.runtime import tracing
from mnemosyne.runtime.interpreter import exit_without_teardown, raise_open_file_limit
from mnemosyne.runtime.seams import Seams
from mnemosyne.store.membership import member_list_text

if TYPE_CHECKING:
    from mnemosyne.engine.extractor import Extractor
    from mnemosyne.observability.otel import OtelTracer
    from mnemosyne.store.membership import Membership
    from mnemosyne.transport.config import ServerConfig


def _model_setting(help: str, default_of: str = "", **how: Any) -> Any:
    """A setting of the openai extractor's model: its MNEMOSYNE_LLM_ variable is read by the
    extractor (engine/llm_extractor.py), so a mistake in it matters only when that is chosen."""
    field = LLMSettings.__dataclass_fields__.get(default_of)
    unset = "none" if field is None else f"{field.default:g}"
    if default_of in LLM_RANGES:  # the variable's range, so a flag is never refused by its variable's name
        how["minimum"], how["maximum"] = LLM_RANGES[default_of]
    return option(None, help, parser_reads_variable=False, unset=unset, **how)


@dataclass(frozen=True)
class ServeSettings:
    """What ``serve`` reads besides the server's configuration: how the process logs, the
    extractor it makes and the member list it parses."""

    log_format: str = option("text", "stderr log lines as text or JSON (one object per line)", choices=("text", "json"))
    log_level: str = option(
        "INFO",
        "the least severe log lines written (debug adds one access line per successful call)",
        choices=("debug", "info", "warning", "error"),
    )
    extractor: str = option(
        "rules",
        "facts/triples extractor: rules (offline) or openai (an OpenAI-compatible chat API)",
        choices=("rules", "openai"),
    )
    # The model's key is read from MNEMOSYNE_LLM_API_KEY only, never a flag: the process list shows flags.
    llm_base_url: str | None = _model_setting("chat API base incl. version, e.g. https://api.openai.com/v1")
    llm_model: str | None = _model_setting("model name")
    llm_timeout: float | None = _model_setting("seconds per model call attempt", "timeout")
    llm_retries: int | None = _model_setting("retries on timeout/429/5xx (0: none)", "retries")
    llm_concurrency: int | None = _model_setting(
        "threads extracting the items of multi-item writes, shared by the server", "concurrency"
    )
    llm_fallback: str | None = _model_setting(
        "on a failed model call use the rules extractor instead of failing the write", choices=("rules", "none")
    )
    member: str | None = option(None, "this server's id in --members (docs/scale-out.md)")
    members: str | None = option(
        None,
        "every member as ID=HOST:PORT,... (or @FILE); each tenant is owned by one",
        unset="one server holds all",
    )
    previous_members: str | None = option(
        None,
        "during a rebalance: the member list before it (or @FILE); a tenant with no file on this member "
        "is where that list's owner is until it is moved (docs/scale-out.md#moving-tenants)",
    )
    ownership_epoch: int = option(
        1, "the ownership epoch new and adopted tenant files are held at (a move raises a tenant's own)", minimum=1
    )
    trace_tenant_ids: bool = option(
        False,
        "put each call's tenant id on its trace span (traces are on when the OTEL_* variables name an "
        "exporter: docs/operations.md#traces); off, no span names a tenant",
    )


_MORE_VARIABLES = f"""\
  MNEMOSYNE_LLM_API_KEY: the openai extractor's bearer key (a variable, so never in the process list)
  MNEMOSYNE_LLM_BACKOFF: its first backoff in seconds (default: {LLMSettings.backoff:g})"""


def add_serve_command(commands: argparse._SubParsersAction[argparse.ArgumentParser], flags: bool = True) -> None:
    """The ``serve`` command; its flags only with ``flags``: their defaults load the engine (numpy,
    APSW, the index), which a client command's run need not wait for."""
    serve = commands.add_parser(
        "serve",
        help="run the gRPC server",
        description="Every flag can also be set by its environment variable MNEMOSYNE_<FLAG> (the flag wins).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if not flags:
        return
    # The configuration loads the engine (numpy): imported once main has tuned the interpreter.
    from mnemosyne.engine.config import (
        ConsolidationConfig,
        EngineConfig,
        HotPathConfig,
        ReplicationConfig,
        WebhookConfig,
    )
    from mnemosyne.engine.limits import Limits
    from mnemosyne.transport.admission import AdmissionLimits
    from mnemosyne.transport.config import ServerConfig

    serve.epilog = "\n".join(
        ["variables without a flag:", *variables_only(ServerConfig), *variables_only(ServeSettings), _MORE_VARIABLES]
    )
    titles: dict[type, str] = {
        ServerConfig: "serving",
        EngineConfig: "storage",
        ServeSettings: "logs, extractor and members",
        HotPathConfig: "hot path (asynchronous writes)",
        WebhookConfig: "webhooks (docs/webhooks.md)",
        ConsolidationConfig: "background consolidation",
        ReplicationConfig: "replication to object storage (docs/replication.md)",
        AdmissionLimits: "threads and admission (RESOURCE_EXHAUSTED past a limit)",
        Limits: "limits of a request (INVALID_ARGUMENT past them) and quotas",
    }
    add_flags(serve, [ServerConfig, ServeSettings], titles)
    serve.set_defaults(run=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    from mnemosyne.observability import logs

    settings = configured(ServeSettings, args)
    logs.configure(settings.log_format, settings.log_level)
    seams = Seams.from_environment()  # a test's; None in production
    if seams is not None and seams.open_files is not None:  # start as under `ulimit -n`
        resource.setrlimit(resource.RLIMIT_NOFILE, seams.open_files)
    soft, hard = raise_open_file_limit()
    logging.getLogger("mnemosyne.server").info("open-file limit: %s (hard limit %s)", soft, hard)
    config = server_config(args, settings)
    tracer = _tracer(settings)
    try:
        stopped = asyncio.run(_run_server(config, settings, seams))
    finally:
        if tracer is not None:
            tracer.shutdown()  # the spans still batched are exported
    if stopped == 0:  # everything it opened is closed: the process ends without unloading its modules
        exit_without_teardown()
    return stopped


def _tracer(settings: ServeSettings) -> OtelTracer | None:
    """Traces, when the standard OTEL_* variables ask for them (runtime/tracing.py)."""
    if not tracing.configured():
        return None
    try:
        from mnemosyne.observability.otel import tracer_from_environment
    except ImportError as exc:
        raise FailedPrecondition(
            f"the OTEL_* variables ask for traces, but OpenTelemetry's SDK is not installed ({exc.name}): "
            "pip install 'mnemosyne-memory-service[otel]', or unset them",
            reason="CONFIG_INVALID",
        ) from None
    tracer = tracer_from_environment(tenant_ids=settings.trace_tenant_ids, member=settings.member)
    tracing.install(tracer)
    return tracer


def server_config(args: argparse.Namespace, settings: ServeSettings) -> ServerConfig:
    """The server's configuration from serve's parsed flags and the variables."""
    from mnemosyne.engine.config import EngineConfig
    from mnemosyne.transport.config import ServerConfig

    engine = configured(EngineConfig, args, membership=_membership(settings))
    return configured(ServerConfig, args, engine=engine, extractor=_extractor(settings))


def _extractor(settings: ServeSettings) -> Extractor:
    from mnemosyne.engine.llm_extractor import extractor_from_settings

    return extractor_from_settings(
        settings.extractor,
        base_url=settings.llm_base_url,
        model=settings.llm_model,
        timeout=settings.llm_timeout,
        retries=settings.llm_retries,
        concurrency=settings.llm_concurrency,
        fallback=settings.llm_fallback,
    )


def _membership(settings: ServeSettings) -> Membership | None:
    """The member list of --members (``@FILE``: read from a file), or None without one."""
    from mnemosyne.store.membership import Membership

    listed = member_list_text(settings.members or "", "--members")
    if not listed.strip():
        if settings.member:
            raise InvalidArgument(
                "--member needs --members (the whole member list, this member included)", reason="CONFIG_INVALID"
            )
        return None
    if not settings.member:
        raise InvalidArgument("--members needs --member (the id of this member in the list)", reason="CONFIG_INVALID")
    previous = member_list_text(settings.previous_members or "", "--previous-members")
    membership = Membership.parse(settings.member, listed, epoch=settings.ownership_epoch, previous=previous)
    check_member_addresses(membership.addresses, "--members")  # what every member dials
    return membership


async def _run_server(config: ServerConfig, settings: ServeSettings, seams: Seams | None) -> int:
    from mnemosyne.cli.where import announce
    from mnemosyne.transport.server import start_server

    if config.http_port:  # the HTTP stack (MCP's SDK above all) is loaded only to be served
        from mnemosyne.transport.http.surface import HttpSurface

        running = await start_server(config, http_surface=HttpSurface, seams=seams)
    else:
        running = await start_server(config, seams=seams)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # A machine-readable line that tests and supervisors can wait for.
    print(
        json.dumps(
            {
                "event": "serving",
                "port": running.port,
                "metrics_port": running.metrics_port,
                "http_port": running.http_port,
                "pid": os.getpid(),
            }
        ),
        flush=True,
    )
    traces = _traces(settings)
    announce(config, running, log_format=settings.log_format, traces=traces)  # and where, for a person
    await stop.wait()
    logging.getLogger("mnemosyne.server").info("stopping: draining for up to %.0fs", config.grace_seconds)
    await running.stop()
    return 0


def _traces(settings: ServeSettings) -> str:
    """Where the traces go, in a few words."""
    if not tracing.enabled():
        return "off (no OTEL_* variable names an exporter)"
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    ids = "with" if settings.trace_tenant_ids else "without"
    return f"OTLP to {endpoint or 'the default endpoint'}, {ids} tenant ids"
