"""Check 4: the rendered chart runs. The StatefulSet's container, exactly as
rendered (command, args, env), is started as three real `baton` processes, one
per pod, on loopback; then the rendered sidecar proxy; then a lease, a lock
acquired and released through the proxy. A flag the binary does not know makes
`baton serve` exit, so a flag renamed in the binary but not in the chart fails
here.

The same again with auth on (`test_auth_*`): the auth file comes from the Secret
the chart renders from auth.file, projected into each voter's volume directory
the way the kubelet does, with tokens made by `baton auth new-token`; then 401s,
403s, the probes, the ServiceMonitor's scrape, membership, the sidecar, the
`helm test` script and a token rotation through a Secret update.

And with TLS on (`test_tls_*`): certificates from `baton dev certs` in the
Secret tls.existingSecret names, projected like the auth Secret; the voters
form one cluster over https, plain http and an untrusted CA get no answer, a
client certificate stands for its auth-file principal, and the sidecar (plain
http on loopback, https to the voters with the CA of its own Secret volume) and
the `helm test` script (curl --cacert) work.

Needs BATON_BIN (the `baton` binary; `make test-chart` sets it). Skipped only
when BATON_BIN is unset; fails when it is set but not an executable file."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import CHART_DIR, NAMESPACE, RELEASE, find, render
from podrun import (LOCAL_HOSTS, Loopback, flag_names, localize, ports_in, resolve_env, secret_volume_files,
                    write_secret_volume)

REPLICAS = 3
READY_TIMEOUT_S = 60
RENDERED_BINARY = "/usr/local/bin/baton"


def exchange(method: str, url: str, body: dict | None = None, *, token: str | None = None,
             headers: dict[str, str] | None = None, timeout: float = 5.0, context: ssl.SSLContext | None = None):
    """(status, parsed body, response headers) of one request; `context` is
    the TLS context of an https URL (urllib's default one when None)."""
    data = None if body is None else json.dumps(body).encode()
    sent = {"content-type": "application/json", **(headers or {})}
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            status, raw, got = response.status, response.read(), response.headers
    except urllib.error.HTTPError as error:
        status, raw, got = error.code, error.read(), error.headers
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw.decode(errors="replace")
    return status, parsed, got


def http(method: str, url: str, body: dict | None = None, timeout: float = 5.0,
         token: str | None = None) -> tuple[int, dict | str]:
    status, parsed, _ = exchange(method, url, body, token=token, timeout=timeout)
    return status, parsed


def https(method: str, url: str, body: dict | None = None, *, context: ssl.SSLContext, timeout: float = 5.0,
          token: str | None = None) -> tuple[int, dict | str]:
    """http() for the TLS scenario: the context says which CA is trusted and
    which client certificate (if any) is presented, so a test states both."""
    assert url.startswith("https://"), url
    status, parsed, _ = exchange(method, url, body, token=token, timeout=timeout, context=context)
    return status, parsed


def kubelet_probe_context() -> ssl.SSLContext:
    """The kubelet's HTTPS probes do not verify the server's certificate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def baton_bin() -> str:
    path = os.environ.get("BATON_BIN")
    if not path:
        pytest.skip("BATON_BIN is not set: the rendered-cluster test needs the baton binary "
                    "(make test-chart sets it to $CARGO_TARGET_DIR/debug/baton)")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"BATON_BIN={path} is not an executable file (build it first: make build)")
    return path


class Pods:
    """The started processes, their logs, and their teardown."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.running: dict[str, tuple[subprocess.Popen, Path]] = {}

    def start(self, process) -> subprocess.Popen:
        home = self.workdir / process.pod
        home.mkdir(parents=True, exist_ok=True)
        log = home / f"{process.container}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(process.argv, env=process.env, cwd=home, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.running[process.pod] = (proc, log)
        return proc

    def check_alive(self) -> None:
        for pod, (proc, log) in self.running.items():
            if proc.poll() is not None:
                pytest.fail(f"{pod} exited with status {proc.returncode}:\n{self.tail(log)}")

    @staticmethod
    def tail(log: Path, lines: int = 40) -> str:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    def logs(self) -> str:
        return "\n".join(f"--- {pod} ---\n{self.tail(log)}" for pod, (_, log) in self.running.items())

    def stop_all(self) -> None:
        for proc, _ in self.running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc, _ in self.running.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def rendered_secrets(docs) -> dict[str, dict[str, str]]:
    return {d["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in d.get("data", {}).items()}
            for d in docs if d["kind"] == "Secret"}


def wait_until(what: str, check, *, timeout: float, running: Pods | None = None, every: float = 0.1):
    """Polls `check()` until it returns a true value (returned), failing after
    `timeout` seconds with `what` and the pods' logs."""
    deadline = time.monotonic() + timeout
    while True:
        if running is not None:
            running.check_alive()
        try:
            result = check()
        except OSError:
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout} s\n{running.logs() if running else ''}")
        time.sleep(every)


def members_once_known(fetch, expected: dict[int, str]):
    """Polls `fetch()` (every voter's `GET /v1/cluster` answer) until the first
    answer's members have the client URLs `expected` (by id) and every voter
    names the cluster; returns the answers and those members by id. A voter the
    initializer could not reach yet is recorded without its URL and fills it in
    itself about a second later (read at once, the members lost that race in
    CI). A voter knows the membership as soon as it has the entry, but names
    the cluster only once it has applied the entry that does (`cluster_id: ""`
    for a moment on a loaded machine: seen in CI)."""
    def known():
        views = fetch()
        members = {m["id"]: m for m in views[0]["members"]}
        urls_known = {mid: m["api_addr"] for mid, m in members.items()} == expected
        named = all(v["cluster_id"] for v in views)
        return (views, members) if urls_known and named else None

    return wait_until("every member's client URL is known", known, timeout=20)


@contextlib.contextmanager
def rendered_cluster(chart, workdir: Path, values: dict, *, extra_secrets: dict | None = None):
    """Renders the chart with `values` and runs its voters (and the sidecar
    example's proxy) as local processes; `extra_secrets` are Secrets the user
    would have created (name -> {key: value})."""
    binary = baton_bin()
    docs = render(chart, values)
    domain = chart.values["clusterDomain"]
    sts = find(docs, "StatefulSet", f"{RELEASE}-baton")
    headless = find(docs, "Service", sts["spec"]["serviceName"])
    client_service = find(docs, "Service", f"{RELEASE}-baton")
    pod_spec = sts["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    named_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    pods = [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])]

    loopback = Loopback(cluster_domain=domain)
    for pod in pods:
        loopback.add_pod(pod, f"{pod}.{headless['metadata']['name']}.{NAMESPACE}.svc.{domain}")
    for port in client_service["spec"]["ports"]:
        target = port["targetPort"]
        loopback.add_service(f"{client_service['metadata']['name']}.{NAMESPACE}.svc.{domain}", port["port"],
                             pods[0], named_ports.get(target, target))
    secrets = {**rendered_secrets(docs), **(extra_secrets or {})}

    def volume_dir(pod: str, volume: str) -> Path:
        path = workdir / pod / "volumes" / volume
        path.mkdir(parents=True, exist_ok=True)
        return path

    def project_secret_volumes(spec, names) -> dict[str, str]:
        """Secret volumes, projected as the kubelet does (a missing Secret would
        keep the pod from starting: here it fails the test); volume -> Secret."""
        projected = {}
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                name = volume["secret"]["secretName"]
                assert name in secrets, f"volume {volume['name']}: Secret {name} is neither rendered nor given"
                projected[volume["name"]] = name
                for pod in names:
                    write_secret_volume(volume_dir(pod, volume["name"]), secret_volume_files(volume["secret"], secrets))
        return projected

    secret_volumes = project_secret_volumes(pod_spec, pods)

    def local(container, pod):
        return localize(container, pod=pod, namespace=NAMESPACE, loopback=loopback, secrets=secrets,
                        binary=binary, rendered_binary=RENDERED_BINARY, volume_dir=volume_dir)

    voters = [local(container, pod) for pod in pods]
    deployment = find(docs, "Deployment", f"{RELEASE}-baton-sidecar-example")
    proxy_container = next(c for c in deployment["spec"]["template"]["spec"]["initContainers"]
                           if c["name"] == "baton-proxy")
    app_pod = f"{deployment['metadata']['name']}-5d8f7c9b4-x7k2p"
    # With TLS the proxy reads the voters' CA from the pod's own Secret volume.
    project_secret_volumes(deployment["spec"]["template"]["spec"], [app_pod])
    proxy = local(proxy_container, app_pod)

    running = Pods(workdir)
    try:
        for process in voters:
            running.start(process)
        api = {pod: loopback.port(pod, named_ports["api"]) for pod in pods}
        # Readiness as the kubelet asks it: the rendered probe's scheme and path,
        # no token, and (HTTPS once tls.enabled) no certificate check.
        ready = container["readinessProbe"]["httpGet"]
        assert named_ports.get(ready["port"], ready["port"]) == named_ports["api"], ready
        scheme = ready["scheme"].lower()
        context = kubelet_probe_context() if scheme == "https" else None
        waiting = set(pods)

        def all_ready():
            for pod in sorted(waiting):
                try:
                    url = f"{scheme}://127.0.0.1:{api[pod]}{ready['path']}"
                    if exchange("GET", url, timeout=1, context=context)[0] == 200:
                        waiting.discard(pod)
                except OSError:
                    pass
            return not waiting

        wait_until(f"voters ready (waiting for {sorted(waiting)})", all_ready, timeout=READY_TIMEOUT_S,
                   running=running, every=0.2)
        running.start(proxy)
        proxy_port = loopback.port(app_pod, 7878)
        wait_until("the proxy answers /healthz",
                   lambda: http("GET", f"http://127.0.0.1:{proxy_port}/healthz", timeout=1)[0] == 200,
                   timeout=20, running=running)
        yield {
            "binary": binary, "docs": docs, "loopback": loopback, "pods": pods, "api": api,
            "voters": voters, "proxy": proxy, "proxy_port": proxy_port, "app_pod": app_pod,
            "container": container, "proxy_container": proxy_container, "named_ports": named_ports,
            "running": running, "secrets": secrets, "workdir": workdir, "volume_dir": volume_dir,
            "secret_volumes": secret_volumes,
        }
    finally:
        running.stop_all()


@pytest.fixture(scope="module")
def cluster(chart, tmp_path_factory):
    with rendered_cluster(chart, tmp_path_factory.mktemp("pods"),
                          {"replicas": REPLICAS, "sidecarExample": {"enabled": True}}) as running:
        yield running


def test_rewrite_keeps_every_flag_name(cluster):
    for process in cluster["voters"] + [cluster["proxy"]]:
        assert flag_names(process.argv[1:]) == flag_names(process.rendered_args), process.pod
        # Every listener is explicit and on a free port: no default (7878/7879) is left
        # for the binary to bind, and no cluster name is dialed.
        assert set(ports_in(process.argv)) <= set(cluster["loopback"].ports.values())
        assert not [a for a in process.argv if ".svc." in a]
        assert process.env["HOSTNAME"] == process.pod
    data_dirs = [a.split("=", 1)[1] for p in cluster["voters"] for a in p.argv if a.startswith("--data-dir=")]
    assert len(set(data_dirs)) == len(cluster["voters"]), data_dirs
    for process, data_dir in zip(cluster["voters"], data_dirs):
        # The pod's volume, in the test's temporary directory, one per pod.
        assert Path(data_dir) == cluster["workdir"] / process.pod / "volumes" / "data"
    for process in cluster["voters"]:
        names = flag_names(process.argv)
        assert "--listen" in names and "--raft-listen" in names
        assert process.argv[0] == cluster["binary"] and process.argv[1] == "serve"
        assert process.env["BATON_CLUSTER_SECRET"] == next(iter(cluster["secrets"].values()))["cluster-secret"]
    assert "--listen" in flag_names(cluster["proxy"].argv)


def test_voters_form_one_cluster_with_ids_from_hostnames(cluster):
    api = cluster["api"]
    # Pod <fullname>-<i> is node i+1, advertising its own (rewritten) client URL.
    expected = {i + 1: f"http://127.0.0.1:{api[pod]}" for i, pod in enumerate(cluster["pods"])}
    views, members = members_once_known(
        lambda: [http("GET", f"http://127.0.0.1:{api[pod]}/v1/cluster")[1] for pod in cluster["pods"]], expected)
    assert len({v["cluster_id"] for v in views}) == 1
    assert views[0]["leader_id"] in members


def test_lock_cycle_through_the_rendered_sidecar(cluster):
    base = f"http://127.0.0.1:{cluster['proxy_port']}"
    status, lease = http("POST", f"{base}/v1/leases", {"ttl_ms": 15000, "holder": "chart-test"})
    assert status == 201, lease  # created
    status, grant = http("POST", f"{base}/v1/locks/chart-test:acquire", {"lease_id": lease["lease_id"]})
    assert status == 200, grant
    assert grant["name"] == "chart-test" and isinstance(grant["token"], int) and grant["token"] > 0
    assert grant["lease_id"] == lease["lease_id"]
    status, released = http("POST", f"{base}/v1/locks/chart-test:release",
                            {"lease_id": lease["lease_id"], "token": grant["token"]})
    assert status == 200, released
    assert released["released"] is True


# The sample names each family type puts in the text format.
SAMPLE_SUFFIXES = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"]}


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the shipped dashboard: panel targets (rows
    included) and template variable queries."""
    dashboard = json.loads((CHART_DIR / "dashboards" / "baton.json").read_text())
    queries = []

    def panels(items):
        for panel in items:
            queries.extend(target["expr"] for target in panel.get("targets", []))
            panels(panel.get("panels", []))

    panels(dashboard["panels"])
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def test_dashboard_queries_use_only_metrics_the_voters_expose(cluster):
    """Every metric name in the dashboard is one the rendered voters' /metrics
    expose (parsed with the Prometheus client's own parser), so the two cannot
    drift apart; and the dashboard covers what the chart README promises."""
    exposed = set()
    for pod in cluster["pods"]:
        status, text, _ = exchange("GET", f"http://127.0.0.1:{cluster['api'][pod]}/metrics", timeout=5)
        assert status == 200, (pod, text)
        for family in text_string_to_metric_families(text):
            exposed.update(family.name + suffix for suffix in SAMPLE_SUFFIXES[family.type])
    queries = dashboard_queries()
    used = {name for query in queries for name in re.findall(r"\b(baton_[a-z0-9_]+)\b", query)}
    assert used, "the dashboard queries no Baton metric"
    assert not used - exposed, f"the dashboard uses metrics no voter exposes: {sorted(used - exposed)}"
    for promised in ("baton_requests_total", "baton_request_duration_seconds_bucket", "baton_wait_seconds_bucket",
                     "baton_hold_seconds_bucket", "baton_lease_expiries_total", "baton_raft_leader_changes_total",
                     "baton_log_append_seconds_bucket", "baton_commit_apply_lag_seconds_bucket",
                     "baton_proposer_queue_depth"):
        assert promised in used, f"no panel shows {promised}"


def test_voter_http_probes_answer(cluster):
    """The kubelet's httpGet probes, sent to each voter's (rewritten) port."""
    container = cluster["container"]
    for pod in cluster["pods"]:
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            get = container[kind]["httpGet"]
            port = cluster["named_ports"].get(get["port"], get["port"])
            url = f"{get['scheme'].lower()}://127.0.0.1:{cluster['loopback'].port(pod, port)}{get['path']}"
            status, body = http("GET", url)
            assert status == 200, (pod, kind, body)


def test_sidecar_exec_probes_pass(cluster):
    """The sidecar's exec probes (`baton probe URL`), run as rendered."""
    container = cluster["proxy_container"]
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = list(container[kind]["exec"]["command"])
        assert command[0] == RENDERED_BINARY
        argv = [cluster["binary"]] + [cluster["loopback"].rewrite(a, cluster["app_pod"]) for a in command[1:]]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=container[kind]["timeoutSeconds"] + 5,
                              env={"HOSTNAME": cluster["app_pod"]})
        assert done.returncode == 0, (kind, argv, done.stdout, done.stderr)
    # And a probe of a dead port fails (the check is not vacuous).
    dead = subprocess.run([cluster["binary"], "probe", f"http://127.0.0.1:{cluster['loopback'].port('nobody', 1)}/healthz"],
                          capture_output=True, timeout=10)
    assert dead.returncode != 0


def test_helm_test_pod_passes(cluster):
    """The `helm test` Pod's script, run with this machine's sh and curl against
    the client Service's (rewritten) address."""
    shell, curl = shutil.which("sh"), shutil.which("curl")
    if not (shell and curl):
        pytest.skip("needs sh and curl on this machine to run the helm test script")
    pod = find(cluster["docs"], "Pod", f"{RELEASE}-baton-test-lock")
    (container,) = pod["spec"]["containers"]
    env = resolve_env(container, pod=pod["metadata"]["name"], namespace=NAMESPACE, secrets=cluster["secrets"])
    env = {k: cluster["loopback"].rewrite(v, pod["metadata"]["name"]) for k, v in env.items()}
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    assert container["command"][:2] == ["/bin/sh", "-c"]
    done = subprocess.run([shell, "-c", container["command"][2]], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "PASS" in done.stdout, (done.stdout, done.stderr)


def test_loopback_rewrite_rules():
    """The address rewrite in isolation (no binary needed)."""
    ports = iter(range(40001, 40100))
    lb = Loopback(cluster_domain="cluster.local", allocate=lambda: next(ports))
    lb.add_pod("b-0", "b-0.h.ns.svc.cluster.local")
    lb.add_service("b.ns.svc.cluster.local", 7878, "b-0", 7878)
    assert lb.rewrite("--listen=0.0.0.0:7878", "b-0") == "--listen=127.0.0.1:40001"
    assert lb.rewrite("--peers=1=http://b-0.h.ns.svc.cluster.local:7878", "x") == "--peers=1=http://127.0.0.1:40001"
    assert lb.rewrite("http://b.ns.svc.cluster.local:7878/v1", "x") == "http://127.0.0.1:40001/v1"
    assert lb.rewrite("--listen=127.0.0.1:7878", "app") == "--listen=127.0.0.1:40002"
    with pytest.raises(ValueError):
        lb.rewrite("http://other.ns.svc.cluster.local:80", "x")
    assert "0.0.0.0" in LOCAL_HOSTS


def test_localize_env_paths_and_binary(tmp_path):
    """The kubelet emulation in isolation: env sources, $(VAR), volumes, binary."""
    ports = iter(range(41001, 41100))
    lb = Loopback(cluster_domain="cluster.local", allocate=lambda: next(ports))
    lb.add_pod("b-1", "b-1.h.ns.svc.cluster.local")
    container = {
        "name": "baton",
        "command": [RENDERED_BINARY],
        "args": ["serve", "--data-dir=/var/lib/baton", "--advertise-api=http://$(POD_NAME).h.ns.svc.cluster.local:7878",
                 "--literal=$$(POD_NAME)", "--node-id-from-hostname"],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": "GREETING", "value": "hello $(POD_NAME)"}],
        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/baton"}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    process = localize(container, pod="b-1", namespace="ns", loopback=lb, secrets={"s": {"k": "v"}},
                       binary="/bin/baton-under-test", rendered_binary=RENDERED_BINARY,
                       volume_dir=lambda pod, volume: tmp_path / pod / volume)
    assert process.argv == ["/bin/baton-under-test", "serve", f"--data-dir={tmp_path}/b-1/data",
                            "--advertise-api=http://127.0.0.1:41001", "--literal=$(POD_NAME)",
                            "--node-id-from-hostname"]
    assert process.env == {"HOSTNAME": "b-1", "POD_NAME": "b-1", "SECRET": "v", "GREETING": "hello b-1"}
    assert flag_names(process.argv[1:]) == flag_names(process.rendered_args)
    with pytest.raises(ValueError):
        localize(dict(container, command=["/bin/other"]), pod="b-1", namespace="ns", loopback=lb, secrets={"s": {"k": "v"}},
                 binary="x", rendered_binary=RENDERED_BINARY, volume_dir=lambda pod, volume: tmp_path)


# --- Auth on: the same rendered voters with --auth-file from a rendered Secret ---

def new_token(binary: str) -> tuple[str, str]:
    """(token, digest) from `baton auth new-token`."""
    out = subprocess.run([binary, "auth", "new-token"], capture_output=True, text=True, timeout=10, check=True)
    token, digest = out.stdout.split()
    return token, digest


def hash_token(binary: str, token: str) -> str:
    out = subprocess.run([binary, "auth", "hash-token"], input=token + "\n", capture_output=True, text=True,
                         timeout=10, check=True)
    return out.stdout.strip()


def auth_file(principals: dict[str, list[str]]) -> dict:
    """The auth file of the scenario, with these digests per principal."""
    return {
        "principals": [
            {"name": "billing", "role": "client", "tokens": principals["billing"],
             "locks": ["billing/"], "watch": ["billing/"]},
            {"name": "helm-test", "role": "client", "tokens": principals["helm-test"], "locks": ["helm-test-"]},
            {"name": "ops", "role": "admin", "tokens": principals["ops"]},
        ],
    }


@pytest.fixture(scope="module")
def auth_cluster(chart, tmp_path_factory):
    binary = baton_bin()
    tokens = {name: new_token(binary) for name in ("billing", "helm-test", "ops")}
    for token, digest in tokens.values():
        # The two subcommands agree: hash-token gives new-token's digest.
        assert hash_token(binary, token) == digest
    values = {
        "replicas": REPLICAS,
        "sidecarExample": {"enabled": True},
        "auth": {"enabled": True, "file": auth_file({n: [d] for n, (_, d) in tokens.items()})},
        "tests": {"tokenSecret": {"name": "baton-test-token", "key": "token"}},
        "serviceMonitor": {"enabled": True, "bearerTokenSecret": {"name": "prometheus-baton", "key": "token"}},
    }
    extra = {"baton-test-token": {"token": tokens["helm-test"][0]},
             "prometheus-baton": {"token": tokens["ops"][0]}}
    with rendered_cluster(chart, tmp_path_factory.mktemp("auth-pods"), values, extra_secrets=extra) as running:
        running["tokens"] = {name: token for name, (token, _) in tokens.items()}
        running["digests"] = {name: digest for name, (_, digest) in tokens.items()}
        yield running


def test_auth_voters_read_the_rendered_secret_and_form_one_cluster(auth_cluster):
    c = auth_cluster
    assert c["secret_volumes"] == {"auth": f"{RELEASE}-baton-auth"}
    rendered = c["secrets"][f"{RELEASE}-baton-auth"]["auth.yaml"]
    assert "sha256:" in rendered and not any(t in rendered for t in c["tokens"].values())
    for process in c["voters"]:
        (path,) = [a.split("=", 1)[1] for a in process.argv if a.startswith("--auth-file=")]
        assert Path(path) == c["volume_dir"](process.pod, "auth") / "auth.yaml"
        assert Path(path).read_text() == rendered
    # The voters found each other (peers authenticate with the cluster secret on
    # the raft port, not with API tokens) and agree on one leader.
    # Ready means a voter knows its leader, not that it has applied the entry that
    # names the cluster: a loaded machine shows `cluster_id: ""` for a moment.
    admin = c["tokens"]["ops"]

    def agreed_views():
        views = [http("GET", f"http://127.0.0.1:{c['api'][pod]}/v1/cluster", token=admin) for pod in c["pods"]]
        assert [status for status, _ in views] == [200] * REPLICAS, views
        ids = {v["cluster_id"] for _, v in views}
        return views if len(ids) == 1 and "" not in ids else None

    views = wait_until("the voters agree on the cluster id", agreed_views, timeout=30)
    assert {m["id"] for m in views[0][1]["members"]} == {1, 2, 3}
    assert views[0][1]["leader_id"] in {1, 2, 3}
    assert len({v["leader_id"] for _, v in views}) == 1


def test_auth_requests_without_a_valid_token_get_401(auth_cluster):
    c = auth_cluster
    for pod in c["pods"]:
        base = f"http://127.0.0.1:{c['api'][pod]}"
        for method, path, body, headers in [
            ("GET", "/v1/cluster", None, {}),
            ("POST", "/v1/leases", {"ttl_ms": 5000}, {}),
            ("POST", "/v1/locks/billing/x:acquire", {"ttl_ms": 5000}, {}),
            ("GET", "/v1/locks", None, {"authorization": "Bearer not-a-token"}),
            ("GET", "/v1/locks", None, {"authorization": f"Basic {c['tokens']['billing']}"}),
        ]:
            status, problem, got = exchange(method, base + path, body, headers=headers)
            assert status == 401, (pod, path, problem)
            assert problem["code"] == "unauthenticated"
            assert got["content-type"].startswith("application/problem+json")
            assert got["www-authenticate"] == 'Bearer realm="baton"'
            assert c["tokens"]["billing"] not in json.dumps(problem)


def test_auth_client_token_works_on_its_prefix_and_gets_403_elsewhere(auth_cluster):
    c = auth_cluster
    billing = c["tokens"]["billing"]
    # A follower and the leader alike (a follower forwards the write with its principal).
    for pod in c["pods"]:
        base = f"http://127.0.0.1:{c['api'][pod]}"
        status, lease = http("POST", f"{base}/v1/leases", {"ttl_ms": 15000}, token=billing)
        assert status == 201, lease
        name = f"billing/{pod}"
        status, grant = http("POST", f"{base}/v1/locks/{name}:acquire", {"lease_id": lease["lease_id"]},
                             token=billing)
        assert status == 200 and grant["token"] > 0, grant
        status, problem = http("POST", f"{base}/v1/locks/payroll/{pod}:acquire", {"lease_id": lease["lease_id"]},
                               token=billing)
        assert (status, problem.get("code")) == (403, "forbidden"), (status, problem)
        # The lease belongs to billing: even an admin may not present it.
        status, problem = http("POST", f"{base}/v1/leases/{lease['lease_id']}:keepalive", {},
                               token=c["tokens"]["ops"])
        assert (status, problem.get("code")) == (403, "forbidden"), (status, problem)
        status, released = http("POST", f"{base}/v1/locks/{name}:release",
                                {"lease_id": lease["lease_id"], "token": grant["token"]}, token=billing)
        assert status == 200 and released["released"] is True, released
    # The list shows billing's names only, and no other principal's.
    status, listed = http("GET", f"http://127.0.0.1:{c['api'][c['pods'][0]]}/v1/locks", token=billing)
    assert status == 200 and all(item["name"].startswith("billing/") for item in listed["items"]), listed


def test_auth_probes_and_metrics_as_rendered(auth_cluster):
    """The kubelet's probes need no token (health open by default); the
    ServiceMonitor's scrape carries the admin token of its bearerTokenSecret."""
    c = auth_cluster
    container = c["container"]
    for pod in c["pods"]:
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            get = container[kind]["httpGet"]
            port = c["named_ports"].get(get["port"], get["port"])
            status, body = http("GET", f"http://127.0.0.1:{c['loopback'].port(pod, port)}{get['path']}")
            assert status == 200, (pod, kind, body)
    (endpoint,) = find(c["docs"], "ServiceMonitor")["spec"]["endpoints"]
    credentials = endpoint["authorization"]["credentials"]
    scrape_token = c["secrets"][credentials["name"]][credentials["key"]]
    for pod in c["pods"]:
        url = f"http://127.0.0.1:{c['api'][pod]}{endpoint['path']}"
        assert http("GET", url)[0] == 401
        assert http("GET", url, token=c["tokens"]["billing"])[0] == 403
        status, text = http("GET", url, token=scrape_token)
        assert status == 200 and "baton_raft_term" in text, text


def test_auth_membership_needs_the_cluster_secret_or_an_admin(auth_cluster):
    c = auth_cluster
    pod = c["pods"][2]
    member = {"id": 3, "api_addr": f"http://127.0.0.1:{c['api'][pod]}",
              "raft_addr": f"http://127.0.0.1:{c['loopback'].port(pod, c['named_ports']['raft'])}"}
    base = f"http://127.0.0.1:{c['api'][c['pods'][0]]}"
    status, problem = http("POST", f"{base}/v1/cluster/members", member)
    assert (status, problem.get("code")) == (401, "unauthenticated"), (status, problem)
    status, problem = http("POST", f"{base}/v1/cluster/members", member, token=c["tokens"]["billing"])
    assert (status, problem.get("code")) == (403, "forbidden"), (status, problem)
    # The rendered cluster secret (what `kubectl get secret` gives an operator):
    # re-adding a member as it is changes nothing and succeeds.
    secret = c["voters"][0].env["BATON_CLUSTER_SECRET"]
    status, body, _ = exchange("POST", f"{base}/v1/cluster/members", member,
                               headers={"baton-cluster-secret": secret}, timeout=30)
    assert status == 200, body
    status, view = http("GET", f"{base}/v1/cluster", token=c["tokens"]["ops"])
    assert {m["id"] for m in view["members"]} == {1, 2, 3}


def test_auth_through_the_rendered_sidecar(auth_cluster):
    """The proxy holds no token: it passes the application's through."""
    c = auth_cluster
    base = f"http://127.0.0.1:{c['proxy_port']}"
    status, problem = http("POST", f"{base}/v1/leases", {"ttl_ms": 15000})
    assert (status, problem.get("code")) == (401, "unauthenticated"), (status, problem)
    billing = c["tokens"]["billing"]
    status, grant = http("POST", f"{base}/v1/locks/billing/sidecar:acquire", {"ttl_ms": 15000}, token=billing)
    assert status == 200, grant
    status, problem = http("POST", f"{base}/v1/locks/payroll/sidecar:acquire", {"ttl_ms": 15000}, token=billing)
    assert (status, problem.get("code")) == (403, "forbidden"), (status, problem)
    status, released = http("POST", f"{base}/v1/locks/billing/sidecar:release",
                            {"lease_id": grant["lease_id"], "token": grant["token"]}, token=billing)
    assert status == 200 and released["released"] is True, released
    # Its exec probes (through the proxy to /readyz) need no token either.
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = list(c["proxy_container"][kind]["exec"]["command"])
        argv = [c["binary"]] + [c["loopback"].rewrite(a, c["app_pod"]) for a in command[1:]]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        assert done.returncode == 0, (kind, done.stderr)


def run_helm_test_pod(c, secrets) -> subprocess.CompletedProcess:
    shell, curl = shutil.which("sh"), shutil.which("curl")
    if not (shell and curl):
        pytest.skip("needs sh and curl on this machine to run the helm test script")
    pod = find(c["docs"], "Pod", f"{RELEASE}-baton-test-lock")
    (container,) = pod["spec"]["containers"]
    env = resolve_env(container, pod=pod["metadata"]["name"], namespace=NAMESPACE, secrets=secrets)
    env = {k: c["loopback"].rewrite(v, pod["metadata"]["name"]) for k, v in env.items()}
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    assert container["command"][:2] == ["/bin/sh", "-c"]
    script = container["command"][2]
    # With TLS the script names files of its Secret volume (curl --cacert ...):
    # each mount becomes a local directory holding the projected Secret.
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        source = volumes[mount["name"]]
        assert "secret" in source, f"volume {mount['name']}: only Secret volumes are emulated"
        local_dir = c["workdir"] / pod["metadata"]["name"] / "volumes" / mount["name"]
        write_secret_volume(local_dir, secret_volume_files(source["secret"], secrets))
        mount_path = re.escape(mount["mountPath"].rstrip("/"))
        script = re.sub(rf"(?<=\s){mount_path}(?=/)", str(local_dir), script)
        assert mount["mountPath"] not in script, script
    return subprocess.run([shell, "-c", script], env=env, capture_output=True, text=True, timeout=60)


def test_auth_helm_test_pod_passes_with_its_token(auth_cluster):
    c = auth_cluster
    done = run_helm_test_pod(c, c["secrets"])
    assert done.returncode == 0 and "PASS" in done.stdout, (done.stdout, done.stderr)
    assert c["tokens"]["helm-test"] not in done.stdout + done.stderr
    # Not vacuous: with billing's token (no "helm-test-" prefix) the same script fails.
    wrong = {**c["secrets"], "baton-test-token": {"token": c["tokens"]["billing"]}}
    done = run_helm_test_pod(c, wrong)
    assert done.returncode != 0 and "PASS" not in done.stdout, (done.stdout, done.stderr)
    assert "FAIL: the acquire was refused" in done.stdout and '"code":"forbidden"' in done.stdout, done.stdout


def test_auth_token_rotation_through_the_secret_without_restart(auth_cluster, chart):
    """README "Authentication": add the new digest, move clients, remove the old.
    The Secret update is projected the kubelet's way (an atomic ..data swap) and
    every voter re-reads the file by itself (polled every 2 s), with no restart."""
    c = auth_cluster
    old = c["tokens"]["billing"]
    new, new_digest = new_token(c["binary"])
    pids = {pod: proc.pid for pod, (proc, _) in c["running"].running.items()}
    secret_name = f"{RELEASE}-baton-auth"

    def publish(billing_digests):
        file = auth_file({"billing": billing_digests, "helm-test": [c["digests"]["helm-test"]],
                          "ops": [c["digests"]["ops"]]})
        docs = render(chart, {"replicas": REPLICAS, "auth": {"enabled": True, "file": file},
                              "tests": {"enabled": False}})
        data = rendered_secrets(docs)[secret_name]
        for pod in c["pods"]:
            write_secret_volume(c["volume_dir"](pod, "auth"), data)

    def status_everywhere(token):
        return {pod: http("GET", f"http://127.0.0.1:{c['api'][pod]}/v1/locks", token=token, timeout=2)[0]
                for pod in c["pods"]}

    assert set(status_everywhere(new).values()) == {401}
    # 1. Both digests: the new token works on every voter, the old one still does.
    publish([c["digests"]["billing"], new_digest])
    wait_until("the new token accepted by every voter", lambda: set(status_everywhere(new).values()) == {200},
               timeout=15, running=c["running"])
    assert set(status_everywhere(old).values()) == {200}
    # 2. Only the new one: the old token is refused everywhere.
    publish([new_digest])
    wait_until("the old token refused by every voter", lambda: set(status_everywhere(old).values()) == {401},
               timeout=15, running=c["running"])
    assert set(status_everywhere(new).values()) == {200}
    # No voter restarted for it.
    assert {pod: proc.pid for pod, (proc, _) in c["running"].running.items()} == pids
    c["running"].check_alive()
    c["tokens"]["billing"], c["digests"]["billing"] = new, new_digest


def test_auth_sidecar_fails_over_between_its_seeds(auth_cluster):
    """With auth on the proxy cannot read GET /v1/cluster (it holds no token), so
    it keeps its rendered seed order instead of learning the leader: requests go
    to voter 0 first and move on when it is gone. Runs last: it stops voter 0."""
    c = auth_cluster
    base = f"http://127.0.0.1:{c['proxy_port']}"
    proc, _ = c["running"].running.pop(c["pods"][0])
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    billing = c["tokens"]["billing"]

    def acquired():
        status, grant = http("POST", f"{base}/v1/locks/billing/failover:acquire", {"ttl_ms": 15000},
                             token=billing, timeout=5)
        return grant if status == 200 else None

    # The two voters left elect a leader if voter 0 led (503 until then).
    grant = wait_until("a lock through the proxy with voter 0 gone", acquired, timeout=30,
                       running=c["running"], every=0.2)
    status, released = http("POST", f"{base}/v1/locks/billing/failover:release",
                            {"lease_id": grant["lease_id"], "token": grant["token"]}, token=billing)
    assert status == 200 and released["released"] is True, released


def test_secret_volume_projection(tmp_path):
    """write_secret_volume in isolation: the kubelet's layout, and an update that
    swaps ..data (the path a reader opens never changes) and drops removed keys."""
    vol = tmp_path / "auth"
    write_secret_volume(vol, {"auth.yaml": "one", "old": "x"})
    assert os.readlink(vol / "auth.yaml") == "..data/auth.yaml"
    assert (vol / "..data").is_symlink() and (vol / "auth.yaml").read_text() == "one"
    first = os.readlink(vol / "..data")
    write_secret_volume(vol, {"auth.yaml": "two"})
    assert (vol / "auth.yaml").read_text() == "two"
    assert os.readlink(vol / "..data") != first and not (vol / first).exists()
    assert sorted(p.name for p in vol.iterdir() if not p.name.startswith("..")) == ["auth.yaml"]


def test_secret_volume_items():
    """secret_volume_files in isolation: `items` projects only the listed keys
    under their path (the sidecar example's CA volume); without it, every key."""
    secrets = {"tls": {"tls.crt": "cert", "tls.key": "key", "ca.crt": "ca"}}
    assert secret_volume_files({"secretName": "tls"}, secrets) == secrets["tls"]
    assert secret_volume_files({"secretName": "tls", "items": [{"key": "ca.crt", "path": "root.pem"}]},
                               secrets) == {"root.pem": "ca"}
    with pytest.raises(ValueError):
        secret_volume_files({"secretName": "tls", "items": [{"key": "nope", "path": "x"}]}, secrets)
    with pytest.raises(ValueError):
        secret_volume_files({"secretName": "absent"}, secrets)
    assert secret_volume_files({"secretName": "absent", "optional": True}, secrets) == {}


# --- TLS on: https on both ports from tls.existingSecret, client certificates ---
# --- mapped to principals of the rendered auth file ---

TLS_SECRET = "baton-tls"


def dev_certs(binary: str, out: Path, clients: list[str]) -> Path:
    """`baton dev certs` into `out`: a CA, a node certificate valid for the
    loopback address every cluster name is rewritten to, and client certificates."""
    subprocess.run([binary, "dev", "certs", "--out", str(out), "--node-names", "localhost,127.0.0.1",
                    "--clients", ",".join(clients)], capture_output=True, text=True, timeout=30, check=True)
    return out


def trusting(ca: Path, client: Path | None = None) -> ssl.SSLContext:
    """A client's TLS context: trusts `ca`, presents `client`.crt/.key if given."""
    context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(f"{client}.crt", f"{client}.key")
    return context


@pytest.fixture(scope="module")
def tls_cluster(chart, tmp_path_factory):
    binary = baton_bin()
    certs = dev_certs(binary, tmp_path_factory.mktemp("certs"), ["billing.client"])
    tokens = {name: new_token(binary) for name in ("billing", "helm-test", "ops")}
    values = {
        "replicas": REPLICAS,
        "sidecarExample": {"enabled": True},
        "tls": {"enabled": True, "existingSecret": TLS_SECRET, "clientCaKey": "ca.crt"},
        "auth": {"enabled": True, "file": {"principals": [
            # billing: its client certificate (no token needed), and a token for
            # the sidecar, which has no certificate and passes the header on.
            {"name": "billing", "role": "client", "certificates": ["billing.client"],
             "tokens": [tokens["billing"][1]], "locks": ["billing/"]},
            {"name": "helm-test", "role": "client", "tokens": [tokens["helm-test"][1]], "locks": ["helm-test-"]},
            {"name": "ops", "role": "admin", "tokens": [tokens["ops"][1]]},
        ]}},
        "tests": {"tokenSecret": {"name": "baton-test-token", "key": "token"}},
    }
    # What a cert-manager Certificate's Secret holds (kubernetes.io/tls with ca.crt).
    extra = {TLS_SECRET: {"tls.crt": (certs / "node.crt").read_text(), "tls.key": (certs / "node.key").read_text(),
                          "ca.crt": (certs / "ca.crt").read_text()},
             "baton-test-token": {"token": tokens["helm-test"][0]}}
    with rendered_cluster(chart, tmp_path_factory.mktemp("tls-pods"), values, extra_secrets=extra) as running:
        running["certs"] = certs
        running["tokens"] = {name: token for name, (token, _) in tokens.items()}
        yield running


def test_tls_voters_form_one_cluster_with_the_rendered_tls_flags(tls_cluster):
    c = tls_cluster
    assert c["secret_volumes"] == {"auth": f"{RELEASE}-baton-auth", "tls": TLS_SECRET}
    for process in c["voters"]:
        flags = dict(a.split("=", 1) for a in process.argv if a.startswith("--tls-"))
        tls_dir = c["volume_dir"](process.pod, "tls")
        # The projected Secret's files, by their rendered key names: node
        # certificate and key, the CA for peers and for client certificates.
        assert flags == {"--tls-cert": f"{tls_dir}/tls.crt", "--tls-key": f"{tls_dir}/tls.key",
                         "--tls-peer-ca": f"{tls_dir}/ca.crt", "--tls-client-ca": f"{tls_dir}/ca.crt"}, flags
        for key in ("tls.crt", "tls.key", "ca.crt"):
            assert (tls_dir / key).read_text() == c["secrets"][TLS_SECRET][key]
        assert "--insecure-plaintext-peers" not in flag_names(process.argv)
        advertised = [a for a in process.argv if a.startswith(("--advertise-", "--peers="))]
        assert advertised and all("https://" in a and "http://" not in a for a in advertised), advertised
    # The voters reached each other over TLS (peer certificates checked both
    # ways): one cluster, one leader, every voter agreeing.
    ca = trusting(c["certs"] / "ca.crt")
    expected = {i + 1: f"https://127.0.0.1:{c['api'][pod]}" for i, pod in enumerate(c["pods"])}

    def fetch():
        answers = [https("GET", f"https://127.0.0.1:{c['api'][pod]}/v1/cluster", context=ca,
                         token=c["tokens"]["ops"]) for pod in c["pods"]]
        assert [status for status, _ in answers] == [200] * REPLICAS, answers
        return [view for _, view in answers]

    views, members = members_once_known(fetch, expected)
    assert len({v["cluster_id"] for v in views}) == 1
    assert len({v["leader_id"] for v in views}) == 1 and views[0]["leader_id"] in members


def plain_http_answer(port: int) -> bytes:
    """What a plain-text HTTP request to `port` gets back (b"" when the server
    just closes the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: baton\r\nConnection: close\r\n\r\n")
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(4096):
                answer += chunk
        return answer


def test_tls_plain_http_and_untrusted_https_get_no_answer(tls_cluster):
    c = tls_cluster
    for pod in c["pods"]:
        for port_name in ("api", "raft"):
            port = c["loopback"].port(pod, c["named_ports"][port_name])
            assert not plain_http_answer(port).startswith(b"HTTP/"), (pod, port_name)
        url = f"https://127.0.0.1:{c['api'][pod]}/healthz"
        # The system's CAs do not include the dev CA: the handshake fails.
        with pytest.raises(urllib.error.URLError) as refused:
            https("GET", url, context=ssl.create_default_context())
        assert isinstance(refused.value.reason, ssl.SSLCertVerificationError), refused.value
        # The same request trusting the CA is answered (the check above is not vacuous).
        assert https("GET", url, context=trusting(c["certs"] / "ca.crt"))[0] == 200
        # The raft port asks for a peer certificate: without one, the handshake ends.
        raft = c["loopback"].port(pod, c["named_ports"]["raft"])
        with pytest.raises(OSError, match="certificate required"):
            https("GET", f"https://127.0.0.1:{raft}/healthz", context=trusting(c["certs"] / "ca.crt"))


def test_tls_client_certificate_is_its_principal(tls_cluster):
    """A client certificate valid for `billing.client` stands for billing's
    token, on every voter (a follower forwards the write with its principal)."""
    c = tls_cluster
    billing = trusting(c["certs"] / "ca.crt", c["certs"] / "billing.client")
    for pod in c["pods"]:
        base = f"https://127.0.0.1:{c['api'][pod]}"
        status, grant = https("POST", f"{base}/v1/locks/billing/{pod}:acquire", {"ttl_ms": 15000}, context=billing)
        assert status == 200 and grant["token"] > 0, (pod, grant)
        status, problem = https("POST", f"{base}/v1/locks/other/{pod}:acquire", {"ttl_ms": 15000}, context=billing)
        assert (status, problem["code"]) == (403, "forbidden"), (pod, problem)
        status, released = https("POST", f"{base}/v1/locks/billing/{pod}:release",
                                 {"lease_id": grant["lease_id"], "token": grant["token"]}, context=billing)
        assert status == 200 and released["released"] is True, (pod, released)
        # No certificate and no token: 401.
        status, problem = https("POST", f"{base}/v1/locks/billing/{pod}:acquire", {"ttl_ms": 15000},
                                context=trusting(c["certs"] / "ca.crt"))
        assert (status, problem["code"]) == (401, "unauthenticated"), (pod, problem)
    # A certificate from the same CA that names no principal (the node's own) is
    # no one: the mapping is by name, not "any certificate the CA signed".
    node = trusting(c["certs"] / "ca.crt", c["certs"] / "node")
    status, problem = https("POST", f"https://127.0.0.1:{c['api'][c['pods'][0]]}/v1/locks/billing/x:acquire",
                            {"ttl_ms": 15000}, context=node)
    assert (status, problem.get("code")) == (401, "unauthenticated"), (status, problem)


def test_tls_lock_cycle_through_the_rendered_sidecar(tls_cluster):
    """The proxy listens in plain http on loopback and dials the voters over
    https, trusting the CA from its own Secret volume (items: ca.crt only)."""
    c = tls_cluster
    ca_dir = c["volume_dir"](c["app_pod"], "baton-ca")
    assert sorted(p.name for p in ca_dir.iterdir() if not p.name.startswith("..")) == ["ca.crt"]
    assert f"--tls-peer-ca={ca_dir}/ca.crt" in c["proxy"].argv
    assert all(u.startswith("https://") for a in c["proxy"].argv if a.startswith("--proxy=")
               for u in a.split("=", 1)[1].split(",")), c["proxy"].argv
    base = f"http://127.0.0.1:{c['proxy_port']}"
    billing = c["tokens"]["billing"]
    status, grant = http("POST", f"{base}/v1/locks/billing/sidecar:acquire", {"ttl_ms": 15000}, token=billing)
    assert status == 200 and grant["token"] > 0, grant
    status, problem = http("POST", f"{base}/v1/locks/other/sidecar:acquire", {"ttl_ms": 15000}, token=billing)
    assert (status, problem.get("code")) == (403, "forbidden"), (status, problem)
    status, released = http("POST", f"{base}/v1/locks/billing/sidecar:release",
                            {"lease_id": grant["lease_id"], "token": grant["token"]}, token=billing)
    assert status == 200 and released["released"] is True, released


def test_tls_helm_test_pod_passes(tls_cluster, tmp_path):
    """The `helm test` script with curl --cacert (and, with clientCaKey, the
    node's certificate as its client certificate) from the TLS Secret."""
    c = tls_cluster
    done = run_helm_test_pod(c, c["secrets"])
    assert done.returncode == 0 and "PASS" in done.stdout, (done.stdout, done.stderr)
    # Not vacuous: trusting another CA, curl refuses the voters' certificates.
    other = dev_certs(c["binary"], tmp_path / "other", [])
    wrong = {**c["secrets"], TLS_SECRET: {**c["secrets"][TLS_SECRET], "ca.crt": (other / "ca.crt").read_text()}}
    done = run_helm_test_pod(c, wrong)
    assert done.returncode != 0 and "PASS" not in done.stdout, (done.stdout, done.stderr)
    assert "FAIL: the acquire was refused" in done.stdout, (done.stdout, done.stderr)
