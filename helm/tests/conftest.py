"""Shared helpers for the chart checks: load the chart once with Helm's own
library (helm-python-sdk) and render it to parsed manifests."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

import helm_python as helm

CHART_DIR = Path(__file__).resolve().parent.parent / "baton"
RELEASE = "locks"
NAMESPACE = "ns1"


# A token digest (of "chart-test-token"): the auth file holds digests only.
DIGEST = "sha256:" + hashlib.sha256(b"chart-test-token").hexdigest()

# Value sets every check renders: defaults, each voter count, each optional part.
SCENARIOS = {
    "defaults": {},
    "1 voter": {"replicas": 1},
    "5 voters": {"replicas": 5},
    "sidecar example (native)": {"sidecarExample": {"enabled": True}},
    "sidecar example (plain container)": {"sidecarExample": {"enabled": True, "native": False}},
    "everything on": {
        "replicas": 5,
        "auth": {"enabled": True, "existingSecret": "baton-auth"},
        "tests": {"tokenSecret": {"name": "baton-test-token"}},
        "tls": {"enabled": True, "existingSecret": "baton-tls", "clientCaKey": "ca.crt"},
        "clusterSecret": {"existingSecret": "my-secret", "key": "secret"},
        "serviceMonitor": {"enabled": True, "bearerTokenSecret": {"name": "baton-metrics-token"}},
        "networkPolicy": {"enabled": True},
        "otel": {"endpoint": "http://otel:4318", "serviceName": "baton", "sampler": "parentbased_traceidratio",
                 "samplerArg": "0.1"},
        "grafanaDashboard": {"enabled": True},
        "sidecarExample": {"enabled": True},
    },
    "auth file from values": {
        "auth": {"enabled": True, "file": {
            "principals": [
                {"name": "billing", "role": "client", "tokens": [DIGEST], "locks": ["billing/", "helm-test-"],
                 "watch": ["billing/"]},
                {"name": "ops", "role": "admin", "tokens": ["sha256:" + "0" * 64]},
            ],
            "endpoints": {"health": "open", "metrics": "open"}}},
        "tests": {"tokenSecret": {"name": "baton-test-token", "key": "token"}},
        "serviceMonitor": {"enabled": True},
    },
    "templates only": {"templatesOnly": True},
}


@pytest.fixture(scope="session")
def chart():
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


def render_files(chart, values: dict[str, Any] | None = None, *, name: str = RELEASE,
                 namespace: str = NAMESPACE) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` would produce it."""
    return chart.render(copy.deepcopy(values or {}), name=name, namespace=namespace,
                        is_install=True)


def render(chart, values: dict[str, Any] | None = None, **kwargs) -> list[dict[str, Any]]:
    """The rendered Kubernetes objects (NOTES.txt and empty documents left out)."""
    docs = []
    for path, text in sorted(render_files(chart, values, **kwargs).items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("__template__", path)
                docs.append(doc)
    return docs


def without_origin(doc: dict[str, Any]) -> dict[str, Any]:
    """The object without the template path render() adds."""
    return {k: v for k, v in doc.items() if k != "__template__"}


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The one object of this kind (and name): fails when there is none or several."""
    found = [d for d in docs if d["kind"] == kind
             and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def kinds_and_names(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)
