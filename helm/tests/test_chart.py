"""Check 1: `helm lint --strict` with Helm's own library, renders for every
supported voter count and the sidecar example, and the values schema refusing
what it must."""

from __future__ import annotations

import pytest
import yaml

import helm_python as helm
from conftest import CHART_DIR, SCENARIOS, find, kinds_and_names, render, render_files

@pytest.mark.parametrize("values", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_lint_strict(values):
    report = helm.lint(CHART_DIR, values, strict=True, namespace="ns1", kube_version="v1.29.0")
    # Severity 1 is informational ("icon is recommended"); strict lint fails on
    # warnings (2) and errors (3).
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], report


def test_chart_metadata_matches_the_workspace(chart):
    meta = chart.metadata
    assert meta["apiVersion"] == "v2"
    assert chart.schema is not None, "values.schema.json must ship with the chart"
    cargo = (CHART_DIR.parent.parent / "Cargo.toml").read_text()
    workspace_version = next(line.split('"')[1] for line in cargo.splitlines()
                             if line.startswith("version = "))
    assert meta["appVersion"] == workspace_version
    assert chart.values["image"]["repository"] == "ghcr.io/baton-dev/baton"


@pytest.mark.parametrize("replicas", [1, 3, 5])
def test_renders_for_each_voter_count(chart, replicas):
    docs = render(chart, {"replicas": replicas})
    sts = find(docs, "StatefulSet", "locks-baton")
    assert sts["spec"]["replicas"] == replicas
    assert kinds_and_names(docs) == [
        ("Pod", "locks-baton-test-lock"),
        ("PodDisruptionBudget", "locks-baton"),
        ("Secret", "locks-baton-cluster-secret"),
        ("Service", "locks-baton"),
        ("Service", "locks-baton-headless"),
        ("StatefulSet", "locks-baton"),
    ]


@pytest.mark.parametrize("native", [True, False])
def test_renders_the_sidecar_example(chart, native):
    docs = render(chart, {"sidecarExample": {"enabled": True, "native": native}})
    pod = find(docs, "Deployment", "locks-baton-sidecar-example")["spec"]["template"]["spec"]
    where = pod.get("initContainers", []) if native else pod["containers"]
    assert [c["name"] for c in where if c["name"] == "baton-proxy"] == ["baton-proxy"]


def test_templates_only_renders_no_object(chart):
    assert render(chart, {"templatesOnly": True}) == []


def test_notes_give_next_steps(chart):
    notes = render_files(chart)["baton/templates/NOTES.txt"]
    for step in ("kubectl -n ns1 port-forward svc/locks-baton 7878:7878",
                 "/v1/locks/demo:acquire", "helm test locks -n ns1",
                 'include "baton.sidecar"', "examples/app-with-sidecar.yaml"):
        assert step in notes


SCHEMA_REFUSALS = {
    "4 voters": ({"replicas": 4}, "/replicas"),
    "2 voters": ({"replicas": 2}, "/replicas"),
    "0 voters": ({"replicas": 0}, "/replicas"),
    "replicas as a string": ({"replicas": "3"}, "/replicas"),
    "replicas as a fraction": ({"replicas": 3.5}, "/replicas"),
    "a misspelt key": ({"replica": 3}, "replica"),
    "tls without its secret": ({"tls": {"enabled": True}}, "/tls/existingSecret"),
    "an extra arg that is no flag": ({"extraArgs": ["serve"]}, "/extraArgs/0"),
    "an unknown anti-affinity mode": ({"podAntiAffinity": "sometimes"}, "/podAntiAffinity"),
    "a token in clear in the auth file": (
        {"auth": {"enabled": True, "file": {"principals": [{"name": "a", "role": "client", "tokens": ["s3cret"]}]}}},
        "/auth/file/principals/0/tokens/0"),
    "an unknown role": (
        {"auth": {"enabled": True, "file": {"principals": [{"name": "a", "role": "root"}]}}},
        "/auth/file/principals/0/role"),
    "a misspelt principal field": (
        {"auth": {"enabled": True, "file": {"principals": [{"name": "a", "role": "client", "lock": ["a/"]}]}}},
        "lock"),
    "an OpenTelemetry sampler the SDKs do not have": ({"otel": {"sampler": "sometimes"}}, "/otel/sampler"),
    "a sampler ratio above 1": ({"otel": {"samplerArg": "1.5"}}, "/otel/samplerArg"),
    # Baton exports OTLP/HTTP protobuf only: a pod told grpc would never start.
    "an OTLP protocol Baton refuses": ({"otel": {"protocol": "grpc"}}, "/otel/protocol"),
    "a misspelt dashboard key": ({"grafanaDashboard": {"enable": True}}, "enable"),
    "an unknown endpoint access": (
        {"auth": {"enabled": True, "file": {"principals": [{"name": "a", "role": "admin"}],
                                            "endpoints": {"metrics": "public"}}}},
        "/auth/file/endpoints/metrics"),
}


@pytest.mark.parametrize("values,where", SCHEMA_REFUSALS.values(), ids=SCHEMA_REFUSALS.keys())
def test_schema_refuses(chart, values, where):
    with pytest.raises(helm.HelmValuesError) as refused:
        render_files(chart, values)
    message = str(refused.value)
    assert "schema" in message and where in message, message


ADMIN = {"name": "ops", "role": "admin", "tokens": ["sha256:" + "0" * 64]}

TEMPLATE_REFUSALS = {
    "a grace period shorter than the shutdown": (
        {"terminationGracePeriodSeconds": 12, "shutdownTimeoutSeconds": 10},
        "terminationGracePeriodSeconds (12) must be at least"),
    "a PDB that lets a drain break the majority": (
        {"podDisruptionBudget": {"maxUnavailable": 2}}, "would let a drain take the majority"),
    "an auth Secret while auth is off": (
        {"auth": {"existingSecret": "baton-auth"}}, "but auth.enabled is false"),
    "auth on without a file": (
        {"auth": {"enabled": True}, "tests": {"enabled": False}}, "auth.enabled needs auth.existingSecret"),
    "auth on with a file of no principal": (
        {"auth": {"enabled": True, "file": {"principals": []}}, "tests": {"enabled": False}},
        "auth.enabled needs auth.existingSecret"),
    "both an auth Secret and an auth file": (
        {"auth": {"enabled": True, "existingSecret": "x", "file": {"principals": [ADMIN]}},
         "tests": {"enabled": False}}, "not both"),
    "health endpoints for admins only (the probes carry no token)": (
        {"auth": {"enabled": True, "file": {"principals": [ADMIN], "endpoints": {"health": "admin"}}},
         "tests": {"enabled": False}}, "kubelet's probes"),
    "the helm test without a token while auth is on": (
        {"auth": {"enabled": True, "existingSecret": "x"}}, "needs tests.tokenSecret.name"),
    "a ServiceMonitor without a token while metrics are admin-only": (
        {"auth": {"enabled": True, "file": {"principals": [ADMIN]}}, "tests": {"enabled": False},
         "serviceMonitor": {"enabled": True}}, "set serviceMonitor.bearerTokenSecret.name"),
}


@pytest.mark.parametrize("values,message", TEMPLATE_REFUSALS.values(), ids=TEMPLATE_REFUSALS.keys())
def test_template_refuses(chart, values, message):
    with pytest.raises(helm.HelmRenderError) as refused:
        render_files(chart, values)
    assert message in str(refused.value)


def test_five_voters_may_lose_two_to_a_drain(chart):
    docs = render(chart, {"replicas": 5, "podDisruptionBudget": {"maxUnavailable": 2}})
    assert find(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 2


def test_default_values_file_is_what_the_schema_accepts(chart):
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    chart.validate_schema(defaults)
