"""The baton.sidecar template: both forms, usable from another chart (as a
dependency with templatesOnly, or with _sidecar.tpl copied), and the plain
example manifest kept identical to what the template renders."""

from __future__ import annotations

import shutil
import textwrap

import pytest
import yaml

import helm_python as helm
from conftest import CHART_DIR, find, render

APP_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
spec:
  selector:
    matchLabels: {app: shop}
  template:
    metadata:
      labels: {app: shop}
    spec:
      initContainers:
        {{- include "baton.sidecar" (dict "native" true "fullname" "baton" "namespace" "coord" "replicas" 5) | nindent 8 }}
      containers:
        - name: shop
          image: registry.example/shop:1
        {{- include "baton.sidecar" (dict "name" "baton-proxy-plain" "urls" (list "http://a:7878" "http://b:7878") "port" 9000 "readinessPath" "/healthz") | nindent 8 }}
"""


def sidecar_of(docs, name="locks-baton-sidecar-example", native=True):
    spec = find(docs, "Deployment", name)["spec"]["template"]["spec"]
    return next(c for c in spec.get("initContainers" if native else "containers", [])
                if c["name"].startswith("baton-proxy"))


def args_of(container):
    return dict(a.split("=", 1) if "=" in a else (a, None) for a in container["args"])


@pytest.mark.parametrize("replicas", [1, 3, 5])
@pytest.mark.parametrize("native", [True, False])
def test_sidecar_forms(chart, replicas, native):
    docs = render(chart, {"replicas": replicas, "sidecarExample": {"enabled": True, "native": native}})
    c = sidecar_of(docs, native=native)
    assert c["command"] == ["/usr/local/bin/baton"]
    assert c["args"][0] == "serve"
    args = args_of(c)
    assert args["--proxy"].split(",") == [
        f"http://locks-baton-{i}.locks-baton-headless.ns1.svc.cluster.local:7878" for i in range(replicas)]
    assert args["--listen"] == "127.0.0.1:7878"
    if native:
        assert c["restartPolicy"] == "Always"
    else:
        assert "restartPolicy" not in c
    assert c["startupProbe"]["exec"]["command"] == [
        "/usr/local/bin/baton", "probe", "http://127.0.0.1:7878/healthz"]
    assert c["livenessProbe"]["exec"]["command"][-1] == "http://127.0.0.1:7878/healthz"
    assert c["readinessProbe"]["exec"]["command"][-1] == "http://127.0.0.1:7878/readyz"
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["runAsNonRoot"] and sc["capabilities"] == {"drop": ["ALL"]}
    assert "ports" not in c  # loopback only
    # The same image as the voters.
    assert c["image"] == find(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["image"]


def test_template_default_image_is_the_app_version(chart):
    source = (CHART_DIR / "templates" / "_sidecar.tpl").read_text()
    assert f'"ghcr.io/baton-dev/baton:{chart.metadata["appVersion"]}"' in source


def test_example_manifest_is_what_the_template_renders(chart):
    """examples/app-with-sidecar.yaml holds the sidecar the chart renders for
    `helm install baton ./helm/baton -n baton` (3 voters)."""
    docs = render(chart, {"sidecarExample": {"enabled": True}}, name="baton", namespace="baton")
    rendered = sidecar_of(docs, "baton-sidecar-example")
    (example,) = [d for d in yaml.safe_load_all((CHART_DIR / "examples" / "app-with-sidecar.yaml").read_text()) if d]
    assert example["kind"] == "Deployment"
    pod = example["spec"]["template"]["spec"]
    assert pod["initContainers"] == [rendered]
    assert {"name": "BATON_URL", "value": "http://127.0.0.1:7878"} in pod["containers"][0]["env"]


def write_app_chart(root, *, dependency: bool):
    app = root / "shop"
    (app / "templates").mkdir(parents=True)
    chart_yaml = {"apiVersion": "v2", "name": "shop", "version": "1.0.0"}
    values = {}
    if dependency:
        chart_yaml["dependencies"] = [{"name": "baton", "version": "0.1.0", "repository": "file://../baton"}]
        shutil.copytree(CHART_DIR, app / "charts" / "baton")
        values = {"baton": {"templatesOnly": True}}
    else:
        shutil.copy(CHART_DIR / "templates" / "_sidecar.tpl", app / "templates" / "_baton_sidecar.tpl")
    (app / "Chart.yaml").write_text(yaml.safe_dump(chart_yaml))
    (app / "values.yaml").write_text(yaml.safe_dump(values))
    (app / "templates" / "deployment.yaml").write_text(APP_DEPLOYMENT)
    return app


@pytest.mark.parametrize("dependency", [True, False], ids=["as a dependency", "copied"])
def test_usable_from_another_chart(tmp_path, dependency):
    app = write_app_chart(tmp_path, dependency=dependency)
    with helm.Chart.load(app) as shop:
        files = shop.render({}, name="shop", namespace="shop")
    docs = [d for path, text in files.items() if not path.endswith("NOTES.txt")
            for d in yaml.safe_load_all(text) if d]
    # templatesOnly: the dependency contributes the template and no object.
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("Deployment", "shop")]
    spec = docs[0]["spec"]["template"]["spec"]
    (native,) = spec["initContainers"]
    assert native["restartPolicy"] == "Always"
    assert args_of(native)["--proxy"].split(",") == [
        f"http://baton-{i}.baton-headless.coord.svc.cluster.local:7878" for i in range(5)]
    plain = spec["containers"][1]
    assert plain["name"] == "baton-proxy-plain" and "restartPolicy" not in plain
    assert args_of(plain)["--proxy"] == "http://a:7878,http://b:7878"
    assert args_of(plain)["--listen"] == "127.0.0.1:9000"
    assert plain["readinessProbe"]["exec"]["command"][-1] == "http://127.0.0.1:9000/healthz"


def test_sidecar_needs_a_namespace_or_urls(tmp_path):
    app = write_app_chart(tmp_path, dependency=False)
    (app / "templates" / "deployment.yaml").write_text(textwrap.dedent("""\
        containers:
          {{- include "baton.sidecar" (dict "native" false) | nindent 2 }}
        """))
    with helm.Chart.load(app) as shop, pytest.raises(helm.HelmRenderError) as refused:
        shop.render({}, name="shop", namespace="shop")
    assert "pass \"namespace\"" in str(refused.value)
