"""What `mnemosyne serve` tells the person who started it (cli/where.py): beside the one JSON line
on stdout that machines read, one block on stderr that says where everything is (gRPC, the
HTTP/JSON API and its reference, the console, MCP over HTTP, metrics and health, the data
directory, tokens or none); the same entries as one JSON record with --log-format json; and
--log-level, whose word is checked whether it comes from the flag or its variable."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from mnemosyne.client import MemoryClient
from tests.support import ServerFactory, ServerProcess, tokens_json, wait_until

ADMIN = "start-admin-token-0d4e"
USER = "start-user-token-81aa"


def _stderr(server: ServerProcess) -> str:
    server.stop()  # everything it had to say is written
    return server.stderr_path.read_text()


def _block(text: str) -> dict[str, str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Mnemosyne ") and " serving (pid " in line)
    entries = {}
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        label, value = line.strip().split("  ", 1)
        entries[label] = value.strip()
    return entries


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        return int(response.status)


def test_the_start_says_where_everything_is(server_factory: ServerFactory, tmp_path: Path) -> None:
    tokens = tokens_json({ADMIN: ["*"], USER: ["acme"]})
    server = server_factory(tmp_path / "here", http=True, metrics=True, env={"MNEMOSYNE_TOKENS": tokens}).start()
    http, side = server.http_url, server.metrics_url
    wait_until(lambda: "  tokens " in server.stderr_path.read_text())
    said = _block(server.stderr_path.read_text())
    # Each place it names answers there.
    with MemoryClient(said["gRPC"].split(" ")[0], ADMIN) as client:
        client.ping()
    urls = re.findall(r"https?://[^\s,)]+", " ".join(said.values()))
    assert len(urls) == 8
    for url in urls:
        if "/mcp?" not in url and not url.endswith("/v1/..."):
            assert _get(url) == 200, url
    assert said["gRPC"] == f"{server.target} (plaintext)"
    assert said["HTTP/JSON"] == f"{http}/v1/... (reference {http}/docs/, OpenAPI {http}/openapi.json)"
    assert said["console"] == f"{http}/console/"
    assert said["MCP (HTTP)"] == f"{http}/mcp?tenant=TENANT"
    assert said["metrics"] == f"{side}/metrics (health {side}/healthz, {side}/readyz)"
    assert said["data"] == str((tmp_path / "here").resolve())
    assert said["tokens"].startswith("2 (admin, every tenant: ")
    server.stop()


def test_with_json_logs_the_block_is_one_record_and_debug_logs_each_call(server_factory: ServerFactory) -> None:
    server = server_factory(http=True, args=["--log-format", "json"], env={"MNEMOSYNE_LOG_LEVEL": "debug"}).start()
    with MemoryClient(server.target) as client:
        client.retain("acme", "a call logged at debug")
    assert server.process is not None and server.process.stdout is not None
    records = [json.loads(line) for line in _stderr(server).splitlines()]  # every line is JSON
    (serving,) = [r for r in records if r["msg"] == "serving"]
    assert serving["serving"]["console"] == f"{server.http_url}/console/"
    assert serving["serving"]["gRPC"] == f"{server.target} (plaintext)"
    assert server.process.stdout.read() == ""  # the serving line was the only one
    assert any(r.get("method") == "/mnemosyne.v1.MemoryService/Retain" and r["level"] == "DEBUG" for r in records)


def test_log_level_warning_keeps_only_warnings_and_the_block(server_factory: ServerFactory) -> None:
    server = server_factory(args=["--log-level", "WARNING"]).start()
    with MemoryClient(server.target) as client:
        client.retain("acme", "a memory to make the server say something")
    text = _stderr(server)
    assert "WARNING mnemosyne.server no tokens configured" in text
    assert " INFO " not in text and "admission limits" not in text
    said = _block(text)  # no log line: always said
    assert said["tokens"].startswith("none: anyone who reaches these ports")
    assert said["HTTP/JSON"].startswith("off (--http-port 0)") and said["metrics"] == "off (--metrics-port 0)"
    assert "console" not in said and "MCP (HTTP)" not in said
    assert said["traces"] == "off (no OTEL_* variable names an exporter)"  # off unless configured


@pytest.mark.parametrize("given", [["--log-level", "loud"], ["--log-format", "xml"]], ids=["flag", "format"])
def test_a_word_that_is_none_of_the_choices_is_refused_from_flag_or_variable(tmp_path: Path, given: list[str]) -> None:
    flag, word = given
    variable = "MNEMOSYNE_" + flag[2:].replace("-", "_").upper()
    command = [sys.executable, "-m", "mnemosyne", "serve", "--data-dir", str(tmp_path / "data"), "--port", "0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOSYNE_")}
    for argv, environment in ((command + given, env), (command, {**env, variable: word})):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=environment)
        assert done.returncode == 2, done.stderr
        assert f"argument {flag}: '{word}' is not one of" in done.stderr and "Traceback" not in done.stderr
        assert not (tmp_path / "data").exists()
