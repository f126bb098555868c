"""The operations documentation (docs/operations.md) is complete: every serve flag with its
environment variable and its default in the configuration table, and every metric the server
exports in the metrics table."""

from __future__ import annotations

import argparse
import os

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mnemosyne.cli.commands import build_parser
from mnemosyne.cli.flags import Setting, settings
from mnemosyne.cli.serve import ServeSettings
from mnemosyne.observability.metrics import ServerMetrics
from mnemosyne.transport.config import ServerConfig
from tests.docs_support import DOCS, section, table_rows

OPERATIONS = DOCS / "operations.md"


def _docs() -> str:
    return OPERATIONS.read_text()


def _serve_actions(monkeypatch: pytest.MonkeyPatch) -> list[argparse.Action]:
    # The parser reads MNEMOSYNE_* at build time: without them its defaults are the built-in ones.
    for name in list(os.environ):
        if name.startswith("MNEMOSYNE_"):
            monkeypatch.delenv(name)
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices["serve"]._actions if a.option_strings and a.dest != "help"]


def _configuration_rows() -> dict[str, list[str]]:
    rows = table_rows(section(_docs(), "Configuration"))
    assert rows[0] == ["flag", "environment variable", "default", "meaning"], rows[0]
    return {cells[0]: cells for cells in rows[2:]}


def _shown(default: object) -> str:
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def test_every_serve_flag_and_env_var_is_in_the_configuration_table(monkeypatch: pytest.MonkeyPatch) -> None:
    actions = _serve_actions(monkeypatch)
    flags = [a.option_strings[0] for a in actions]
    assert "--tls-client-ca" in flags and "--max-tenant-bytes" in flags and "--worker-threads" in flags
    rows = _configuration_rows()
    for action in actions:
        flag = action.option_strings[0]
        row = rows.get(f"`{flag}`")
        assert row is not None, f"serve flag {flag} has no row in docs/operations.md's configuration table"
        variable = f"`MNEMOSYNE_{flag[2:].replace('-', '_').upper()}`"
        assert row[1] == variable, f"{flag}: the row names {row[1]}, not {variable}"
        if action.default is not None:  # the LLM flags default in the extractor (their rows say so)
            assert f"`{_shown(action.default)}`" in row[2], f"{flag}: default {action.default!r}, the row says {row[2]}"


def _variables_only() -> list[Setting]:
    return [s for cls in (ServerConfig, ServeSettings) for s in settings(cls) if s.option.variable_only]


def test_every_row_of_the_configuration_table_is_a_setting_of_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """No row for a flag that is gone; a row without a flag names a variable serve reads (said in
    its --help), with that variable's default."""
    flags = {a.option_strings[0] for a in _serve_actions(monkeypatch)}
    rows = _configuration_rows()
    help_text = _serve_help()
    defaults = {s.variable: s.shown_default for s in _variables_only()}
    assert {"MNEMOSYNE_TOKENS", "MNEMOSYNE_ALLOW_UNAUTHENTICATED"} <= set(defaults)
    for first in rows:
        if first != "—":
            assert first.strip("`") in flags, f"docs/operations.md has a row for {first}, which serve does not take"
    without_flag = {
        cells[1].strip("`"): cells[2] for cells in table_rows(section(_docs(), "Configuration"))[2:] if cells[0] == "—"
    }
    assert set(defaults) <= set(without_flag), f"variables without a row: {sorted(set(defaults) - set(without_flag))}"
    for variable, default in without_flag.items():
        assert variable in help_text, f"{variable} has a row but serve --help does not name it"
        if variable in defaults:
            assert default.strip("`").startswith(defaults[variable]), (
                f"{variable}: default {defaults[variable]}, the row says {default}"
            )


def _serve_help() -> str:
    parser = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    text: str = parser.format_help()
    return text


def test_every_metric_is_in_the_metrics_table() -> None:
    rows = table_rows(section(_docs(), "Metrics"))
    documented = {cells[0] for cells in rows[2:]}
    families = list(text_string_to_metric_families(ServerMetrics().exposition().decode()))
    names = [f.name for f in families if f.name.startswith("mnemosyne_")]
    assert len(names) == 42
    for family in families:
        if family.name.startswith("mnemosyne_"):
            shown = family.name + ("_total" if family.type == "counter" else "")
            assert f"`{shown}`" in documented, f"metric {shown} has no row in docs/operations.md's metrics table"
