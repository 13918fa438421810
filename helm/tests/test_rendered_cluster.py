"""Check 4: the rendered chart runs. The StatefulSet's container, exactly as
rendered (command, args, env), is started as three real `baton` processes, one
per pod, on loopback; then the rendered sidecar proxy; then a lease, a lock
acquired and released through the proxy. A flag the binary does not know makes
`baton serve` exit, so a flag renamed in the binary but not in the chart fails
here.

Needs BATON_BIN (the `baton` binary; `make test-chart` sets it). Skipped only
when BATON_BIN is unset; fails when it is set but not an executable file."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import NAMESPACE, RELEASE, find, render
from podrun import LOCAL_HOSTS, Loopback, flag_names, localize, ports_in, resolve_env

REPLICAS = 3
READY_TIMEOUT_S = 60
RENDERED_BINARY = "/usr/local/bin/baton"


def http(method: str, url: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, dict | str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


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


@pytest.fixture(scope="module")
def cluster(chart, tmp_path_factory):
    binary = baton_bin()
    docs = render(chart, {"replicas": REPLICAS, "sidecarExample": {"enabled": True}})
    workdir = tmp_path_factory.mktemp("pods")
    domain = chart.values["clusterDomain"]
    sts = find(docs, "StatefulSet", f"{RELEASE}-baton")
    headless = find(docs, "Service", sts["spec"]["serviceName"])
    client_service = find(docs, "Service", f"{RELEASE}-baton")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    named_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    pods = [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])]

    loopback = Loopback(cluster_domain=domain)
    for pod in pods:
        loopback.add_pod(pod, f"{pod}.{headless['metadata']['name']}.{NAMESPACE}.svc.{domain}")
    for port in client_service["spec"]["ports"]:
        target = port["targetPort"]
        loopback.add_service(f"{client_service['metadata']['name']}.{NAMESPACE}.svc.{domain}", port["port"],
                             pods[0], named_ports.get(target, target))
    secrets = rendered_secrets(docs)

    def volume_dir(pod: str, volume: str) -> Path:
        path = workdir / pod / "volumes" / volume
        path.mkdir(parents=True, exist_ok=True)
        return path

    def local(container, pod):
        return localize(container, pod=pod, namespace=NAMESPACE, loopback=loopback, secrets=secrets,
                        binary=binary, rendered_binary=RENDERED_BINARY, volume_dir=volume_dir)

    voters = [local(container, pod) for pod in pods]
    deployment = find(docs, "Deployment", f"{RELEASE}-baton-sidecar-example")
    proxy_container = next(c for c in deployment["spec"]["template"]["spec"]["initContainers"]
                           if c["name"] == "baton-proxy")
    app_pod = f"{deployment['metadata']['name']}-5d8f7c9b4-x7k2p"
    proxy = local(proxy_container, app_pod)

    running = Pods(workdir)
    try:
        for process in voters:
            running.start(process)
        api = {pod: loopback.port(pod, named_ports["api"]) for pod in pods}
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = set(pods)
        while waiting:
            running.check_alive()
            for pod in sorted(waiting):
                try:
                    status, _ = http("GET", f"http://127.0.0.1:{api[pod]}/readyz", timeout=1)
                except OSError:
                    continue
                if status == 200:
                    waiting.discard(pod)
            if waiting and time.monotonic() > deadline:
                pytest.fail(f"not ready after {READY_TIMEOUT_S} s: {sorted(waiting)}\n{running.logs()}")
            time.sleep(0.2)
        running.start(proxy)
        proxy_port = loopback.port(app_pod, 7878)
        deadline = time.monotonic() + 20
        while True:
            running.check_alive()
            try:
                if http("GET", f"http://127.0.0.1:{proxy_port}/healthz", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the proxy does not answer\n{running.logs()}")
            time.sleep(0.1)
        yield {
            "binary": binary, "docs": docs, "loopback": loopback, "pods": pods, "api": api,
            "voters": voters, "proxy": proxy, "proxy_port": proxy_port, "app_pod": app_pod,
            "container": container, "proxy_container": proxy_container, "named_ports": named_ports,
            "running": running, "secrets": secrets, "workdir": workdir,
        }
    finally:
        running.stop_all()


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
    views = [http("GET", f"http://127.0.0.1:{api[pod]}/v1/cluster")[1] for pod in cluster["pods"]]
    assert len({v["cluster_id"] for v in views}) == 1
    members = {m["id"]: m for m in views[0]["members"]}
    # Pod <fullname>-<i> is node i+1, advertising its own (rewritten) client URL.
    assert {i + 1: f"http://127.0.0.1:{api[pod]}" for i, pod in enumerate(cluster["pods"])} == \
        {mid: m["api_addr"] for mid, m in members.items()}
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
