"""Check 2: every rendered object validates against Kubernetes' own OpenAPI
schemas (kubernetes-validate, strict: unknown fields are errors), offline, for
the oldest Kubernetes the chart supports (Chart.yaml kubeVersion >= 1.29: native
sidecars), 1.33, and the newest the installed kubernetes-validate knows.

ServiceMonitor is a CRD (Prometheus Operator), which kubernetes-validate has no
schema for: it is checked against a small schema of the fields the chart uses,
written from the monitoring.coreos.com/v1 CRD."""

from __future__ import annotations

import jsonschema
import pytest
import yaml
from kubernetes_validate import utils as kv

from conftest import CHART_DIR, SCENARIOS, render, without_origin

OLDEST = "1.29.0"
VERSIONS = sorted({OLDEST, "1.33.0", kv.latest_version()}, key=lambda v: tuple(map(int, v.split("."))))

CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}

_DURATION = {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                           "labels": _LABELS, "annotations": _LABELS},
        },
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {"type": "object", "additionalProperties": False,
                             "properties": {"matchLabels": _LABELS, "matchExpressions": {"type": "array"}}},
                "namespaceSelector": {"type": "object", "additionalProperties": False,
                                      "properties": {"any": {"type": "boolean"},
                                                     "matchNames": {"type": "array", "items": {"type": "string"}}}},
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "port": {"type": "string"},
                        "path": {"type": "string"},
                        "scheme": {"enum": ["http", "https"]},
                        "interval": _DURATION,
                        "scrapeTimeout": _DURATION,
                        "tlsConfig": {"type": "object", "properties": {"insecureSkipVerify": {"type": "boolean"}}},
                        # SafeAuthorization: credentials is a SecretKeySelector.
                        "authorization": {"type": "object", "additionalProperties": False, "properties": {
                            "type": {"type": "string"},
                            "credentials": {"type": "object", "additionalProperties": False,
                                            "required": ["key"],
                                            "properties": {"name": {"type": "string"}, "key": {"type": "string"},
                                                           "optional": {"type": "boolean"}}}}},
                    },
                }},
            },
        },
    },
}


def validate(doc: dict, version: str) -> None:
    if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
        jsonschema.validate(doc, SERVICE_MONITOR_SCHEMA)
        return
    # Raises SchemaNotFoundError for a kind it does not know: that fails too.
    kv.validate(doc, version, strict=True)


def test_versions_are_supported_by_kubernetes_validate():
    known = kv.all_versions()
    assert OLDEST in known and "1.33.0" in known, known
    assert VERSIONS[0] == OLDEST and len(VERSIONS) >= 2
    chart_yaml = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert chart_yaml["kubeVersion"] == f">={OLDEST}-0"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("values", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_rendered_objects_validate(chart, values, version):
    docs = render(chart, values)
    for doc in docs:
        try:
            validate(without_origin(doc), version)
        except Exception as error:  # noqa: BLE001 - report which object failed
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} ({doc['__template__']}) "
                        f"does not validate against Kubernetes {version}: "
                        f"{getattr(error, 'message', error)} at {list(getattr(error, 'path', []))}")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_example_manifest_validates(version):
    for doc in yaml.safe_load_all((CHART_DIR / "examples" / "app-with-sidecar.yaml").read_text()):
        if doc:
            kv.validate(doc, version, strict=True)


def test_the_service_monitor_schema_catches_mistakes(chart):
    docs = render(chart, {"serviceMonitor": {"enabled": True}})
    monitor = without_origin(next(d for d in docs if d["kind"] == "ServiceMonitor"))
    validate(monitor, OLDEST)
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor, OLDEST)


def test_strict_validation_catches_a_misplaced_field(chart):
    """The validator is really strict: a field one level off is refused."""
    docs = render(chart)
    sts = without_origin(next(d for d in docs if d["kind"] == "StatefulSet"))
    sts["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFilesystem"] = True
    with pytest.raises(kv.ValidationError):
        validate(sts, OLDEST)
