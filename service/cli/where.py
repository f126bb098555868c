"""Where a started server is: what ``mnemosyne serve`` tells the person who started it, beside the
one JSON line machines read on stdout (``{"event": "serving", ...}``).

As text, a block on stderr a person reads at a glance; with ``--log-format json`` (where every
line on stderr is one JSON object) the same entries as one log record."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from mnemosyne.transport.config import ServerConfig
from mnemosyne.transport.http.paths import CONSOLE_PATH, DOCS_PATH, MCP_PATH, OPENAPI_PATH
from mnemosyne.transport.server import RunningServer
from mnemosyne.version import VERSION

_WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]")


def entries(config: ServerConfig, running: RunningServer, *, traces: str) -> dict[str, str]:
    """What is served where, one entry a line, in the order a person looks for them."""
    tls = config.tls_cert is not None
    found = {
        "gRPC": f"{_address(config.host, running.port)} ({_security(config)})",
    }
    if running.http_port:
        base = _url("https" if tls else "http", config.http_host or config.host, running.http_port)
        found["HTTP/JSON"] = f"{base}/v1/... (reference {base}{DOCS_PATH}/, OpenAPI {base}{OPENAPI_PATH})"
        found["console"] = f"{base}{CONSOLE_PATH}/"
        found["MCP (HTTP)"] = f"{base}{MCP_PATH}?tenant=TENANT"
    else:
        found["HTTP/JSON"] = "off (--http-port 0): no JSON API, console, MCP or mem0 paths"
    if running.metrics_port:
        side = _url("http", config.metrics_host or config.host, running.metrics_port)
        found["metrics"] = f"{side}/metrics (health {side}/healthz, {side}/readyz)"
    else:
        found["metrics"] = "off (--metrics-port 0)"
    found["data"] = str(Path(config.engine.data_dir).resolve())
    found["tokens"] = _tokens(running)
    found["traces"] = traces
    membership = config.engine.membership
    if membership is not None:
        found["members"] = f"{membership.me} of {len(membership.ids)} ({membership.describe()})"
    return found


def announce(config: ServerConfig, running: RunningServer, *, log_format: str, traces: str) -> None:
    """Tell the person who started the server where everything is (stderr); ``traces``: where its
    trace spans go."""
    found = entries(config, running, traces=traces)
    if log_format == "json":
        logging.getLogger("mnemosyne.server").info("serving", extra={"serving": found})
        return
    width = max(len(label) for label in found)
    lines = [f"Mnemosyne {VERSION} serving (pid {os.getpid()}); stop with Ctrl-C or SIGTERM"]
    lines += [f"  {label.ljust(width)}  {value}" for label, value in found.items()]
    print("\n".join(lines), file=sys.stderr, flush=True)


def _security(config: ServerConfig) -> str:
    if config.tls_client_ca is not None:
        return "mutual TLS"
    return "TLS" if config.tls_cert is not None else "plaintext"


def _tokens(running: RunningServer) -> str:
    if running.authenticator is None:
        return "none: anyone who reaches these ports may read and write every tenant"
    principals = running.authenticator.principals
    admins = sorted(p.name for p in principals if p.is_admin)
    return f"{len(principals)} (admin, every tenant: {', '.join(admins) or 'none'})"


def _address(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    every = " on every interface" if host in _WILDCARD_HOSTS else ""
    return f"{shown}:{port}{every}"


def _url(scheme: str, host: str, port: int) -> str:
    """The URL a person on this machine opens: a wildcard bind is reached at localhost."""
    if host in _WILDCARD_HOSTS:
        host = "localhost"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"
