"""Turn a rendered container into a local process, the way the kubelet would
start it, with every cluster address moved onto 127.0.0.1.

- env: `value` (with `$(VAR)` expanded from the variables before it),
  `fieldRef` metadata.name / metadata.namespace, `secretKeyRef` from the rendered
  Secrets; HOSTNAME is the pod name; nothing is inherited from this process.
- `$(VAR)` in command and args is expanded from that env (`$$(VAR)` stays literal).
- Addresses: each (pod, container port) gets its own free loopback port. A
  listener `0.0.0.0:P`, `127.0.0.1:P` or `localhost:P` in a pod's args becomes
  that pod's port P; `<pod>.<headless>.<ns>.svc.<domain>:P` becomes that pod's
  port P; `<service>.<ns>.svc.<domain>:P` becomes a backing pod's target port.
  Any other name under `.svc.<domain>` is an error: nothing may dial out.
- Volume mount paths at the start of a value (or after `=`) become a directory
  per (pod, volume); a Secret volume's directory holds the Secret's keys (or,
  with `items`, only the listed ones under their `path`: `secret_volume_files`)
  as the kubelet projects them (`write_secret_volume`).
- The rendered binary path becomes the local binary.

Only values change: a flag's name is never touched (see `flag_names`).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from baton_ports import free_port

VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
HOST_PORT = re.compile(r"(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(?P<port>[0-9]{1,5})\b")
LOCAL_HOSTS = {"0.0.0.0", "127.0.0.1", "localhost"}


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: unknown references stay as written."""

    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return VAR_REF.sub(one, text)


def flag_names(args: list[str]) -> list[str]:
    """`--name` of every flag argument, in order (the part before any `=`)."""
    return [a.split("=", 1)[0] for a in args if a.startswith("-")]


@dataclass
class Loopback:
    """Cluster addresses -> 127.0.0.1:<free port>, consistent across pods."""

    cluster_domain: str
    ports: dict[tuple[str, int], int] = field(default_factory=dict)
    # FQDN of a pod -> pod name
    pod_hosts: dict[str, str] = field(default_factory=dict)
    # FQDN of a Service -> {service port: (pod, container port)}
    service_hosts: dict[str, dict[int, tuple[str, int]]] = field(default_factory=dict)
    allocate: Callable[[], int] = free_port

    def port(self, pod: str, container_port: int) -> int:
        key = (pod, int(container_port))
        if key not in self.ports:
            taken = set(self.ports.values())
            port = self.allocate()
            while port in taken:
                port = self.allocate()
            self.ports[key] = port
        return self.ports[key]

    def add_pod(self, pod: str, fqdn: str) -> None:
        self.pod_hosts[fqdn] = pod

    def add_service(self, fqdn: str, port: int, pod: str, container_port: int) -> None:
        self.service_hosts.setdefault(fqdn, {})[int(port)] = (pod, int(container_port))

    def rewrite(self, text: str, pod: str) -> str:
        def one(match: re.Match) -> str:
            host, port = match.group("host"), int(match.group("port"))
            if host in LOCAL_HOSTS:
                return f"127.0.0.1:{self.port(pod, port)}"
            if host in self.pod_hosts:
                return f"127.0.0.1:{self.port(self.pod_hosts[host], port)}"
            if host in self.service_hosts:
                target = self.service_hosts[host].get(port)
                if target is None:
                    raise ValueError(f"{host}:{port}: the Service has no such port")
                return f"127.0.0.1:{self.port(*target)}"
            if host.endswith(f".svc.{self.cluster_domain}") or ".svc." in host:
                raise ValueError(f"{host}:{port} is a cluster address this test does not know")
            return match.group(0)

        return HOST_PORT.sub(one, text)


@dataclass
class Process:
    """What to exec: argv and the complete environment."""

    pod: str
    container: str
    argv: list[str]
    env: dict[str, str]
    rendered_args: list[str]


def resolve_env(container: dict[str, Any], *, pod: str, namespace: str,
                secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    env = {"HOSTNAME": pod}
    for item in container.get("env", []):
        name = item["name"]
        if "value" in item:
            env[name] = expand(str(item["value"]), env)
        elif "valueFrom" in item:
            source = item["valueFrom"]
            if "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                known = {"metadata.name": pod, "metadata.namespace": namespace, "status.podIP": "127.0.0.1"}
                if path not in known:
                    raise ValueError(f"env {name}: fieldRef {path} is not emulated")
                env[name] = known[path]
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                try:
                    env[name] = secrets[ref["name"]][ref["key"]]
                except KeyError as missing:
                    if ref.get("optional"):
                        continue  # Kubernetes leaves the variable unset

                    raise ValueError(f"env {name}: Secret {ref['name']} key {ref['key']} not rendered") from missing
            else:
                raise ValueError(f"env {name}: {sorted(source)} is not emulated")
        else:
            env[name] = ""
    return env


def localize(container: dict[str, Any], *, pod: str, namespace: str, loopback: Loopback,
             secrets: dict[str, dict[str, str]], binary: str, rendered_binary: str,
             volume_dir: Callable[[str, str], Path]) -> Process:
    """The process for one rendered container of pod `pod`."""
    env = resolve_env(container, pod=pod, namespace=namespace, secrets=secrets)
    mounts = {m["mountPath"].rstrip("/"): m["name"] for m in container.get("volumeMounts", [])}

    # One pass over all mount paths (longest first): a replaced path is never
    # rewritten again (a /tmp mount must not touch the new data directory).
    mount_pattern = re.compile(
        r"(^|=)(" + "|".join(re.escape(p) for p in sorted(mounts, key=len, reverse=True)) + r")(?=/|$|,)"
    ) if mounts else None

    def local_paths(text: str) -> str:
        if mount_pattern is None:
            return text
        return mount_pattern.sub(lambda m: m.group(1) + str(volume_dir(pod, mounts[m.group(2)])), text)

    def local(text: str) -> str:
        return local_paths(loopback.rewrite(text, pod))

    command = [expand(c, env) for c in container.get("command", [])]
    args = [expand(a, env) for a in container.get("args", [])]
    if not command:
        raise ValueError(f"{pod}/{container['name']}: no command (the image's entrypoint is not emulated)")
    if command[0] != rendered_binary:
        raise ValueError(f"{pod}/{container['name']}: runs {command[0]}, not {rendered_binary}")
    argv = [binary] + [local(c) for c in command[1:]] + [local(a) for a in args]
    local_env = {name: local(value) for name, value in env.items()}
    return Process(pod=pod, container=container["name"], argv=argv, env=local_env,
                   rendered_args=command[1:] + args)


def ports_in(argv: list[str]) -> set[int]:
    return {int(m.group("port")) for a in argv for m in HOST_PORT.finditer(a)}


def secret_volume_files(volume_secret: dict[str, Any], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """File name -> contents of a `secret:` volume source, as the kubelet shows
    it: every key of the Secret, or with `items` only the listed keys, each under
    its `path` (the sidecar example mounts just the CA of the TLS Secret this
    way). A missing Secret or listed key keeps the pod from starting (an error
    here) unless the volume is `optional`."""
    name = volume_secret["secretName"]
    data = secrets.get(name)
    if data is None:
        if volume_secret.get("optional"):
            return {}
        raise ValueError(f"Secret {name} is neither rendered nor given")
    items = volume_secret.get("items")
    if items is None:
        return dict(data)
    files = {}
    for item in items:
        if "/" in item["path"]:
            raise ValueError(f"Secret {name}: item path {item['path']} (a subdirectory) is not emulated")
        if item["key"] not in data:
            if volume_secret.get("optional"):
                continue
            raise ValueError(f"Secret {name} has no key {item['key']} (listed in items)")
        files[item["path"]] = data[item["key"]]
    return files


def write_secret_volume(path: Path, files: dict[str, str]) -> None:
    """Project a Secret into `path` the way the kubelet does (AtomicWriter): the
    data in a fresh `..<stamp>` directory, `..data` a symlink to it, replaced by
    a rename, and each key a symlink to `..data/<key>`. Called again with new
    data, it swaps `..data` atomically, as a Secret update does: a reader of
    `path/<key>` sees the old file or the new one, never a partial one."""
    path.mkdir(parents=True, exist_ok=True)
    stamp = path / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    stamp.mkdir()
    for key, value in files.items():
        (stamp / key).write_text(value)
    previous = os.readlink(path / "..data") if (path / "..data").is_symlink() else None
    tmp = path / "..data_tmp"
    os.symlink(stamp.name, tmp)
    os.replace(tmp, path / "..data")
    for key in files:
        link = path / key
        if not link.is_symlink():
            os.symlink(f"..data/{key}", link)
    for stale in path.iterdir():
        if stale.is_symlink() and stale.name not in files and stale.name != "..data":
            stale.unlink()
    if previous:
        shutil.rmtree(path / previous)
