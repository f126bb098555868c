"""The flags and environment variables of ``mnemosyne serve`` are a superset of those of the commit
before issue 39 (b9fb904), each with the same default: the chart (helm/), the docs and every
script name them. And ``mnemosyne serve --help`` shows each flag's default and its variable."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mnemosyne.cli.commands import build_parser
from mnemosyne.cli.flags import Setting, configured
from mnemosyne.cli.flags import settings as flag_settings
from mnemosyne.cli.serve import ServeSettings, server_config
from mnemosyne.engine.config import ConsolidationConfig, EngineConfig, HotPathConfig
from mnemosyne.engine.limits import Limits
from mnemosyne.transport.admission import AdmissionLimits
from mnemosyne.transport.config import ServerConfig
from tests.docs_support import ROOT

# Each serve flag of b9fb904 and the value ``mnemosyne serve`` takes without it (no MNEMOSYNE_
# variable set), as its argparse namespace held it: captured from that commit's parser.
FLAGS_BEFORE: dict[str, object] = {
    "--data-dir": "./mnemosyne-data",
    "--host": "127.0.0.1",
    "--port": 50051,
    "--metrics-port": 9464,
    "--http-port": 8080,
    "--http-host": None,
    "--http-allowed-host": None,
    "--http-cors-origin": None,
    "--tokens-file": None,
    "--max-open-tenants": 1024,
    "--grace-seconds": 20.0,
    "--synchronous": "full",
    "--near-duplicate-threshold": 0.85,
    "--ann-threshold": 0,  # issue 42: 0 is each embedder's own (50,000 for hashing, as before)
    "--extractor": "rules",
    "--llm-base-url": None,
    "--llm-model": None,
    "--llm-timeout": None,
    "--llm-retries": None,
    "--llm-concurrency": None,
    "--llm-fallback": None,
    "--metrics-host": None,
    "--tls-cert": None,
    "--tls-key": None,
    "--tls-client-ca": None,
    "--drain-delay-seconds": 0.0,
    "--log-format": "text",
    "--member": None,
    "--members": None,
    "--previous-members": None,
    "--ownership-epoch": 1,
    "--no-forwarding": False,
    "--max-text-chars": 32768,
    "--max-query-chars": 4096,
    "--max-batch-items": 1000,
    "--max-k": 100,
    "--max-metadata-pairs": 32,
    "--max-metadata-key-chars": 128,
    "--max-metadata-value-chars": 1024,
    "--max-page-size": 1000,
    "--max-records-per-workspace": 1000,
    "--max-record-bytes": 262144,
    "--max-tenant-memories": 0,
    "--max-tenant-bytes": 0,
    "--max-request-bytes": 16777216,
    "--worker-threads": 16,
    "--calls-per-tenant": 8,
    "--reader-threads": 2,
    "--reader-share": 1,
    "--queued-calls-per-tenant": 64,
    "--queued-calls": 1024,
    "--streams-per-tenant": 100,
    "--streams": 10000,
    "--waiting-calls-per-tenant": 16,
    "--waiting-calls": 4096,
    "--embedder": "minilm",  # hashing until issue 42 made meaning the default
    "--hot-path-workers": 2,
    "--hot-path-batch": 16,
    "--hot-path-sync": "round",
    "--consolidate-tenant": None,
    "--consolidate-idle-seconds": 900.0,
    "--event-retention-seconds": 604800.0,
}

# Flags whose choices were fixed words, and the words each took.
CHOICES_BEFORE = {
    "--synchronous": {"full", "normal", "FULL", "NORMAL"},
    "--extractor": {"rules", "openai"},
    "--llm-fallback": {"rules", "none"},
    "--log-format": {"text", "json"},
    "--embedder": {"hashing", "minilm"},
    "--hot-path-sync": {"round", "enqueue"},
}

# The variables b9fb904's parser read as the flags' defaults: each flag's MNEMOSYNE_<FLAG>, except
# the flags read elsewhere (the repeatable ones when serve builds its configuration, the LLM ones
# in the extractor).
READ_ELSEWHERE = {
    "--http-allowed-host",
    "--http-cors-origin",
    "--consolidate-tenant",
    "--llm-base-url",
    "--llm-model",
    "--llm-timeout",
    "--llm-retries",
    "--llm-concurrency",
    "--llm-fallback",
}
# ... and the variables that have no flag (read by serve, the server or the extractor).
VARIABLES_WITHOUT_FLAG = {
    "MNEMOSYNE_TOKENS",
    "MNEMOSYNE_ALLOW_UNAUTHENTICATED",
    "MNEMOSYNE_LLM_API_KEY",
    "MNEMOSYNE_LLM_BACKOFF",
}


def _variable(flag: str) -> str:
    return "MNEMOSYNE_" + flag[2:].replace("-", "_").upper()


# The variables read outside the parser: named in serve --help or in the code that reads them
# (the others are proven by what they do to their flag's default).
READ_OUTSIDE_THE_PARSER = {_variable(flag) for flag in READ_ELSEWHERE} | VARIABLES_WITHOUT_FLAG


def _without_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MNEMOSYNE_"):
            monkeypatch.delenv(name)


def _serve_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve: argparse.ArgumentParser = commands.choices["serve"]
    return serve


def test_every_flag_of_before_is_still_a_flag_with_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_variables(monkeypatch)
    serve = _serve_parser()
    missing = sorted(set(FLAGS_BEFORE) - set(serve._option_string_actions))
    assert not missing, f"serve lost the flags {missing}"
    defaults = serve.parse_args([])
    for flag, before in FLAGS_BEFORE.items():
        now = getattr(defaults, serve._option_string_actions[flag].dest)
        assert now == before and type(now) is type(before), f"{flag}: default {now!r}, before {before!r}"
    for flag, words in CHOICES_BEFORE.items():
        for word in words:  # every word it took is still taken
            serve.parse_args([flag, word])


def _other(value: object) -> tuple[str, object]:
    """A variable's text unlike the default ``value``, and the value the flag then takes."""
    if isinstance(value, bool):
        return "1", True
    if isinstance(value, int):
        return str(value + 3), value + 3
    if isinstance(value, float):
        return repr(value + 1.5), value + 1.5
    return "elsewhere", "elsewhere"


@pytest.mark.parametrize("flag", sorted(set(FLAGS_BEFORE) - READ_ELSEWHERE))
def test_every_variable_the_parser_read_still_sets_its_flag(monkeypatch: pytest.MonkeyPatch, flag: str) -> None:
    _without_variables(monkeypatch)
    text, value = _other(FLAGS_BEFORE[flag])
    if flag in CHOICES_BEFORE:
        text = value = sorted(CHOICES_BEFORE[flag] - {FLAGS_BEFORE[flag]})[-1]
    if flag == "--synchronous":
        text = value = "normal"
    monkeypatch.setenv(_variable(flag), text)
    serve = _serve_parser()
    now = getattr(serve.parse_args([]), serve._option_string_actions[flag].dest)
    assert now == value, f"{_variable(flag)}={text}: {flag} is {now!r}"


def _serve_help() -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOSYNE_")}
    env["COLUMNS"] = "400"  # one line per flag
    done = subprocess.run(
        [sys.executable, "-m", "mnemosyne", "serve", "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _source_variables() -> set[str]:
    """The MNEMOSYNE_ names written out in the service's code (the test seams aside)."""
    found: set[str] = set()
    for path in (ROOT / "service").rglob("*.py"):
        found |= set(re.findall(r"MNEMOSYNE_[A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8")))
    return {name for name in found if not name.startswith("MNEMOSYNE_TEST_")}


def test_every_variable_read_outside_the_parser_is_still_named() -> None:
    named = set(re.findall(r"MNEMOSYNE_[A-Z0-9_]*[A-Z0-9]", _serve_help())) | _source_variables()
    missing = sorted(READ_OUTSIDE_THE_PARSER - named)
    assert not missing, f"neither serve --help nor the code names {missing}"


def _help_entries(text: str) -> dict[str, str]:
    """Each option's entry of ``--help`` (its lines joined), by its flag."""
    entries: dict[str, str] = {}
    flag = ""
    for line in text.splitlines():
        if match := re.match(r"\s{2}(--[a-z0-9-]+)", line):
            flag = match.group(1)
            entries[flag] = line
        elif flag and line.startswith(" " * 4):
            entries[flag] += " " + line.strip()
        else:
            flag = ""
    return entries


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_serve_help_shows_each_default_and_variable() -> None:
    entries = _help_entries(_serve_help())
    for flag, before in FLAGS_BEFORE.items():
        entry = entries.get(flag)
        assert entry is not None, f"serve --help has no entry for {flag}"
        assert _variable(flag) in entry, f"serve --help does not name {_variable(flag)} at {flag}: {entry}"
        if before is not None and not isinstance(before, bool):
            assert f"default: {_shown(before)}" in entry, f"serve --help does not show {flag}'s default: {entry}"


# -- the flags are the configuration's options ----------------------------------------------------


def _instances(config: Any) -> dict[type, Any]:
    """Each configuration object of ``config`` (itself and those it nests), by class."""
    found: dict[type, Any] = {type(config): config}
    for spec in dataclasses.fields(config):
        value = getattr(config, spec.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found |= _instances(value)
    return found


def _given(setting: Setting, step: int) -> tuple[str, object]:
    """A value of ``setting`` unlike its default (``step`` apart), as text and as the field holds it."""
    default = setting.field.default
    if setting.kind is bool:
        return "1", not default
    if setting.kind is int:
        assert isinstance(default, int), setting
        return str(default + step), default + step
    if setting.kind is float:
        assert isinstance(default, (int, float)), setting
        return repr(default + step / 2), default + step / 2
    if setting.kind is tuple:
        return f"t{step}a, t{step}b", (f"t{step}a", f"t{step}b")
    if setting.option.choices:
        word = [w for w in setting.option.choices if w != str(default).lower()][0]
        return word.upper(), word.upper() if str(default).isupper() else word
    text = f"/elsewhere/{step}"
    return text, Path(text) if setting.kind is Path else text


def _settable(setting: Setting) -> bool:
    """A setting this test sets: the extractor's model settings are the extractor's to read (and
    a member list must name this member: tests/test_members.py)."""
    return setting.option.parser_reads_variable and setting.field.name not in ("member", "members", "previous_members")


def _configuration(argv: list[str]) -> dict[type, Any]:
    args = build_parser().parse_args(["serve", *argv])
    settings = configured(ServeSettings, args)
    return _instances(server_config(args, settings)) | {ServeSettings: settings}


def test_every_variable_reaches_the_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_variables(monkeypatch)
    every = [s for cls in (ServerConfig, ServeSettings) for s in flag_settings(cls) if _settable(s)]
    assert len(every) > 50 and any(s.option.variable_only for s in every)
    for setting in every:
        monkeypatch.setenv(setting.variable, _given(setting, 3)[0])
    # --extractor OPENAI (any case) needs its model, which the extractor reads.
    monkeypatch.setenv("MNEMOSYNE_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MNEMOSYNE_LLM_MODEL", "a-model")
    made = _configuration([])
    assert type(made[ServerConfig].extractor).__name__ == "OpenAIExtractor"
    for setting in every:
        held = getattr(made[setting.owner], setting.field.name)
        assert held == _given(setting, 3)[1], f"{setting.variable}: the configuration holds {held!r}"


def test_a_flag_wins_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_variables(monkeypatch)
    flags = [s for cls in (ServerConfig, ServeSettings) for s in flag_settings(cls) if _settable(s)]
    flags = [s for s in flags if not s.option.variable_only and s.kind is not bool]
    argv: list[str] = []
    monkeypatch.setenv("MNEMOSYNE_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MNEMOSYNE_LLM_MODEL", "a-model")
    for setting in flags:
        monkeypatch.setenv(setting.variable, _given(setting, 3)[0])
        text = _given(setting, 5)[0]
        for word in text.split(", ") if setting.kind is tuple else [text]:
            argv += [setting.flag, word]
    made = _configuration(argv)
    for setting in flags:
        held = getattr(made[setting.owner], setting.field.name)
        assert held == _given(setting, 5)[1], f"{setting.flag}: the configuration holds {held!r}"


def test_the_configuration_without_flags_is_the_dataclasses_own(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_variables(monkeypatch)
    made = _configuration([])
    for cls in (Limits, AdmissionLimits, HotPathConfig, ConsolidationConfig):
        assert made[cls] == cls()
    server = made[ServerConfig]
    assert isinstance(server, ServerConfig)
    bare = ServerConfig(engine=EngineConfig(data_dir=Path("./mnemosyne-data")))
    assert dataclasses.replace(server, extractor=None) == bare
