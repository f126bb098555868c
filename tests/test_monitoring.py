"""The monitoring the chart ships (helm/mnemosyne/files): the alerts pass `promtool check rules` and
`promtool test rules` (each fires on its series and stays quiet on the others), each has its runbook
in docs/operations.md, the dashboard's queries are PromQL, and every metric name the dashboard and
the alerts use is one a real server exports (scraped after the traffic that moves each of them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import apsw
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mnemosyne.client import MemoryClient
from tests.docs_support import DOCS
from tests.support import ServerFactory

ROOT = Path(__file__).resolve().parents[1]
CHART_FILES = ROOT / "helm" / "mnemosyne" / "files"
ALERTS = CHART_FILES / "alerts.yaml"
DASHBOARD = CHART_FILES / "dashboard.json"
ALERT_TESTS = ROOT / "helm" / "alerts-test.yaml"


def _promtool(*args: str, cwd: Path = ROOT) -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        message = "promtool is not installed (Debian: apt-get install prometheus; scripts/setup names it)"
        if os.environ.get("MNEMOSYNE_NO_SKIP"):
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def _dashboard_queries() -> list[tuple[str, str]]:
    """(where, query) of every query the dashboard runs: its panels' and its variables'."""
    board = json.loads(DASHBOARD.read_text())
    queries = [
        (f"panel {panel['title']!r}", target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            queries.append((f"variable {variable['name']}", variable["query"]["query"]))
    return queries


def _as_promql(query: str) -> str:
    """A dashboard query as Prometheus receives it: Grafana's variables replaced as Grafana does."""
    return query.replace("$__rate_interval", "2m").replace("$namespace", ".*").replace("$pod", ".*")


# Words of PromQL that are no metric name where the tokenizer below meets them.
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(query: str) -> set[str]:
    """The metric names a PromQL query (or Grafana's ``label_values(metric, label)``) selects."""
    values_of = re.fullmatch(r"\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)[^,]*,\s*\w+\s*\)\s*", query)
    if values_of:
        return {values_of.group(1)}
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', query)  # strings
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    names = set()
    for token in re.finditer(r"(?<![A-Za-z0-9_:.$])[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[token.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if token.group().lower() not in _KEYWORDS:
            names.add(token.group())
    return names


def test_metric_names_finds_what_a_query_selects() -> None:
    assert metric_names(
        'histogram_quantile(0.99, sum by (method, le) (rate(x_bucket{pod=~"$pod", code!="OK"}[$__rate_interval])))'
    ) == {"x_bucket"}
    assert metric_names("1 - a_free / a_size > 0.1 and on (pod) b offset 5m") == {"a_free", "a_size", "b"}
    assert metric_names('label_values(m{namespace=~"$namespace"}, pod)') == {"m"}


def test_the_alerts_pass_promtool_check_and_their_unit_tests() -> None:
    assert "SUCCESS: 6 rules found" in _promtool("check", "rules", str(ALERTS))
    assert "SUCCESS" in _promtool("test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)


def test_each_alert_is_tested_firing_and_quiet_and_has_its_runbook() -> None:
    cases = [case for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    docs = (DOCS / "operations.md").read_text()
    for rule in _rules():
        name = rule["alert"]
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case.get("exp_alerts") for case in mine), f"{name}: no promtool case where it fires"
        assert any(not case.get("exp_alerts") for case in mine), f"{name}: no promtool case where it stays quiet"
        runbook = rule["annotations"]["runbook_url"]
        assert runbook == f"docs/operations.md#{name.lower()}", runbook
        assert re.search(rf"^#+ `?{name}`?$", docs, re.MULTILINE), f"docs/operations.md has no section {name}"


def test_the_dashboard_queries_are_promql(tmp_path: Path) -> None:
    """promtool parses each dashboard query (as a recording rule of a scratch rule file)."""
    queries = _dashboard_queries()
    assert len(queries) >= 20
    rules = [
        {"record": f"dashboard:query_{n}", "expr": _as_promql(query)}
        for n, (_, query) in enumerate(queries)
        if not query.startswith("label_values(")
    ]
    scratch = tmp_path / "dashboard-rules.yaml"
    scratch.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert f"SUCCESS: {len(rules)} rules found" in _promtool("check", "rules", str(scratch))


def _exported(text: str) -> set[str]:
    """Every series name an exposition holds or declares: a family without series yet (a counter
    by a label no call gave yet) exports the names its type gives."""
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "summary": ["_count", "_sum"]}
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {sample.name for sample in family.samples}
        names |= {family.name + suffix for suffix in suffixes.get(family.type, [""])}
    return names


def _series(text: str, name: str, **labels: str) -> float:
    found = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_every_metric_the_dashboard_and_the_alerts_use_is_exported(server_factory: ServerFactory) -> None:
    server = server_factory(metrics=True, env={"MNEMOSYNE_TEST_POISON_MARKER": "POISON"}).start()
    with MemoryClient(server.target) as client:
        client.hot_path("watched", "enable")
        client.retain("watched", "a good fast write", fast=True)
        poison = client.retain("watched", "a POISON fast write", fast=True).event_id
        assert client.hot_path("watched", "flush", timeout_seconds=60).failed_event_ids == [poison]
        client.retain("audited", "a memory whose file is edited behind the server's back")
        assert client.verify_integrity("audited").valid
        edit = apsw.Connection(str(server.tenant_file("audited")))
        edit.execute("UPDATE memories SET body = 'something else'")
        edit.close()
        assert not client.verify_integrity("audited").valid
        client.recall("watched", "fast write")
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()

    exported = _exported(text)
    used = {
        (where, name)
        for where, query in [*_dashboard_queries(), *((f"alert {r['alert']}", r["expr"]) for r in _rules())]
        for name in metric_names(query)
    }
    assert {name for _, name in used} >= {"mnemosyne_rpc_duration_seconds_bucket", "mnemosyne_events_failed_total"}
    missing = sorted(f"{name} ({where})" for where, name in used if name not in exported)
    assert not missing, f"used but not exported: {missing}"

    # The figures the alerts read move with what happened.
    assert _series(text, "mnemosyne_events_failed_total") == 1
    assert _series(text, "mnemosyne_integrity_checks_total", verdict="valid") == 1
    assert _series(text, "mnemosyne_integrity_checks_total", verdict="broken") == 1
    assert _series(text, "mnemosyne_members") == 1
    volume = os.statvfs(server.data_dir)
    assert _series(text, "mnemosyne_data_volume_size_bytes") == volume.f_blocks * volume.f_frsize
    free = _series(text, "mnemosyne_data_volume_free_bytes")
    assert abs(free - volume.f_bavail * volume.f_frsize) < 64 * 2**20  # other tests write beside it
