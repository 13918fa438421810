"""Check 3: what the rendered voters look like (peers, services, PDB, security,
the cluster secret, optional parts that appear only when asked for)."""

from __future__ import annotations

import base64
import json

import yaml

import pytest

from conftest import CHART_DIR, DIGEST, find, render, render_files

FQDN = "locks-baton-{i}.locks-baton-headless.ns1.svc.{domain}"


def voter_pod(docs):
    return find(docs, "StatefulSet", "locks-baton")["spec"]["template"]


def voter(docs):
    containers = voter_pod(docs)["spec"]["containers"]
    assert [c["name"] for c in containers] == ["baton"]
    return containers[0]


def flag(container, name):
    """The value of --name=value in the container's args (None if absent)."""
    values = [a.split("=", 1)[1] for a in container["args"] if a.startswith(f"--{name}=")]
    assert len(values) <= 1, f"--{name} appears {len(values)} times"
    return values[0] if values else None


def env(container):
    return {e["name"]: e for e in container.get("env", [])}


@pytest.mark.parametrize("replicas", [1, 3, 5])
@pytest.mark.parametrize("domain", ["cluster.local", "corp.example"])
def test_peers_list_every_voter_by_fqdn(chart, replicas, domain):
    c = voter(render(chart, {"replicas": replicas, "clusterDomain": domain}))
    peers = dict(p.split("=", 1) for p in flag(c, "peers").split(","))
    assert peers == {str(i + 1): f"http://{FQDN.format(i=i, domain=domain)}:7879" for i in range(replicas)}
    suffix = f"locks-baton-headless.ns1.svc.{domain}"
    assert flag(c, "advertise-api") == f"http://$(POD_NAME).{suffix}:7878"
    assert flag(c, "advertise-raft") == f"http://$(POD_NAME).{suffix}:7879"


def test_voter_container(chart):
    docs = render(chart)
    sts = find(docs, "StatefulSet", "locks-baton")
    c = voter(docs)
    assert c["command"] == ["/usr/local/bin/baton"]
    assert c["image"] == "ghcr.io/baton-dev/baton:0.1.0"
    assert c["args"][0] == "serve"
    assert "--node-id-from-hostname" in c["args"]
    assert flag(c, "listen") == "0.0.0.0:7878"
    assert flag(c, "raft-listen") == "0.0.0.0:7879"
    assert flag(c, "data-dir") == "/var/lib/baton"
    assert env(c)["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"api": 7878, "raft": 7879}
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["serviceName"] == "locks-baton-headless"
    # The pod labels carry the selector.
    selector = sts["spec"]["selector"]["matchLabels"]
    assert selector.items() <= sts["spec"]["template"]["metadata"]["labels"].items()


def test_volume_per_pod(chart):
    docs = render(chart, {"persistence": {"size": "5Gi", "storageClass": "fast-ssd"}})
    sts = find(docs, "StatefulSet")
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert {"name": "data", "mountPath": "/var/lib/baton"} in voter(docs)["volumeMounts"]
    default_claim = find(render(chart), "StatefulSet")["spec"]["volumeClaimTemplates"][0]
    assert "storageClassName" not in default_claim["spec"]
    no_provisioner = find(render(chart, {"persistence": {"storageClass": "-"}}), "StatefulSet")
    assert no_provisioner["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == ""


def test_services(chart):
    docs = render(chart)
    pod_labels = voter_pod(docs)["metadata"]["labels"]
    headless = find(docs, "Service", "locks-baton-headless")["spec"]
    assert headless["clusterIP"] == "None"
    assert headless["publishNotReadyAddresses"] is True
    assert {p["name"]: p["port"] for p in headless["ports"]} == {"api": 7878, "raft": 7879}
    client = find(docs, "Service", "locks-baton")["spec"]
    assert client["type"] == "ClusterIP" and "clusterIP" not in client
    assert client["ports"] == [{"name": "api", "port": 7878, "targetPort": "api", "protocol": "TCP"}]
    for spec in (headless, client):
        assert spec["selector"].items() <= pod_labels.items()


def test_disruption_budget_and_grace_period(chart):
    docs = render(chart)
    pdb = find(docs, "PodDisruptionBudget", "locks-baton")["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"].items() <= voter_pod(docs)["metadata"]["labels"].items()
    spec = voter_pod(docs)["spec"]
    shutdown = int(flag(voter(docs), "shutdown-timeout-s"))
    assert shutdown == 10
    assert spec["terminationGracePeriodSeconds"] == 30 >= shutdown + 5
    longer = render(chart, {"shutdownTimeoutSeconds": 40, "terminationGracePeriodSeconds": 50})
    assert flag(voter(longer), "shutdown-timeout-s") == "40"
    assert voter_pod(longer)["spec"]["terminationGracePeriodSeconds"] == 50
    assert not [d for d in render(chart, {"podDisruptionBudget": {"enabled": False}})
                if d["kind"] == "PodDisruptionBudget"]


def test_probes(chart):
    c = voter(render(chart))
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "api", "scheme": "HTTP"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "api", "scheme": "HTTP"}
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "api", "scheme": "HTTP"}


def test_security_context_and_resources(chart):
    docs = render(chart)
    pod = voter_pod(docs)["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["fsGroup"] == 10001
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    sc = voter(docs)["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001 and sc["runAsGroup"] == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    resources = voter(docs)["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]
    # Read-only root: the only writable places are the volume and /tmp.
    assert {m["mountPath"] for m in voter(docs)["volumeMounts"]} == {"/var/lib/baton", "/tmp"}


@pytest.mark.parametrize("mode", ["soft", "hard", "none"])
def test_anti_affinity(chart, mode):
    docs = render(chart, {"podAntiAffinity": mode})
    pod = voter_pod(docs)
    affinity = pod["spec"].get("affinity", {}).get("podAntiAffinity", {})
    if mode == "soft":
        (term,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
        term = term["podAffinityTerm"]
    elif mode == "hard":
        (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    else:
        assert affinity == {}
        return
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_created_cluster_secret_is_referenced_and_kept(chart):
    docs = render(chart)
    ref = env(voter(docs))["BATON_CLUSTER_SECRET"]["valueFrom"]["secretKeyRef"]
    secret = find(docs, "Secret", ref["name"])
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    value = base64.b64decode(secret["data"][ref["key"]]).decode()
    assert len(value) == 48 and value.isalnum()
    # Without a cluster to look it up in, each render draws a new value.
    again = find(render(chart), "Secret", ref["name"])
    assert again["data"][ref["key"]] != secret["data"][ref["key"]]


def test_a_second_accepted_secret_is_optional_and_from_the_same_secret(chart):
    docs = render(chart)
    voter_env = env(voter(docs))
    sent = voter_env["BATON_CLUSTER_SECRET"]["valueFrom"]["secretKeyRef"]
    accepted = voter_env["BATON_ACCEPT_CLUSTER_SECRET"]["valueFrom"]["secretKeyRef"]
    assert accepted == {"name": sent["name"], "key": "also-accept", "optional": True}
    # Offline renders find no Secret to carry a rotation over from: one key only.
    assert list(find(docs, "Secret", sent["name"])["data"]) == [sent["key"]]


def test_existing_cluster_secret(chart):
    docs = render(chart, {"clusterSecret": {"existingSecret": "mine", "key": "token"}})
    assert not [d for d in docs if d["kind"] == "Secret"]
    ref = env(voter(docs))["BATON_CLUSTER_SECRET"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "mine", "key": "token"}


def security_flags(container):
    return [a for a in container["args"] if a.startswith(("--auth", "--tls"))]


def test_no_auth_or_tls_unless_enabled(chart):
    docs = render(chart)
    c = voter(docs)
    assert security_flags(c) == []
    assert "--insecure-plaintext-peers" in c["args"], "plaintext peers are acknowledged"
    assert {v["name"] for v in voter_pod(docs)["spec"]["volumes"]} == {"tmp"}
    assert all(u.startswith("http://") for u in [flag(c, "advertise-api"), flag(c, "advertise-raft")])


AUTH_ON = {"auth": {"enabled": True, "existingSecret": "baton-auth"},
           "tests": {"tokenSecret": {"name": "baton-test-token"}}}


def test_auth_file_from_an_existing_secret(chart):
    docs = render(chart, AUTH_ON)
    c = voter(docs)
    assert security_flags(c) == ["--auth-file=/etc/baton/auth/auth.yaml"]
    # The whole directory (a subPath mount would never see the Secret's updates).
    mount = next(m for m in c["volumeMounts"] if m["name"] == "auth")
    assert mount == {"name": "auth", "mountPath": "/etc/baton/auth", "readOnly": True}
    volume = next(v for v in voter_pod(docs)["spec"]["volumes"] if v["name"] == "auth")
    assert volume["secret"]["secretName"] == "baton-auth"
    # The chart creates no auth Secret of its own then.
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"] == ["locks-baton-cluster-secret"]
    # Probes stay the plain httpGet ones: /healthz and /readyz are open by default.
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_auth_file_from_values_becomes_a_secret(chart):
    # Every field a principal may have, certificates and quota included (the
    # schema once refused both).
    auth_file = {"principals": [{"name": "billing", "role": "client", "tokens": [DIGEST],
                                 "certificates": ["billing.client"],
                                 "quota": {"leases": 10, "holdings": 20, "waiters": 5, "idempotency_keys": 100,
                                           "requests_per_second": 50, "burst": 100},
                                 "locks": ["billing/"], "watch": ["billing/"]}],
                 "endpoints": {"metrics": "open"}}
    docs = render(chart, {"auth": {"enabled": True, "file": auth_file, "key": "policy.json",
                                   "mountPath": "/etc/baton-auth"},
                          "tests": {"enabled": False}})
    c = voter(docs)
    assert security_flags(c) == ["--auth-file=/etc/baton-auth/policy.json"]
    secret = find(docs, "Secret", "locks-baton-auth")
    assert secret["type"] == "Opaque" and list(secret["data"]) == ["policy.json"]
    # The file round-trips: what the binary reads is what the values said.
    assert yaml.safe_load(base64.b64decode(secret["data"]["policy.json"])) == auth_file
    volume = next(v for v in voter_pod(docs)["spec"]["volumes"] if v["name"] == "auth")
    assert volume["secret"]["secretName"] == "locks-baton-auth"
    assert {"name": "auth", "mountPath": "/etc/baton-auth", "readOnly": True} in c["volumeMounts"]
    # No rollout annotation tied to the file: a change is re-read live, not by a restart.
    assert not voter_pod(docs)["metadata"].get("annotations")


def test_helm_test_pod_with_auth_reads_its_token_from_a_secret(chart):
    pod = find(render(chart, AUTH_ON), "Pod", "locks-baton-test-lock")
    (c,) = pod["spec"]["containers"]
    assert env(c)["BATON_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "baton-test-token", "key": "token"}}
    script = c["command"][2]
    # The token goes to curl as a config line on stdin, never on a command line.
    assert 'printf \'header = "Authorization: Bearer %s"\\n\' "$BATON_TOKEN" | curl -K -' in script
    assert [line for line in script.splitlines() if "$BATON_TOKEN" in line] == [
        '  printf \'header = "Authorization: Bearer %s"\\n\' "$BATON_TOKEN" | curl -K - \\']
    assert "BATON_TOKEN" not in find(render(chart), "Pod", "locks-baton-test-lock")["spec"]["containers"][0]["command"][2]


def test_notes_show_the_bearer_header_with_auth(chart):
    notes = render_files(chart, AUTH_ON)["baton/templates/NOTES.txt"]
    assert 'AUTH="Authorization: Bearer <token>"' in notes
    assert 'curl -s -H "$AUTH" -XPOST localhost:7878/v1/locks/demo:acquire' in notes
    assert "or an admin principal's token" in notes
    open_notes = render_files(chart)["baton/templates/NOTES.txt"]
    assert "Authorization" not in open_notes and "turn on\n   auth.enabled" in open_notes


@pytest.mark.parametrize("client_ca", ["", "ca.crt"])
def test_tls_when_enabled(chart, client_ca):
    docs = render(chart, {"tls": {"enabled": True, "existingSecret": "baton-tls", "clientCaKey": client_ca},
                          "sidecarExample": {"enabled": True}})
    c = voter(docs)
    expected = ["--tls-cert=/etc/baton/tls/tls.crt", "--tls-key=/etc/baton/tls/tls.key",
                "--tls-peer-ca=/etc/baton/tls/ca.crt"]
    if client_ca:
        expected.append("--tls-client-ca=/etc/baton/tls/ca.crt")
    assert security_flags(c) == expected
    assert "--insecure-plaintext-peers" not in c["args"]
    assert {"name": "tls", "mountPath": "/etc/baton/tls", "readOnly": True} in c["volumeMounts"]
    volume = next(v for v in voter_pod(docs)["spec"]["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == "baton-tls"
    # Every URL switches to https, and the probes with them.
    assert all(p.split("=", 1)[1].startswith("https://") for p in flag(c, "peers").split(","))
    assert flag(c, "advertise-api").startswith("https://")
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    example = find(docs, "Deployment")["spec"]["template"]["spec"]
    proxy = example["initContainers"][0]
    assert all(u.startswith("https://") for u in flag(proxy, "proxy").split(","))
    # The proxy verifies the voters against their CA, mounted from the TLS Secret.
    assert flag(proxy, "tls-peer-ca") == "/etc/baton/ca/ca.crt"
    assert {"name": "baton-ca", "mountPath": "/etc/baton/ca", "readOnly": True} in proxy["volumeMounts"]
    (ca,) = example["volumes"]
    assert ca["secret"] == {"secretName": "baton-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    test_pod = find(docs, "Pod")
    assert "--cacert /etc/baton/tls/ca.crt" in test_pod["spec"]["containers"][0]["command"][2]


def test_otel_env_only_when_set(chart):
    names = set(env(voter(render(chart))))
    assert names == {"POD_NAME", "BATON_CLUSTER_SECRET", "BATON_ACCEPT_CLUSTER_SECRET"}
    otel = {"endpoint": "http://collector.obs:4317", "serviceName": "baton", "sampler": "parentbased_traceidratio",
            "samplerArg": "0.25", "protocol": "http/protobuf", "resourceAttributes": "deployment.environment=prod"}
    got = {k: v.get("value") for k, v in env(voter(render(chart, {"otel": otel}))).items()}
    assert got["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector.obs:4317"
    assert got["OTEL_SERVICE_NAME"] == "baton"
    assert got["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    assert got["OTEL_TRACES_SAMPLER_ARG"] == "0.25"
    assert got["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert got["OTEL_RESOURCE_ATTRIBUTES"] == "deployment.environment=prod"
    only_endpoint = set(env(voter(render(chart, {"otel": {"endpoint": "http://c:4317"}}))))
    assert only_endpoint == {"POD_NAME", "BATON_CLUSTER_SECRET", "BATON_ACCEPT_CLUSTER_SECRET",
                             "OTEL_EXPORTER_OTLP_ENDPOINT"}
    disabled = env(voter(render(chart, {"otel": {"endpoint": "http://c:4318", "sdkDisabled": True}})))
    assert disabled["OTEL_SDK_DISABLED"] == {"name": "OTEL_SDK_DISABLED", "value": "true"}
    assert "OTEL_SDK_DISABLED" not in env(voter(render(chart, {"otel": {"sdkDisabled": False}})))


def test_otel_ca_secret_is_mounted_and_named(chart):
    plain = voter(render(chart, {"otel": {"endpoint": "https://collector.obs:4318"}}))
    assert "OTEL_EXPORTER_OTLP_CERTIFICATE" not in env(plain)
    assert not [v for v in plain["volumeMounts"] if v["name"] == "otel-ca"]
    docs = render(chart, {"otel": {"endpoint": "https://collector.obs:4318", "caSecret": "collector-ca",
                                   "caKey": "root.pem"}})
    container = voter(docs)
    assert env(container)["OTEL_EXPORTER_OTLP_CERTIFICATE"]["value"] == "/etc/baton/otel-ca/root.pem"
    (mount,) = [v for v in container["volumeMounts"] if v["name"] == "otel-ca"]
    assert mount == {"name": "otel-ca", "mountPath": "/etc/baton/otel-ca", "readOnly": True}
    pod = find(docs, "StatefulSet")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "otel-ca"]
    assert volume["secret"] == {"secretName": "collector-ca", "items": [{"key": "root.pem", "path": "root.pem"}]}


def test_grafana_dashboard_config_map_only_when_enabled(chart):
    assert not [d for d in render(chart) if d["kind"] == "ConfigMap"]
    docs = render(chart, {"grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Baton"}}})
    config_map = find(docs, "ConfigMap", "locks-baton-dashboard")
    # Grafana's dashboard sidecar loads ConfigMaps by this label.
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Baton"}
    shipped = json.loads((CHART_DIR / "dashboards" / "baton.json").read_text())
    assert json.loads(config_map["data"]["baton.json"]) == shipped
    assert not [d for d in render(chart, {"grafanaDashboard": {"enabled": True}, "templatesOnly": True})
                if d["kind"] == "ConfigMap"]


def test_extra_args_and_env(chart):
    c = voter(render(chart, {"extraArgs": ["--default-ttl-ms=30000", "--max-batch=512"],
                             "extraEnv": [{"name": "BATON_HEARTBEAT_MS", "value": "50"}],
                             "logLevel": "debug"}))
    assert c["args"][-2:] == ["--default-ttl-ms=30000", "--max-batch=512"]
    assert env(c)["BATON_HEARTBEAT_MS"]["value"] == "50"
    assert env(c)["BATON_LOG"]["value"] == "debug"


def test_image_tag_and_digest(chart):
    assert voter(render(chart, {"image": {"tag": "0.2.0"}}))["image"] == "ghcr.io/baton-dev/baton:0.2.0"
    digest = "sha256:" + "a" * 64
    assert voter(render(chart, {"image": {"digest": digest}}))["image"] == f"ghcr.io/baton-dev/baton@{digest}"


def test_network_policy(chart):
    assert not [d for d in render(chart) if d["kind"] == "NetworkPolicy"]
    docs = render(chart, {"networkPolicy": {"enabled": True}})
    policy = find(docs, "NetworkPolicy")["spec"]
    voter_labels = voter_pod(docs)["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= voter_labels.items()
    raft, client = policy["ingress"]
    assert raft["ports"] == [{"port": 7879, "protocol": "TCP"}]
    (peer,) = raft["from"]
    assert peer["podSelector"]["matchLabels"] == find(docs, "StatefulSet")["spec"]["selector"]["matchLabels"]
    assert client["ports"] == [{"port": 7878, "protocol": "TCP"}]
    assert "from" not in client  # open to everyone by default
    restricted = render(chart, {"networkPolicy": {"enabled": True, "clientFrom": [
        {"namespaceSelector": {"matchLabels": {"team": "payments"}}}]}})
    client = find(restricted, "NetworkPolicy")["spec"]["ingress"][1]
    assert {"namespaceSelector": {"matchLabels": {"team": "payments"}}} in client["from"]
    # This release's own pods (helm test, sidecar example) keep access.
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "baton",
                                            "app.kubernetes.io/instance": "locks"}}} in client["from"]


def test_service_monitor_scrapes_the_headless_service(chart):
    assert not [d for d in render(chart) if d["kind"] == "ServiceMonitor"]
    docs = render(chart, {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}})
    monitor = find(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    selector = monitor["spec"]["selector"]["matchLabels"]
    matching = [d["metadata"]["name"] for d in docs if d["kind"] == "Service"
                and selector.items() <= d["metadata"]["labels"].items()]
    assert matching == ["locks-baton-headless"]
    assert monitor["spec"]["endpoints"][0]["port"] == "api"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert "authorization" not in monitor["spec"]["endpoints"][0]


def test_service_monitor_presents_a_bearer_token_from_a_secret(chart):
    docs = render(chart, dict(AUTH_ON, serviceMonitor={
        "enabled": True, "bearerTokenSecret": {"name": "prom-baton", "key": "admin-token"}}))
    (endpoint,) = find(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["authorization"] == {"type": "Bearer",
                                         "credentials": {"name": "prom-baton", "key": "admin-token"}}


def test_helm_test_pod(chart):
    docs = render(chart, {"tests": {"image": {"repository": "mirror.example/curl", "tag": "8.12.0"}}})
    pod = find(docs, "Pod", "locks-baton-test-lock")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (c,) = pod["spec"]["containers"]
    assert c["image"] == "mirror.example/curl:8.12.0"
    assert env(c)["BATON_URL"]["value"] == "http://locks-baton.ns1.svc.cluster.local:7878"
    script = c["command"][2]
    assert ":acquire" in script and ":release" in script and '"released":true' in script
    assert not [d for d in render(chart, {"tests": {"enabled": False}}) if d["kind"] == "Pod"]
