"""The operations documentation is complete: every serve flag, its environment variable, and
every metric the server exports are described."""

from __future__ import annotations

import argparse
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from mnemosyne.cli import build_parser
from mnemosyne.observability.metrics import ServerMetrics

ROOT = Path(__file__).resolve().parents[1]


def _docs() -> str:
    return (ROOT / "README.md").read_text()


def _serve_flags() -> list[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [a.option_strings[0] for a in sub.choices["serve"]._actions if a.option_strings and a.dest != "help"]


def test_every_serve_flag_and_env_var_is_documented() -> None:
    docs = _docs()
    flags = _serve_flags()
    assert "--tls-client-ca" in flags and "--max-tenant-bytes" in flags
    for flag in flags:
        assert f"`{flag}`" in docs, flag
        assert f"`MNEMOSYNE_{flag[2:].replace('-', '_').upper()}`" in docs, flag


def test_every_metric_is_documented() -> None:
    docs = _docs()
    families = list(text_string_to_metric_families(ServerMetrics().exposition().decode()))
    names = [f.name for f in families if f.name.startswith("mnemosyne_")]
    assert len(names) == 14
    for family in families:
        if family.name.startswith("mnemosyne_"):
            shown = family.name + ("_total" if family.type == "counter" else "")
            assert f"`{shown}`" in docs, shown
