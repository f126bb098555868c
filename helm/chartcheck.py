"""Offline checks for the Mnemosyne Helm chart (no helm binary, no cluster).

Rendering uses the PyPI package ``helm-python-sdk``: it ships Helm v4's Go
engine as a shared library (``libhelm_c.so``) and binds it with ctypes, so
templates are rendered by the real Helm code (sprig functions, ``fail``,
values.schema.json validation, lint rules), not a re-implementation.

Rendered manifests are validated with ``kubernetes-validate`` (strict, against
the Kubernetes versions in KUBE_VERSIONS); the ServiceMonitor and the
PrometheusRule are CRDs that validator does not know, so their shapes are
checked here by hand. Values files
are validated with ``check-jsonschema`` against values.schema.json.

Used by scripts/check-chart (``python helm/chartcheck.py``) and by
tests/test_helm_chart.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import helm_python

HELM_DIR = Path(__file__).resolve().parent
CHART_DIR = HELM_DIR / "mnemosyne"
SCHEMA = CHART_DIR / "values.schema.json"
DEFAULT_VALUES = CHART_DIR / "values.yaml"
FULL_VALUES = CHART_DIR / "ci" / "full-values.yaml"
# The monitoring the chart ships: the alerts (a Prometheus rule file) and the Grafana dashboard.
ALERTS = CHART_DIR / "files" / "alerts.yaml"
DASHBOARD = CHART_DIR / "files" / "dashboard.json"

RELEASE = "mn"
NAMESPACE = "mem"
# Oldest supported by the chart (Chart.yaml kubeVersion) and the newest the
# validator knows.
KUBE_VERSIONS = ("1.27.0", "1.37.0")

# The smallest install a user can do: defaults plus the one required choice,
# where the tokens come from (defaults alone must fail to render).
MINIMAL_OVERRIDES: dict[str, Any] = {"auth": {"existingSecret": "mnemosyne-tokens"}}

# Pip requirement lines these checks need (the same lines belong in
# pyproject's `test` extra).
REQUIREMENTS_FILE = HELM_DIR / "requirements-chart.txt"
REQUIREMENTS = tuple(
    line.strip()
    for line in REQUIREMENTS_FILE.read_text(encoding="utf-8").splitlines()
    if line.strip() and not line.lstrip().startswith("#")
)
_MODULES = {
    "helm_python": "helm-python-sdk",
    "kubernetes_validate": "kubernetes-validate",
    "check_jsonschema": "check-jsonschema",
    "yaml": "PyYAML",
}


class CheckError(AssertionError):
    """A chart check failed."""


def missing_tools() -> list[str]:
    """Names of the pip packages whose modules cannot be imported."""
    missing = []
    for module, package in _MODULES.items():
        try:
            __import__(module)
        except Exception:  # ImportError, or OSError if libhelm_c.so cannot load
            missing.append(package)
    return missing


# --------------------------------------------------------------------------- values


def load_yaml(path: Path) -> dict[str, Any]:
    import yaml

    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Merge like successive ``-f`` files: maps merge, null deletes a key."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def user_values(values_files: Iterable[Path] = (), overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for path in values_files:
        values = deep_merge(values, load_yaml(Path(path)))
    return deep_merge(values, overrides or {})


def _chart() -> helm_python.Chart:
    import helm_python

    return helm_python.Chart.load(str(CHART_DIR))


def merged_values(values: dict[str, Any]) -> dict[str, Any]:
    """The chart defaults coalesced with ``values`` by Helm itself."""
    return _chart().merge_values(values)


# --------------------------------------------------------------------------- render


def render(values: dict[str, Any] | None = None, *, namespace: str = NAMESPACE) -> dict[str, str]:
    """Render like ``helm template``; raises helm_python.HelmError on failure."""
    return _chart().render(values or {}, name=RELEASE, namespace=namespace, is_install=True)


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Kubernetes objects of a render (NOTES.txt and empty documents dropped)."""
    import yaml

    docs: list[dict[str, Any]] = []
    for source, text in sorted(rendered.items()):
        if source.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("metadata", {}).setdefault("annotations", None)
                if doc["metadata"]["annotations"] is None:
                    del doc["metadata"]["annotations"]
                docs.append(doc)
    return docs


def render_manifests(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return manifests(render(values))


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(docs, kind, name)
    if len(found) != 1:
        raise CheckError(f"expected exactly one {kind} {name or ''}, found {len(found)}")
    return found[0]


def render_error(values: dict[str, Any]) -> str:
    """Render ``values`` expecting failure; returns Helm's error message."""
    import helm_python

    try:
        render(values)
    except helm_python.HelmError as exc:
        return str(exc)
    raise CheckError(f"render unexpectedly succeeded with {values!r}")


# --------------------------------------------------------------------------- validation


def lint(values: dict[str, Any], kube_version: str = KUBE_VERSIONS[0]) -> None:
    """``helm lint --strict`` (Helm's lint mode treats ``fail`` as non-fatal,
    so the refusal cases are covered by render_error instead)."""
    import helm_python

    report = helm_python.lint(str(CHART_DIR), values, strict=True, namespace=NAMESPACE, kube_version="v" + kube_version)
    # severity 1 = info ("icon is recommended"), 2 = warning, 3 = error.
    bad = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    if bad or report.get("errors"):
        raise CheckError(f"helm lint: {bad} {report.get('errors')}")


def validate_k8s(docs: list[dict[str, Any]], versions: Iterable[str] = KUBE_VERSIONS) -> None:
    """Strict OpenAPI validation of every object; ServiceMonitor by hand."""
    import kubernetes_validate

    for doc in docs:
        nulls = list(_null_paths(doc))
        if nulls:  # an empty `env:` or similar: legal but a template slip
            raise CheckError(f"{doc['kind']}/{doc['metadata']['name']} has null fields: {nulls}")
        if doc.get("apiVersion", "").startswith("monitoring.coreos.com/"):
            check_prometheusrule(doc) if doc.get("kind") == "PrometheusRule" else check_servicemonitor(doc)
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise CheckError(
                    f"{doc['kind']}/{doc['metadata']['name']} invalid for k8s {version}: "
                    f"{exc.message} at {list(exc.path)}"
                ) from None


def _null_paths(obj: Any, path: str = "") -> Iterable[str]:
    if obj is None:
        yield path
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _null_paths(value, f"{path}.{key}")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _null_paths(value, f"{path}[{i}]")


def check_servicemonitor(doc: dict[str, Any]) -> None:
    """Shape of a monitoring.coreos.com/v1 ServiceMonitor (a CRD)."""

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise CheckError(f"ServiceMonitor: {what}")

    need(doc.get("apiVersion") == "monitoring.coreos.com/v1", "apiVersion must be monitoring.coreos.com/v1")
    need(doc.get("kind") == "ServiceMonitor", "kind")
    meta = doc.get("metadata", {})
    need(bool(meta.get("name")) and bool(meta.get("namespace")), "metadata.name/namespace")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise CheckError("ServiceMonitor: spec must be a map")
    allowed_spec = {
        "selector",
        "namespaceSelector",
        "endpoints",
        "jobLabel",
        "targetLabels",
        "podTargetLabels",
        "sampleLimit",
        "scrapeProtocols",
        "attachMetadata",
        "labelLimit",
    }
    need(set(spec) <= allowed_spec, f"unknown spec keys {set(spec) - allowed_spec}")
    labels = spec.get("selector", {}).get("matchLabels")
    need(
        isinstance(labels, dict) and bool(labels) and all(isinstance(v, str) for v in labels.values()),
        "spec.selector.matchLabels must be a non-empty string map",
    )
    names = spec.get("namespaceSelector", {}).get("matchNames", [])
    need(isinstance(names, list) and all(isinstance(n, str) for n in names), "namespaceSelector.matchNames")
    endpoints = spec.get("endpoints")
    if not isinstance(endpoints, list) or not endpoints:
        raise CheckError("ServiceMonitor: spec.endpoints must be a non-empty list")
    allowed_ep = {
        "port",
        "targetPort",
        "path",
        "scheme",
        "interval",
        "scrapeTimeout",
        "tlsConfig",
        "bearerTokenSecret",
        "authorization",
        "honorLabels",
        "honorTimestamps",
        "metricRelabelings",
        "relabelings",
        "params",
        "basicAuth",
        "oauth2",
        "followRedirects",
        "enableHttp2",
        "filterRunning",
        "proxyUrl",
    }
    import re

    duration = re.compile(
        r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
    )
    for ep in endpoints:
        need(isinstance(ep, dict) and set(ep) <= allowed_ep, f"unknown endpoint keys {set(ep) - allowed_ep}")
        need(isinstance(ep.get("port"), str) and ep["port"], "endpoint.port must name a Service port")
        need(ep.get("scheme", "http") in ("http", "https"), "endpoint.scheme")
        need(str(ep.get("path", "/metrics")).startswith("/"), "endpoint.path")
        for key in ("interval", "scrapeTimeout"):
            if key in ep:
                need(bool(duration.match(str(ep[key]))), f"endpoint.{key} must be a Prometheus duration")


def check_prometheusrule(doc: dict[str, Any]) -> None:
    """Shape of a monitoring.coreos.com/v1 PrometheusRule (a CRD): groups of named rules, each an
    alert or a recording rule with an expression. The expressions themselves are Prometheus' to
    judge: tests/test_monitoring.py runs ``promtool check rules`` on the rendered spec."""

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise CheckError(f"PrometheusRule: {what}")

    need(doc.get("apiVersion") == "monitoring.coreos.com/v1", "apiVersion must be monitoring.coreos.com/v1")
    meta = doc.get("metadata", {})
    need(bool(meta.get("name")) and bool(meta.get("namespace")), "metadata.name/namespace")
    spec = doc.get("spec")
    if not isinstance(spec, dict) or set(spec) != {"groups"}:
        raise CheckError("PrometheusRule: spec must hold groups only")
    groups = spec["groups"]
    need(isinstance(groups, list) and bool(groups), "spec.groups must be a non-empty list")
    allowed_rule = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
    for group in groups:
        need(isinstance(group, dict) and isinstance(group.get("name"), str), "each group needs a name")
        need(
            set(group) <= {"name", "interval", "limit", "partial_response_strategy", "rules"},
            f"group keys {set(group)}",
        )
        for rule in group.get("rules") or []:
            need(isinstance(rule, dict) and set(rule) <= allowed_rule, f"unknown rule keys {set(rule) - allowed_rule}")
            need(("alert" in rule) != ("record" in rule), f"a rule is an alert or a record: {rule}")
            need(isinstance(rule.get("expr"), str) and bool(rule["expr"].strip()), f"{rule}: expr")
            for key in ("labels", "annotations"):
                values = rule.get(key, {})
                need(isinstance(values, dict) and all(isinstance(v, str) for v in values.values()), f"{key}: strings")


def check_jsonschema(instance: Path | dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Run the check-jsonschema CLI on a values file (or dict) against values.schema.json."""
    tmp = None
    if isinstance(instance, dict):
        fd, tmp = tempfile.mkstemp(suffix=".json", prefix="values-")
        with os.fdopen(fd, "w") as fh:
            json.dump(instance, fh)
        instance = Path(tmp)
    try:
        return subprocess.run(
            [sys.executable, "-m", "check_jsonschema", "--schemafile", str(SCHEMA), str(instance)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        if tmp:
            os.unlink(tmp)


def check_metaschema() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--check-metaschema", str(SCHEMA)],
        capture_output=True,
        text=True,
        timeout=120,
    )


# --------------------------------------------------------------------------- the suite


def _schema_ok(instance: Path | dict[str, Any]) -> None:
    res = check_jsonschema(instance)
    if res.returncode != 0:
        raise CheckError(f"check-jsonschema rejected {instance}: {res.stdout}{res.stderr}")


def _schema_rejects(instance: dict[str, Any]) -> None:
    import helm_python

    res = check_jsonschema(instance)
    if res.returncode == 0:
        raise CheckError(f"check-jsonschema accepted {instance}")
    try:
        _chart().validate_schema(instance)
    except helm_python.HelmValuesError:
        return
    raise CheckError(f"Helm's schema validation accepted {instance}")


def _scenario(values: dict[str, Any]) -> None:
    _schema_ok(merged_values(values))
    lint(values)
    validate_k8s(render_manifests(values))


def checks() -> list[tuple[str, Callable[[], None]]]:
    full = user_values([FULL_VALUES])

    def metaschema() -> None:
        res = check_metaschema()
        if res.returncode != 0:
            raise CheckError(res.stdout + res.stderr)

    def default_refuses() -> None:
        msg = render_error({})
        if "auth.existingSecret" not in msg:
            raise CheckError(f"unexpected error: {msg}")

    def refusals() -> None:
        cases = [
            ({"tls": {"enabled": True}, **MINIMAL_OVERRIDES}, "tls.existingSecret"),
            ({"tls": {"clientCA": {"enabled": True}}, **MINIMAL_OVERRIDES}, "needs tls.enabled"),
            ({"terminationGracePeriodSeconds": 20, **MINIMAL_OVERRIDES}, "must exceed server.graceSeconds"),
        ]
        for values, fragment in cases:
            msg = render_error(values)
            if fragment not in msg:
                raise CheckError(f"{values}: unexpected error {msg}")

    return [
        ("values.schema.json is a valid JSON Schema", metaschema),
        ("check-jsonschema: values.yaml", lambda: _schema_ok(DEFAULT_VALUES)),
        ("check-jsonschema: ci/full-values.yaml", lambda: _schema_ok(FULL_VALUES)),
        (
            "defaults + auth.existingSecret: schema, lint, render, kubernetes-validate",
            lambda: _scenario(MINIMAL_OVERRIDES),
        ),
        ("ci/full-values.yaml: schema, lint, render, kubernetes-validate", lambda: _scenario(full)),
        (
            "auth.enabled=false renders (insecure mode)",
            lambda: validate_k8s(render_manifests({"auth": {"enabled": False}})),
        ),
        ("auth enabled without a secret or tokens refuses to render", default_refuses),
        ("other unsafe settings refuse to render", refusals),
        (
            "replicas=3 (three members): schema, lint, render, kubernetes-validate",
            lambda: _scenario({"replicas": 3, **MINIMAL_OVERRIDES}),
        ),
        ("replicas=0 fails schema validation", lambda: _schema_rejects({"replicas": 0})),
    ]


def main() -> int:
    missing = missing_tools()
    if missing:
        print(f"check-chart: missing Python packages: {', '.join(missing)}", file=sys.stderr)
        print(f"install: pip install -r {REQUIREMENTS_FILE}", file=sys.stderr)
        return 2
    passed = failed = 0
    for title, fn in checks():
        try:
            fn()
        except Exception as exc:  # report every failing check, not just the first
            failed += 1
            print(f"FAIL  {title}\n      {type(exc).__name__}: {exc}")
        else:
            passed += 1
            print(f"ok    {title}")
    print(f"check-chart: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
