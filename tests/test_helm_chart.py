"""Offline tests of the Helm chart in helm/mnemosyne.

The chart is rendered by Helm's own engine (PyPI ``helm-python-sdk``), the
manifests are validated with ``kubernetes-validate`` and the values with
``check-jsonschema``; see helm/chartcheck.py (shared with scripts/check-chart).

If those packages are missing the tests skip, unless MNEMOSYNE_NO_SKIP is set
(CI), where a missing tool is a failure.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if TYPE_CHECKING:
    import chartcheck as cc  # scripts/lint shows the type checker helm/chartcheck.py by this name
else:  # helm/ is no package: the file is loaded by its path
    _spec = importlib.util.spec_from_file_location("chartcheck", ROOT / "helm" / "chartcheck.py")
    cc = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(cc)

Manifest = dict[str, Any]  # one rendered Kubernetes object

_MISSING = cc.missing_tools()


def _require_tools() -> None:
    if _MISSING:
        message = (
            f"chart tools not installed ({', '.join(_MISSING)}); "
            f"pip install -r {cc.REQUIREMENTS_FILE.relative_to(ROOT)}"
        )
        if os.environ.get("MNEMOSYNE_NO_SKIP"):
            pytest.fail(message + " [MNEMOSYNE_NO_SKIP is set]")
        pytest.skip(message)


@pytest.fixture(autouse=True)
def _chart_tools(request: pytest.FixtureRequest) -> None:
    if not request.node.name.startswith("test_dockerfile"):  # plain-text checks need no tools
        _require_tools()


FULLNAME = f"{cc.RELEASE}-mnemosyne"
HEADLESS = f"{FULLNAME}-headless"


def _docs(values: dict[str, Any]) -> list[Manifest]:
    return cc.render_manifests(values)


@pytest.fixture(scope="module")
def minimal_docs() -> list[Manifest]:
    _require_tools()
    return _docs(cc.MINIMAL_OVERRIDES)


@pytest.fixture(scope="module")
def full_values() -> dict[str, Any]:
    _require_tools()
    return cc.user_values([cc.FULL_VALUES])


@pytest.fixture(scope="module")
def full_docs(full_values: dict[str, Any]) -> list[Manifest]:
    return _docs(full_values)


def _sts(docs: list[Manifest]) -> Manifest:
    return cc.one(docs, "StatefulSet", FULLNAME)


def _container(docs: list[Manifest]) -> Manifest:
    containers: list[Manifest] = _sts(docs)["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["mnemosyne"]
    return containers[0]


def _env(container: Manifest) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _configmap_env(docs: list[Manifest]) -> dict[str, str]:
    data: dict[str, str] = cc.one(docs, "ConfigMap", FULLNAME)["data"]
    return data


# ------------------------------------------------------------------ schema / values


def test_schema_is_a_valid_json_schema():
    res = cc.check_metaschema()
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("path", [cc.DEFAULT_VALUES, cc.FULL_VALUES], ids=["values.yaml", "full-values.yaml"])
def test_values_files_match_schema(path):
    res = cc.check_jsonschema(path)
    assert res.returncode == 0, res.stdout + res.stderr
    merged = cc.merged_values(cc.user_values([path]))
    res = cc.check_jsonschema(merged)
    assert res.returncode == 0, res.stdout + res.stderr


def test_replicas_above_one_make_members_with_the_whole_list_and_a_volume_each():
    docs = cc.render_manifests({"replicas": 3, **cc.MINIMAL_OVERRIDES})
    cc.validate_k8s(docs)
    sts = _sts(docs)
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] == HEADLESS
    env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MNEMOSYNE_MEMBER"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"  # the pod's name
    members = env["MNEMOSYNE_MEMBERS"]["value"].split(",")
    assert members == [f"{FULLNAME}-{i}={FULLNAME}-{i}.{HEADLESS}.{cc.NAMESPACE}.svc:50051" for i in range(3)]
    # One claim per pod (a volumeClaimTemplate), never a shared volume.
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["data"]
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"] == ["ReadWriteOnce"]
    # The members reach each other through the NetworkPolicy (the forwarding hop).
    policy = next(
        d
        for d in cc.render_manifests({"replicas": 3, "networkPolicy": {"enabled": True}, **cc.MINIMAL_OVERRIDES})
        if d["kind"] == "NetworkPolicy"
    )
    assert {"podSelector": {"matchLabels": sts["spec"]["selector"]["matchLabels"]}} in policy["spec"]["ingress"][0][
        "from"
    ]
    # The member link (docs/scale-out.md): a named port, reached by the members only.
    assert _configmap_env(docs)["MNEMOSYNE_MEMBER_LINK_PORT"] == "50052"
    ports = sts["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert {"name": "member-link", "containerPort": 50052, "protocol": "TCP"} in ports
    link_rule = next(rule for rule in policy["spec"]["ingress"] if rule["ports"][0]["port"] == "member-link")
    assert link_rule["from"] == [{"podSelector": {"matchLabels": sts["spec"]["selector"]["matchLabels"]}}]
    unlinked = cc.render_manifests({"replicas": 3, "server": {"memberLinkPort": 0}, **cc.MINIMAL_OVERRIDES})
    assert _configmap_env(unlinked)["MNEMOSYNE_NO_MEMBER_LINK"] == "1"
    assert "member-link" not in {
        p["name"] for p in _sts(unlinked)["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    # One replica: no member list, one server holds every tenant (as before).
    single = {
        e["name"]
        for e in _sts(cc.render_manifests(cc.MINIMAL_OVERRIDES))["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert "MNEMOSYNE_MEMBERS" not in single
    assert not {"MNEMOSYNE_MEMBER_LINK_PORT", "MNEMOSYNE_NO_MEMBER_LINK"} & set(
        _configmap_env(cc.render_manifests(cc.MINIMAL_OVERRIDES))
    )
    assert cc.check_jsonschema({"replicas": 0}).returncode != 0
    prop = json.loads(cc.SCHEMA.read_text())["properties"]["replicas"]
    assert "SQLite" in prop["description"] and "routing" in prop["description"]


def _jobs(docs: list[Manifest]) -> list[Manifest]:
    return [d for d in docs if d["kind"] == "Job"]


def test_a_change_of_replicas_moves_tenants_by_a_hook_job(tmp_path):
    """Scaling down renders a pre-upgrade hook that drains the pods that go; scaling up, a
    post-upgrade Job after the pods run the new list (with the old one as the previous list).
    Offline, ``rebalance.previousReplicas`` gives the old count; ``lookup`` (the cluster's
    StatefulSet) is checked on a copy of the chart whose lookup returns one."""
    import shutil

    import helm_python

    token = {"rebalance": {"tokenSecret": {"name": "admin-token"}}}

    def members(count: int) -> str:
        return ",".join(f"{FULLNAME}-{i}={FULLNAME}-{i}.{HEADLESS}.{cc.NAMESPACE}.svc:50051" for i in range(count))

    for before, after, hook in ((3, 4, "post-upgrade"), (4, 3, "pre-upgrade"), (1, 3, "post-upgrade")):
        docs = cc.render_manifests(
            {"replicas": after, **cc.MINIMAL_OVERRIDES, "rebalance": {**token["rebalance"], "previousReplicas": before}}
        )
        cc.validate_k8s(docs)
        (job,) = _jobs(docs)
        assert job["metadata"]["annotations"]["helm.sh/hook"] == hook
        container = job["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["mnemosyne", "rebalance"]
        assert container["args"][:4] == ["--from", members(before), "--to", members(after)]
        assert container["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "admin-token", "key": "token"}
        env = {e["name"]: e.get("value") for e in _container(docs).get("env", [])}
        # Scaling up, the pods know the old list until the tenants are moved; scaling down, the
        # pods that stay need none (the hook drained the others before).
        assert env.get("MNEMOSYNE_PREVIOUS_MEMBERS") == (members(before) if after > before else None)
    # No change: no Job, no previous list.
    same = cc.render_manifests({"replicas": 3, **cc.MINIMAL_OVERRIDES})
    assert not _jobs(same) and "MNEMOSYNE_PREVIOUS_MEMBERS" not in {e["name"] for e in _container(same)["env"]}
    # A change with auth on needs the admin token for the Job.
    with pytest.raises(Exception, match="rebalance.tokenSecret.name"):
        cc.render({"replicas": 4, **cc.MINIMAL_OVERRIDES, "rebalance": {"previousReplicas": 3}})
    # The cluster's StatefulSet (lookup) gives the old count when the value is not set.
    chart = tmp_path / "mnemosyne"
    shutil.copytree(cc.CHART_DIR, chart)
    helpers = chart / "templates" / "_helpers.tpl"
    lookup = '(lookup "apps/v1" "StatefulSet" .Release.Namespace (include "mnemosyne.fullname" .))'
    assert lookup in helpers.read_text()
    helpers.write_text(helpers.read_text().replace(lookup, '(dict "spec" (dict "replicas" 3))'))
    copy = helm_python.Chart.load(str(chart))
    rendered = copy.render({"replicas": 2, **cc.MINIMAL_OVERRIDES, **token}, name=cc.RELEASE, namespace=cc.NAMESPACE)
    assert "pre-upgrade" in str(rendered) and members(3) in str(rendered)
    assert "kind: Job" not in str(
        copy.render({"replicas": 3, **cc.MINIMAL_OVERRIDES, **token}, name=cc.RELEASE, namespace=cc.NAMESPACE)
    )


def test_with_tls_the_rebalance_job_connects_as_the_members_connect_to_each_other():
    """With TLS the Job trusts the server certificate's chain (plain TLS) or the client CA (mutual
    TLS, presenting the server certificate, as the members do to each other), mounted from the
    same Secrets as the pods'; without TLS it passes no TLS flag and mounts nothing."""
    change = {"replicas": 4, "rebalance": {"tokenSecret": {"name": "admin-token"}, "previousReplicas": 3}}
    plain = {"enabled": True, "existingSecret": "server-tls"}
    mutual = {**plain, "clientCA": {"enabled": True, "existingSecret": "client-ca"}}
    expected = {
        "off": ([], None),
        "tls": (["--tls-ca", "/etc/mnemosyne/tls/tls.crt"], ["tls"]),
        "mtls": (
            [
                "--tls-ca",
                "/etc/mnemosyne/client-ca/ca.crt",
                "--tls-cert",
                "/etc/mnemosyne/tls/tls.crt",
                "--tls-key",
                "/etc/mnemosyne/tls/tls.key",
            ],
            ["tls", "client-ca"],
        ),
    }
    for name, tls in (("off", {}), ("tls", {"tls": plain}), ("mtls", {"tls": mutual})):
        docs = cc.render_manifests({**cc.MINIMAL_OVERRIDES, **change, **tls})
        cc.validate_k8s(docs)
        (job,) = _jobs(docs)
        pod = job["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        flags, volumes = expected[name]
        assert container["args"][6:] == flags, name
        assert [v["name"] for v in pod.get("volumes", [])] == (volumes or []), name
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
        served = {m["name"]: m["mountPath"] for m in _container(docs)["volumeMounts"] if m["name"] in mounts}
        assert mounts == served, name  # the same files at the same paths as the pods'
        pod_volumes = {v["name"]: v for v in _sts(docs)["spec"]["template"]["spec"]["volumes"]}
        assert all(v == pod_volumes[v["name"]] for v in pod.get("volumes", [])), name


def test_unknown_value_keys_rejected():
    assert cc.check_jsonschema({"replica": 1}).returncode != 0
    assert (
        cc.check_jsonschema({"auth": {"tokens": [{"name": "a", "sha256": "nothex", "tenants": ["t"]}]}}).returncode != 0
    )


# ------------------------------------------------------------------ refusals


def test_auth_enabled_without_secret_refuses_to_render():
    msg = cc.render_error({})
    assert "auth.existingSecret" in msg and "auth.tokens" in msg
    msg = cc.render_error({"auth": {"enabled": True, "existingSecret": "", "tokens": []}})
    assert "auth.existingSecret" in msg


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"tls": {"enabled": True}}, "tls.existingSecret"),
        ({"tls": {"clientCA": {"enabled": True}}}, "needs tls.enabled"),
        ({"terminationGracePeriodSeconds": 20}, "must exceed server.graceSeconds"),
        ({"terminationGracePeriodSeconds": 25}, "server.graceSeconds + server.drainDelaySeconds (25)"),
        ({"podDisruptionBudget": {"enabled": True, "minAvailable": 1, "maxUnavailable": 1}}, "only one of"),
        ({"replication": {"url": "s3://bucket/prefix"}}, "needs replication.credentialsSecret"),
    ],
    ids=["tls-no-secret", "mtls-without-tls", "grace-period", "grace-plus-drain-delay", "pdb-both", "replica-no-keys"],
)
def test_unsafe_settings_refuse_to_render(values, fragment):
    assert fragment in cc.render_error(cc.deep_merge(cc.MINIMAL_OVERRIDES, values))


def test_auth_disabled_is_explicit_and_insecure():
    rendered = cc.render({"auth": {"enabled": False}})
    docs = cc.manifests(rendered)
    cm = _configmap_env(docs)
    assert cm["MNEMOSYNE_ALLOW_UNAUTHENTICATED"] == "1"
    assert cm["MNEMOSYNE_HOST"] == "0.0.0.0"
    assert "MNEMOSYNE_TOKENS_FILE" not in _env(_container(docs))
    assert not cc.find(docs, "Secret")
    notes = next(v for k, v in rendered.items() if k.endswith("NOTES.txt"))
    assert "UNAUTHENTICATED" in notes


# ------------------------------------------------------------------ validity


@pytest.mark.parametrize("which", ["minimal", "full"])
def test_manifests_lint_and_validate(which, minimal_docs, full_docs, full_values):
    values, docs = (cc.MINIMAL_OVERRIDES, minimal_docs) if which == "minimal" else (full_values, full_docs)
    cc.lint(values)
    cc.validate_k8s(docs)
    kinds = {d["kind"] for d in docs}
    assert {"StatefulSet", "Service", "ConfigMap", "ServiceAccount", "Pod"} <= kinds
    for doc in docs:
        assert doc["metadata"].get("namespace") == cc.NAMESPACE, doc["kind"]


def test_servicemonitor_shape_checker_catches_mistakes(full_docs):
    sm = json.loads(json.dumps(cc.one(full_docs, "ServiceMonitor")))
    cc.check_servicemonitor(sm)
    sm["spec"]["endpoints"][0]["interval"] = "thirty seconds"
    with pytest.raises(cc.CheckError):
        cc.check_servicemonitor(sm)


# ------------------------------------------------------------------ StatefulSet


@pytest.mark.parametrize("which", ["minimal", "full"])
def test_security_context(which, minimal_docs, full_docs):
    docs = minimal_docs if which == "minimal" else full_docs
    pod = _sts(docs)["spec"]["template"]["spec"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 10001
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = _container(docs)["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False


def test_replicas_and_headless_service(minimal_docs):
    sts = _sts(minimal_docs)
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["serviceName"] == HEADLESS
    headless = cc.one(minimal_docs, "Service", HEADLESS)
    assert headless["spec"]["clusterIP"] == "None"
    client = cc.one(minimal_docs, "Service", FULLNAME)
    assert client["spec"].get("clusterIP") != "None"
    assert client["spec"]["ports"][0]["port"] == 50051
    for svc in (headless, client):
        assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    assert {p["name"] for p in headless["spec"]["ports"]} == {"grpc", "metrics", "http"}


def test_probes_are_native_grpc_without_tls(minimal_docs):
    c = _container(minimal_docs)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["grpc"] == {"port": 50051}, probe
        assert "httpGet" not in c[probe]
    startup = c["startupProbe"]
    # generous enough for migrations: at least 2 minutes before liveness applies
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120


@pytest.mark.parametrize("mtls", [True, False], ids=["mtls", "tls-only"])
def test_probes_switch_to_http_with_tls(mtls):
    values = cc.deep_merge(
        cc.MINIMAL_OVERRIDES, {"tls": {"enabled": True, "existingSecret": "srv", "clientCA": {"enabled": mtls}}}
    )
    c = _container(_docs(values))
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["startupProbe"]["httpGet"]["port"] == "metrics"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert "grpc" not in c[probe]
    env = _env(c)
    assert env["MNEMOSYNE_TLS_CERT"] == "/etc/mnemosyne/tls/tls.crt"
    assert env["MNEMOSYNE_TLS_KEY"] == "/etc/mnemosyne/tls/tls.key"
    assert ("MNEMOSYNE_TLS_CLIENT_CA" in env) is mtls


def test_tls_secrets_are_mounted(full_docs):
    c = _container(full_docs)
    pod = _sts(full_docs)["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "mnemosyne-server-tls"
    assert volumes["client-ca"]["secret"]["secretName"] == "mnemosyne-client-ca"
    env = _env(c)
    for name, var in (
        ("tls", "MNEMOSYNE_TLS_CERT"),
        ("tls", "MNEMOSYNE_TLS_KEY"),
        ("client-ca", "MNEMOSYNE_TLS_CLIENT_CA"),
        ("tokens", "MNEMOSYNE_TOKENS_FILE"),
    ):
        assert mounts[name]["readOnly"] is True
        path = env[var]
        assert path.startswith(mounts[name]["mountPath"] + "/")
        filename = path.rsplit("/", 1)[1]
        assert filename in {i["path"] for i in volumes[name]["secret"]["items"]}


def test_volume_claim_templates_and_retention(minimal_docs, full_docs):
    for docs, expected in (
        (minimal_docs, {"whenDeleted": "Retain", "whenScaled": "Retain"}),
        (full_docs, {"whenDeleted": "Delete", "whenScaled": "Retain"}),
    ):
        sts = _sts(docs)
        assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == expected
        (vct,) = sts["spec"]["volumeClaimTemplates"]
        assert vct["metadata"]["name"] == "data"
        assert vct["spec"]["accessModes"] == ["ReadWriteOnce"]
        volumes = {v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]}
        assert "data" not in volumes  # comes from the claim template, per pod
        mounts = {m["name"]: m["mountPath"] for m in _container(docs)["volumeMounts"]}
        assert mounts["data"] == "/data"
        assert _configmap_env(docs)["MNEMOSYNE_DATA_DIR"] == "/data"
    assert _sts(full_docs)["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "local-ssd"


def test_persistence_disabled_uses_emptydir():
    docs = _docs(cc.deep_merge(cc.MINIMAL_OVERRIDES, {"persistence": {"enabled": False}}))
    sts = _sts(docs)
    assert "volumeClaimTemplates" not in sts["spec"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["data"]


def test_tmp_is_an_emptydir(minimal_docs):
    volumes = {v["name"]: v for v in _sts(minimal_docs)["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["tmp"]
    mounts = {m["name"]: m["mountPath"] for m in _container(minimal_docs)["volumeMounts"]}
    assert mounts["tmp"] == "/tmp"


def test_grace_period_exceeds_drain(minimal_docs, full_docs):
    for docs in (minimal_docs, full_docs):
        grace = int(_configmap_env(docs)["MNEMOSYNE_GRACE_SECONDS"])
        assert _sts(docs)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace


def test_settings_reach_the_server_as_env(full_docs):
    cm = _configmap_env(full_docs)
    assert cm["MNEMOSYNE_LOG_FORMAT"] == "text"
    assert cm["MNEMOSYNE_MAX_OPEN_TENANTS"] == "256" and cm["MNEMOSYNE_PAGE_CACHE_MIB"] == "128"
    assert cm["MNEMOSYNE_PORT"] == "50051" and cm["MNEMOSYNE_METRICS_PORT"] == "9464"
    assert "MNEMOSYNE_ALLOW_UNAUTHENTICATED" not in cm
    c = _container(full_docs)
    assert c["envFrom"] == [{"configMapRef": {"name": FULLNAME}}, {"secretRef": {"name": "mnemosyne-s3"}}]
    assert _env(c)["EXTRA_SETTING"] == "1"
    # Replication (docs/replication.md): the URL and settings in the ConfigMap, the keys from their Secret only.
    assert cm["MNEMOSYNE_REPLICA_URL"] == "s3://mnemosyne-replicas/prod?endpoint=https://s3.example.internal"
    assert cm["MNEMOSYNE_REPLICA_RETENTION"] == "43200" and cm["MNEMOSYNE_REPLICA_ACTIVE_LIMIT"] == "1000"
    assert not any(key.startswith("AWS_") for key in cm)
    assert "MNEMOSYNE_REPLICA_URL" not in _configmap_env(_docs(cc.MINIMAL_OVERRIDES))
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"grpc": 50051, "metrics": 9464, "http": 8080}
    # The HTTP port answers to the Service's names (its Host check), and no probe uses it.
    assert cm["MNEMOSYNE_HTTP_PORT"] == "8080"
    service = f"{FULLNAME}.{cc.NAMESPACE}"
    assert cm["MNEMOSYNE_HTTP_ALLOWED_HOST"].split(",")[:4] == [
        FULLNAME,
        service,
        f"{service}.svc",
        f"{service}.svc.cluster.local",
    ]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert "http" not in json.dumps(c[probe]).replace("httpGet", "")


# ------------------------------------------------------------------ secrets / config


def test_tokens_only_in_secret_never_in_configmaps(full_docs, full_values):
    tokens = full_values["auth"]["tokens"]
    secret = cc.one(full_docs, "Secret", f"{FULLNAME}-tokens")
    stored = json.loads(base64.b64decode(secret["data"]["tokens.json"]))
    assert stored == {"tokens": tokens}
    sensitive = {t["sha256"] for t in tokens} | {t["name"] for t in tokens}
    sensitive |= {tenant for t in tokens for tenant in t["tenants"] if tenant != "*"}
    for doc in full_docs:
        if doc["kind"] == "Secret":
            continue
        text = json.dumps(doc)
        leaked = [s for s in sensitive if f'"{s}"' in text or (len(s) == 64 and s in text)]
        assert not leaked, f"{doc['kind']}/{doc['metadata']['name']} leaks {leaked}"
    for cm in cc.find(full_docs, "ConfigMap"):
        if cm["metadata"]["name"] == f"{FULLNAME}-dashboard":
            continue  # files/dashboard.json as it is (compared below): no value reaches it
        blob = json.dumps(cm["data"]).lower()
        assert "token" not in blob.replace("mnemosyne_tokens_file", "")
        assert not any(s.lower() in blob for s in sensitive)


def test_existing_secret_is_used_and_nothing_generated(minimal_docs):
    assert not cc.find(minimal_docs, "Secret")
    volumes = {v["name"]: v for v in _sts(minimal_docs)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tokens"]["secret"]["secretName"] == "mnemosyne-tokens"
    assert volumes["tokens"]["secret"]["items"] == [{"key": "tokens.json", "path": "tokens.json"}]


def test_checksum_annotations_follow_config_and_tokens(full_values, full_docs):
    base = _sts(full_docs)["spec"]["template"]["metadata"]["annotations"]
    changed_cfg = _sts(_docs(cc.deep_merge(full_values, {"server": {"maxOpenTenants": 99}})))
    changed_tok = cc.deep_merge(full_values, {})
    changed_tok["auth"]["tokens"] = changed_tok["auth"]["tokens"][:1]
    changed_tok = _sts(_docs(changed_tok))
    a_cfg = changed_cfg["spec"]["template"]["metadata"]["annotations"]
    a_tok = changed_tok["spec"]["template"]["metadata"]["annotations"]
    assert a_cfg["checksum/config"] != base["checksum/config"]
    assert a_cfg["checksum/tokens"] == base["checksum/tokens"]
    assert a_tok["checksum/tokens"] != base["checksum/tokens"]


# ------------------------------------------------------------------ monitoring / policy / test pod


def test_monitoring(minimal_docs, full_docs):
    assert not cc.find(minimal_docs, "ServiceMonitor")
    ann = _sts(minimal_docs)["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == "9464"
    sm = cc.one(full_docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selected = [
        s
        for s in cc.find(full_docs, "Service")
        if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in selected] == [HEADLESS]
    assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in selected[0]["spec"]["ports"]}


def test_alerts_and_dashboard_are_off_by_default_and_rendered_from_the_chart_files(minimal_docs, full_docs):
    assert not cc.find(minimal_docs, "PrometheusRule")
    assert not [d for d in cc.find(minimal_docs, "ConfigMap") if d["metadata"]["name"] != FULLNAME]
    rule = cc.one(full_docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    shipped = cc.load_yaml(cc.ALERTS)
    alerts = [r["alert"] for r in rule["spec"]["groups"][0]["rules"]]
    assert alerts == [r["alert"] for r in shipped["groups"][0]["rules"]] and len(alerts) == 6
    # runbookUrl points each alert at its section of the operator's copy of docs/operations.md
    urls = [r["annotations"]["runbook_url"] for r in rule["spec"]["groups"][0]["rules"]]
    assert urls == [f"https://docs.example.com/mnemosyne/operations.html#{a.lower()}" for a in alerts]
    board = cc.one(full_docs, "ConfigMap", f"{FULLNAME}-dashboard")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's label
    assert board["metadata"]["annotations"] == {"grafana_folder": "Mnemosyne"}
    assert json.loads(board["data"]["mnemosyne.json"]) == json.loads(cc.DASHBOARD.read_text())


def test_the_dashboard_goes_where_the_sidecar_looks():
    # A sidecar with a label of its own: null drops the default label (as with helm --set).
    labels = {"dash": "yes", "grafana_dashboard": None}
    values = {"metrics": {"grafanaDashboard": {"enabled": True, "namespace": "monitoring", "labels": labels}}}
    docs = cc.render_manifests({**values, **cc.MINIMAL_OVERRIDES})
    cc.validate_k8s(docs)
    board = cc.one(docs, "ConfigMap", f"{FULLNAME}-dashboard")
    assert board["metadata"]["namespace"] == "monitoring"
    assert board["metadata"]["labels"]["dash"] == "yes" and "grafana_dashboard" not in board["metadata"]["labels"]


def test_prometheusrule_shape_checker_catches_mistakes(full_docs):
    rule = json.loads(json.dumps(cc.one(full_docs, "PrometheusRule")))
    cc.check_prometheusrule(rule)
    mistakes: list[Callable[[Manifest], object]] = [
        lambda r: r["spec"]["groups"][0]["rules"][0].pop("expr"),
        lambda r: r["spec"]["groups"][0]["rules"][0].update(record="x"),
        lambda r: r["spec"]["groups"][0]["rules"][0].update(severity="page"),
        lambda r: r["spec"].update(rules=[]),
    ]
    for mistake in mistakes:
        broken = json.loads(json.dumps(rule))
        mistake(broken)
        with pytest.raises(cc.CheckError):
            cc.check_prometheusrule(broken)


@pytest.mark.parametrize(
    "pdb, expected",
    [
        ({}, {"minAvailable": 1}),
        ({"minAvailable": 0}, {"minAvailable": 0}),
        ({"maxUnavailable": 1}, {"maxUnavailable": 1}),
    ],
    ids=["default", "min0", "max1"],
)
def test_pdb_budget(pdb, expected):
    values = cc.deep_merge(cc.MINIMAL_OVERRIDES, {"podDisruptionBudget": {"enabled": True, **pdb}})
    spec = cc.one(_docs(values), "PodDisruptionBudget")["spec"]
    assert {k: spec[k] for k in ("minAvailable", "maxUnavailable") if k in spec} == expected


def test_pdb_and_networkpolicy(minimal_docs, full_docs):
    assert not cc.find(minimal_docs, "PodDisruptionBudget")
    assert not cc.find(minimal_docs, "NetworkPolicy")
    labels = _sts(full_docs)["spec"]["selector"]["matchLabels"]
    pdb = cc.one(full_docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == labels and pdb["spec"]["minAvailable"] == 1
    np = cc.one(full_docs, "NetworkPolicy")
    assert np["spec"]["podSelector"]["matchLabels"] == labels
    grpc_rule, metrics_rule = np["spec"]["ingress"]
    assert grpc_rule["ports"] == [{"port": "grpc", "protocol": "TCP"}, {"port": "http", "protocol": "TCP"}]
    assert {"podSelector": {"matchLabels": {f"{FULLNAME}-client": "true"}}} in grpc_rule["from"]
    assert metrics_rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]


def test_helm_test_pod(minimal_docs, full_docs):
    for docs in (minimal_docs, full_docs):
        pod = cc.one(docs, "Pod")
        assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
        assert pod["metadata"]["labels"][f"{FULLNAME}-client"] == "true"
        (c,) = pod["spec"]["containers"]
        assert c["image"] == _container(docs)["image"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["restartPolicy"] == "Never"
    cmd = cc.one(minimal_docs, "Pod")["spec"]["containers"][0]["command"]
    assert cmd == ["mnemosyne", "health", "--target", f"{FULLNAME}.{cc.NAMESPACE}.svc:50051"]
    # with TLS the plaintext health client can't connect: /readyz on the metrics port instead
    tls_cmd = cc.one(full_docs, "Pod")["spec"]["containers"][0]["command"]
    assert "/readyz" in tls_cmd[-1] and f"{HEADLESS}.{cc.NAMESPACE}.svc:9464" in tls_cmd[-1]


# ------------------------------------------------------------------ image (static: no docker here)


def test_dockerfile_matches_the_chart():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    froms = [line for line in lines if line.startswith("FROM ")]
    assert len(froms) == 2 and froms[0].endswith("AS builder")
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in lines
    assert any(line.startswith("RUN pip wheel") for line in lines)
    assert "USER 10001:10001" in lines
    assert 'VOLUME ["/data"]' in lines
    assert "MNEMOSYNE_DATA_DIR=/data" in text
    assert "EXPOSE 50051 9464" in lines
    assert 'ENTRYPOINT ["mnemosyne", "serve"]' in lines
    healthcheck = next(i for i, line in enumerate(lines) if line.startswith("HEALTHCHECK"))
    assert "mnemosyne health --target" in lines[healthcheck + 1]
    # the chart relies on the entrypoint and the uid
    values = (cc.CHART_DIR / "values.yaml").read_text()
    assert "runAsUser: 10001" in values and "command:" not in values
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    assert ignore[[i for i, line in enumerate(ignore) if not line.startswith("#")][0]] == "*"
    for needed in ("!pyproject.toml", "!build_support/", "!service/", "!client/", "!protos/"):
        assert needed in ignore


def test_drain_delay_reaches_the_server():
    cm = _configmap_env(cc.manifests(cc.render(cc.MINIMAL_OVERRIDES)))
    assert cm["MNEMOSYNE_DRAIN_DELAY_SECONDS"] == "5"
    assert cm["MNEMOSYNE_GRACE_SECONDS"] == "20"
