"""Fuzzing from the spec (issue 16): schemathesis against a live node with auth on.

Run it with `make test-fuzz` (builds the binary, makes the Python venv), or by hand
from the repository root:

    BATON_BIN=/path/to/baton .venv/bin/pytest -q service/api/tests/schemathesis

What it does:

- starts `baton serve` on free loopback ports with a temporary data directory and
  an `--auth-file` holding two principals whose tokens come from
  `baton auth new-token`: `fuzz-admin` (role admin) and `fuzz-client` (role client,
  every kind limited to the `client/` prefix);
- runs schemathesis (pinned in .ci/requirements-test.txt) on the COMMITTED
  `openapi/baton.json` with the node's base URL, every phase (examples, coverage,
  fuzzing, stateful), every check (`--checks all`: server errors, status codes,
  content types, headers and bodies against the schema, accepted invalid input,
  rejected valid input, undeclared methods, ignored auth, use after free, ...),
  a fixed seed and a bounded number of examples per operation, sending the admin
  token on every request;
- fails on any failure or error schemathesis reports, and on the node dying
  (a panic takes the process down with exit code 70).

Membership (`/v1/cluster/members`, with `GET /v1/cluster` whose addresses
schemathesis reuses) is fuzzed by a second schemathesis run on a node of its own,
with `MEMBERSHIP_FACTOR` times the examples (two operations, a few seconds): a
membership request that breaks the node must not hide every finding on the lock
API behind a "server unavailable".

Settings schemathesis reads from `schemathesis.toml` next to this file: request
timeouts (event streams are read for 1 s) and report sanitization (only the bearer
token and the cluster secret are hidden, so reproductions keep their
`Idempotency-Key` and fencing-token values).

Auth. schemathesis's `ignored_auth` check acts on operations whose spec declares a
security requirement: the spec declares a bearer scheme (and the cluster secret for
membership and force-release), and `test_spec_declares_bearer_auth` keeps it so.
`test_every_operation_refuses_missing_and_wrong_tokens` also sends every operation
without a token, with an unknown token and with the client's token on names
outside its prefixes, and wants 401 / 401 / 403.

Stateful phase. It follows the spec's OpenAPI `links` (create a lease, then keep
it alive, acquire a lock on it, renew, release, ...); `test_spec_declares_links`
fails if one of those `PROTOTYPE_LINKS` lists goes missing.

Deliberate differences from the committed spec: the node runs with
`--max-wait-ms 2000` and the copy schemathesis reads says so (the spec documents
the default 5 minutes, which a fuzzed acquire on a held lock would wait out), and
with `--min-revision-wait-ms 200` (generated revisions are far ahead of the node,
and each read would wait the default 3 s for its 504);
`schemathesis.toml` counts 422 `idempotency_key_reused` as a valid refusal and
504 `revision_not_reached` as the documented end of a `min_revision` wait.

Knobs (environment): `BATON_FUZZ_EXAMPLES` (examples per operation, default 10),
`BATON_FUZZ_SEED` (default 7), `BATON_FUZZ_REPORT_DIR` (keep schemathesis's NDJSON
reports, the node logs and `failures.md` there; default: a temporary directory,
removed after a passing run and kept, with its path printed, after a failing one).
One schemathesis worker: with four, the run was a third shorter but hypothesis
crashed inside CPython's AST building ("AST constructor recursion depth mismatch",
a thread-safety fault in generation, session 55), which fails the run on no finding.
"""

from __future__ import annotations

import base64
import copy
import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from baton_ports import free_port

ROOT = Path(__file__).resolve().parents[4]
SPEC = ROOT / "openapi" / "baton.json"
# The node's --max-wait-ms (see run_schemathesis).
MAX_WAIT_MS = 2000
# The node's --min-revision-wait-ms: generated `min_revision` values are mostly far
# ahead of the node, and each such read waited the default 3 s for its 504 (about
# 90 s of the lock API run's 190 s, session 55).
MIN_REVISION_WAIT_MS = 200
CONFIG = Path(__file__).resolve().parent / "schemathesis.toml"
VENV_BIN = Path(sys.executable).parent
SEED = int(os.environ.get("BATON_FUZZ_SEED", "7"))
EXAMPLES = int(os.environ.get("BATON_FUZZ_EXAMPLES", "10"))
PROTOTYPE = os.environ.get("BATON_FUZZ_PROTOTYPE") == "1"
MEMBERSHIP = "^/v1/cluster/members"
# The membership run also reads the cluster: schemathesis reuses the addresses it
# answers (a node re-added under another id, a member removed, ...).
MEMBERSHIP_RUN = "^/v1/cluster"
# Operations anyone may call without a token (the default auth file's `endpoints`).
# Health probes are configured open on the fuzzed node; the document, its page and
# the console page are always open (the console asks for a token before it reads).
OPEN_OPERATIONS = {"healthz", "readyz", "openapi", "docs", "ui"}
CLIENT_PREFIX = "client/"
# The membership run covers two operations in seconds: it gets more examples each.
MEMBERSHIP_FACTOR = 20


def baton_bin() -> str:
    explicit = os.environ.get("BATON_BIN")
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/baton-target"))
    return os.path.join(target, "debug", "baton")


def new_token() -> tuple[str, str]:
    """A fresh bearer token and its auth-file digest, from the binary under test."""
    out = subprocess.run([baton_bin(), "auth", "new-token"], capture_output=True, text=True,
                         check=True).stdout.split()
    assert len(out) == 2 and out[1].startswith("sha256:"), out
    return out[0], out[1]


class Node:
    """One `baton serve` with auth on, as a real process."""

    def __init__(self, workdir: Path, name: str) -> None:
        self.workdir = workdir
        self.admin_token, admin_digest = new_token()
        self.client_token, client_digest = new_token()
        self.auth_file = workdir / f"{name}-auth.json"
        self.auth_file.write_text(json.dumps({"principals": [
            {"name": "fuzz-admin", "role": "admin", "tokens": [admin_digest]},
            {"name": "fuzz-client", "role": "client", "tokens": [client_digest],
             "locks": [CLIENT_PREFIX], "elections": [CLIENT_PREFIX],
             "names": [CLIENT_PREFIX], "watch": [CLIENT_PREFIX]},
        ]}, indent=2))
        self.data_dir = workdir / f"{name}-data"
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.log_path = workdir / f"{name}-baton.log"
        self.log_path.unlink(missing_ok=True)
        self.api_port = free_port()
        self.raft_port = free_port()
        self.url = f"http://127.0.0.1:{self.api_port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [baton_bin(), "serve", "--listen", f"127.0.0.1:{self.api_port}",
                 "--raft-listen", f"127.0.0.1:{self.raft_port}",
                 "--data-dir", str(self.data_dir), "--auth-file", str(self.auth_file),
                 "--max-wait-ms", str(MAX_WAIT_MS),
                 "--min-revision-wait-ms", str(MIN_REVISION_WAIT_MS)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"baton exited with {self.process.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("baton did not become ready: " + self.log())
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def panics(self) -> list[str]:
        """The `panicked at` lines of the log, each with the assertion after it."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        return [" ".join(lines[i:i + 2]) for i, line in enumerate(lines) if "panicked at" in line]

    def call(self, method: str, path: str, token: str | None, body: Any = None) -> tuple[int, Any]:
        headers = {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, _json_or_text(response.read(512))
        except urllib.error.HTTPError as error:
            return error.code, _json_or_text(error.read())


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


@pytest.fixture(scope="module")
def workdir():
    keep = os.environ.get("BATON_FUZZ_REPORT_DIR")
    if keep:
        path = Path(keep)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix="baton-fuzz-"))
    failed_before = _failures_so_far()
    yield path
    if _failures_so_far() == failed_before:
        shutil.rmtree(path, ignore_errors=True)
    else:
        print(f"\nfuzz: reports and node logs kept in {path}", file=sys.stderr)


_FAILED: list[str] = []


def _failures_so_far() -> int:
    return len(_FAILED)


@pytest.fixture
def node_factory(workdir):
    nodes: list[Node] = []

    def make(name: str) -> Node:
        node = Node(workdir, name)
        nodes.append(node)
        node.start()
        return node

    yield make
    for node in nodes:
        node.stop()


def spec() -> dict:
    return json.loads(SPEC.read_text())


def operations(document: dict) -> list[tuple[str, str, dict]]:
    return [(method.upper(), path, op) for path, item in document["paths"].items()
            for method, op in item.items()
            if method in ("get", "put", "post", "delete", "patch")]


# --- what the spec must declare ---------------------------------------------------

# The links the stateful phase needs, as the Rust side should declare them (utoipa:
# `#[utoipa::path(..., responses((status = 201, ..., links(...))))]` or by
# post-processing the generated document): source operationId -> status ->
# link name -> link object. `$request.path.name` rather than `$response.body#/name`
# so that the follow-up addresses exactly the name the first request used.
def _lease(status_expr: str = "$response.body#/lease_id") -> dict:
    return {"lease_id": status_expr}


def _by_lease(expr: str) -> dict:
    return {
        "KeepAlive": {"operationId": "keepalive_lease", "parameters": {"path.lease_id": expr}},
        "GetLease": {"operationId": "get_lease", "parameters": {"path.lease_id": expr}},
        "RevokeLease": {"operationId": "revoke_lease", "parameters": {"path.lease_id": expr}},
    }


PROTOTYPE_LINKS: dict[str, dict[str, dict[str, dict]]] = {
    "create_lease": {"201": {
        **_by_lease("$response.body#/lease_id"),
        "AcquireLock": {"operationId": "acquire_lock", "requestBody": _lease()},
        "Campaign": {"operationId": "campaign", "requestBody": _lease()},
        "RegisterName": {"operationId": "register_name", "requestBody": _lease()},
    }},
    "acquire_lock": {"200": {
        **_by_lease("$response.body#/lease_id"),
        "RenewLock": {"operationId": "renew_lock",
                      "parameters": {"path.name": "$request.path.name"},
                      "requestBody": {"lease_id": "$response.body#/lease_id",
                                      "token": "$response.body#/token"}},
        "ReleaseLock": {"operationId": "release_lock",
                        "parameters": {"path.name": "$request.path.name"},
                        "requestBody": {"lease_id": "$response.body#/lease_id",
                                        "token": "$response.body#/token"}},
        "ValidateLock": {"operationId": "validate_lock",
                         "parameters": {"path.name": "$request.path.name"},
                         "requestBody": {"token": "$response.body#/token"}},
        "GetLock": {"operationId": "get_lock", "parameters": {"path.name": "$request.path.name"}},
    }},
    "renew_lock": {"200": {
        "ReleaseLock": {"operationId": "release_lock",
                        "parameters": {"path.name": "$request.path.name"},
                        "requestBody": {"lease_id": "$request.body#/lease_id",
                                        "token": "$response.body#/token"}},
        "ValidateLock": {"operationId": "validate_lock",
                         "parameters": {"path.name": "$request.path.name"},
                         "requestBody": {"token": "$response.body#/token"}},
    }},
    "campaign": {"200": {
        **_by_lease("$response.body#/lease_id"),
        "Proclaim": {"operationId": "proclaim",
                     "parameters": {"path.name": "$request.path.name"},
                     "requestBody": {"lease_id": "$response.body#/lease_id",
                                     "token": "$response.body#/token"}},
        "Resign": {"operationId": "resign",
                   "parameters": {"path.name": "$request.path.name"},
                   "requestBody": {"lease_id": "$response.body#/lease_id",
                                   "token": "$response.body#/token"}},
        "GetElection": {"operationId": "get_election",
                        "parameters": {"path.name": "$request.path.name"}},
        "Observe": {"operationId": "observe_election",
                    "parameters": {"path.name": "$request.path.name"}},
    }},
    "proclaim": {"200": {
        "Resign": {"operationId": "resign",
                   "parameters": {"path.name": "$request.path.name"},
                   "requestBody": {"lease_id": "$request.body#/lease_id",
                                   "token": "$response.body#/token"}},
    }},
    "register_name": {status: {
        **_by_lease("$response.body#/lease_id"),
        "GetName": {"operationId": "get_name", "parameters": {"path.name": "$request.path.name"}},
        "UnregisterName": {"operationId": "unregister_name",
                           "parameters": {"path.name": "$request.path.name"},
                           "requestBody": {"lease_id": "$response.body#/lease_id"}},
    } for status in ("200", "201")},
    "add_member": {"200": {
        "RemoveMember": {"operationId": "remove_member",
                         "parameters": {"path.id": "$response.body#/id"}},
    }},
}


def missing_links(document: dict) -> list[str]:
    by_id = {op.get("operationId"): op for _, _, op in operations(document)}
    missing = []
    for source, statuses in PROTOTYPE_LINKS.items():
        for status, links in statuses.items():
            declared = by_id[source]["responses"].get(status, {}).get("links", {})
            targets = {link.get("operationId") for link in declared.values()}
            for link in links.values():
                if link["operationId"] not in targets:
                    missing.append(f"{source} {status} -> {link['operationId']}")
    return missing


def security_gaps(document: dict) -> list[str]:
    gaps = []
    schemes = document.get("components", {}).get("securitySchemes", {})
    bearer = [name for name, s in schemes.items()
              if s.get("type") == "http" and s.get("scheme", "").lower() == "bearer"]
    if not bearer:
        gaps.append("components.securitySchemes declares no http bearer scheme")
    top = document.get("security")
    unsecured, undocumented = [], []
    for _, _, op in operations(document):
        if op.get("operationId") in OPEN_OPERATIONS:
            continue
        if not any(req for req in (op.get("security", top) or [])):
            unsecured.append(op["operationId"])
        missing = {"401", "403"} - set(op.get("responses", {}))
        if missing:
            undocumented.append(f"{op['operationId']} ({'/'.join(sorted(missing))})")
    if unsecured:
        gaps.append("no security requirement on: " + ", ".join(unsecured))
    if undocumented:
        gaps.append("401/403 not documented on: " + ", ".join(undocumented))
    return gaps


def prototype_spec(document: dict) -> dict:
    """A COPY of the spec with what the Rust side should add: a bearer scheme, a
    security requirement on every operation but the open ones, 401/403 responses,
    and the links above. Only for BATON_FUZZ_PROTOTYPE=1."""
    patched = copy.deepcopy(document)
    patched.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
        "type": "http", "scheme": "bearer"}
    patched["security"] = [{"bearer": []}]
    problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    by_id = {}
    for _, _, op in operations(patched):
        by_id[op["operationId"]] = op
        if op["operationId"] in OPEN_OPERATIONS:
            op["security"] = []
            continue
        op["responses"].setdefault("401", {"description": "unauthenticated", "content": problem})
        op["responses"].setdefault("403", {"description": "forbidden", "content": problem})
    for source, statuses in PROTOTYPE_LINKS.items():
        for status, links in statuses.items():
            response = by_id[source]["responses"].get(status)
            if response is not None:
                response.setdefault("links", {}).update(copy.deepcopy(links))
    return patched


def test_spec_declares_bearer_auth():
    """schemathesis's ignored_auth check needs a declared security requirement."""
    gaps = security_gaps(spec())
    assert not gaps, "openapi/baton.json does not describe its auth:\n  " + "\n  ".join(gaps)


def test_spec_declares_links():
    """The stateful phase follows OpenAPI links: without them it tests no flow."""
    missing = missing_links(spec())
    assert not missing, ("openapi/baton.json declares no link for (source status -> target):\n  "
                         + "\n  ".join(missing))


# --- auth, checked directly while the spec declares none ----------------------------

def _concrete_path(path: str, name: str) -> str:
    return (path.replace("{name}", name).replace("{lease_id}", "k2rytugxoghehvtiemuas7efha")
            .replace("{id}", "2"))


def test_every_operation_refuses_missing_and_wrong_tokens(node_factory):
    node = node_factory("auth")
    wrong: list[str] = []
    for method, path, op in operations(spec()):
        if op["operationId"] in OPEN_OPERATIONS:
            continue
        body = {} if method in ("POST", "PUT") else None
        target = _concrete_path(path, "other/x")
        for label, token, want in [("no token", None, 401),
                                   ("unknown token", "not-a-token", 401)]:
            status, answer = node.call(method, target, token, body)
            code = answer.get("code") if isinstance(answer, dict) else answer
            if status != want:
                wrong.append(f"{method} {target} with {label}: {status} {code}, want {want}")
        # The client principal may use only `client/` names and is no admin.
        if "{name}" in path or op["operationId"] in ("metrics", "add_member", "remove_member"):
            status, answer = node.call(method, target, node.client_token, body)
            code = answer.get("code") if isinstance(answer, dict) else answer
            if status != 403:
                wrong.append(f"{method} {target} as fuzz-client: {status} {code}, want 403")
    assert node.alive(), node.log()
    if wrong:
        _FAILED.append("auth")
    assert not wrong, "auth not enforced:\n  " + "\n  ".join(wrong)


# --- schemathesis ------------------------------------------------------------------

def run_schemathesis(node: Node, workdir: Path, name: str, filters: list[str],
                     examples: int) -> dict:
    document = spec()
    # The spec documents the default bound of `wait_ms` (5 minutes); this node is
    # started with a shorter one (a fuzzed acquire on a held lock would otherwise
    # outwait every request timeout), and the copy schemathesis reads says so.
    # Nothing else in the committed document is changed.
    for schema in document["components"]["schemas"].values():
        wait = schema.get("properties", {}).get("wait_ms")
        if wait is not None and "maximum" in wait:
            wait["maximum"] = MAX_WAIT_MS
    # Links carry their body expressions under `x-request-body` (openapi-generator's
    # validator refuses an object in `requestBody`); schemathesis reads `requestBody`.
    for _, _, op in operations(document):
        for response in op.get("responses", {}).values():
            for link in response.get("links", {}).values():
                if "x-request-body" in link:
                    link["requestBody"] = link.pop("x-request-body")
    location = workdir / f"{name}-spec.json"
    location.write_text(json.dumps(document, indent=1))
    if PROTOTYPE:
        location = workdir / f"{name}-prototype-spec.json"
        location.write_text(json.dumps(prototype_spec(document), indent=1))
    report_dir = workdir / f"{name}-report"
    shutil.rmtree(report_dir, ignore_errors=True)
    command = [
        str(VENV_BIN / "schemathesis"), "--config-file", str(CONFIG),
        "run", "--no-color", str(location),
        "--url", node.url,
        "--header", f"Authorization: Bearer {node.admin_token}",
        "--phases", "examples,coverage,fuzzing,stateful",
        "--checks", "all",
        "--seed", str(SEED),
        "--max-examples", str(examples),
        "--workers", "1",
        "--continue-on-failure",
        "--generation-database", "none",
        # The name pattern (A-Z a-z 0-9 . _ - / @ + = ~, `/` only between segments,
        # at most 256 bytes) is strict on purpose; with some draws hypothesis rejects
        # enough generated names for one operation to call that a failed health check
        # (names' register and revoke, after the spec gained examples). That says
        # nothing about the server, and every other check still runs on them.
        "--suppress-health-check", "filter_too_much",
        "--report", "ndjson,json",
        "--report-dir", str(report_dir),
        *filters,
    ]
    started = time.monotonic()
    result = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    (workdir / f"{name}-schemathesis.txt").write_text(result.stdout + result.stderr)
    ndjson = glob.glob(str(report_dir / "*.ndjson"))
    summary_json = glob.glob(str(report_dir / "*.json"))
    assert ndjson and summary_json, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(Path(summary_json[0]).read_text())
    failures = collect_failures(Path(ndjson[0]), node)
    cases = count_cases(Path(ndjson[0]))
    return {"name": name, "exit_code": result.returncode, "elapsed": elapsed,
            "summary": summary, "failures": failures, "cases": cases,
            "tail": result.stdout[-2500:]}


def _decode(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, dict) and "$base64" in content:
        return base64.b64decode(content["$base64"]).decode(errors="replace")
    return str(content)


def _curl(request: dict) -> str:
    parts = ["curl", "-sS", "-X", request["method"]]
    for header, values in request.get("headers", {}).items():
        if header.lower() in ("user-agent", "accept-encoding", "accept", "connection",
                              "content-length", "x-schemathesis-testcaseid"):
            continue
        for value in values:
            if header.lower() == "authorization":
                value = "Bearer $BATON_TOKEN"
                parts += ["-H", f'"Authorization: {value}"']
                continue
            parts += ["-H", shlex.quote(f"{header}: {value}")]
    body = _decode(request.get("body"))
    if body:
        parts += ["--data-binary", shlex.quote(body)]
    parts.append(shlex.quote(request["uri"]))
    return " ".join(parts)


def collect_failures(ndjson: Path, node: Node) -> list[dict]:
    """Every failed check, with its request and response, deduplicated by
    (operation, check, response status, problem code)."""
    seen: dict[tuple, dict] = {}
    errors: list[dict] = []
    for line in ndjson.read_text().splitlines():
        event = json.loads(line)
        if "NonFatalError" in event:
            value = event["NonFatalError"]
            errors.append({"operation": value.get("label"), "check": "error",
                           "title": value["value"].get("type"),
                           "message": value["value"].get("message"), "count": 1})
            continue
        finished = event.get("ScenarioFinished")
        if not finished:
            continue
        recorder = finished["recorder"]
        for case_id, checks in recorder.get("checks", {}).items():
            for check in checks:
                if check.get("status") != "failure":
                    continue
                failure = check["failure_info"]["failure"]
                interaction = recorder["interactions"].get(case_id) or {}
                request = interaction.get("request") or {}
                response = interaction.get("response") or {}
                text = _decode(response.get("content"))
                try:
                    code = json.loads(text).get("code")
                except (ValueError, AttributeError):
                    code = None
                key = (failure.get("operation") or recorder["label"], failure["title"],
                       response.get("status_code"), code)
                if key in seen:
                    seen[key]["count"] += 1
                    continue
                case = recorder["cases"].get(case_id, {}).get("value", {})
                phase = case.get("meta", {}).get("phase", {}).get("name")
                seen[key] = {
                    "operation": key[0], "check": check["name"], "title": failure["title"],
                    "code": failure.get("code"), "message": failure.get("message", ""),
                    "phase": phase, "status": response.get("status_code"),
                    "response": text[:600], "request": request,
                    "curl": _curl(request) if request else "", "count": 1,
                }
    return list(seen.values()) + errors


def count_cases(ndjson: Path) -> dict[str, int]:
    """Test cases sent per phase (each case of a scenario counts once)."""
    counts: dict[str, int] = {}
    for line in ndjson.read_text().splitlines():
        event = json.loads(line)
        finished = event.get("ScenarioFinished")
        if finished:
            phase = finished.get("phase") or "?"
            counts[phase] = counts.get(phase, 0) + len(finished["recorder"].get("cases", {}))
    return counts


def describe(run: dict, node: Node) -> str:
    summary = run["summary"]
    lines = [f"## {run['name']}: schemathesis exit {run['exit_code']}, "
             f"{run['elapsed']:.0f}s, seed {summary['seed']}, "
             f"operations {summary['operations']['tested']}/{summary['operations']['total']}",
             f"phases: " + ", ".join(f"{name} {info['status']}"
                                     + (f" ({info['skip_reason']})" if info.get("skip_reason") else "")
                                     for name, info in summary["phases"].items()),
             f"test cases: {summary['test_cases']}; per phase: {run['cases']}",
             f"stop reason: {summary.get('stop_reason')}; node alive: {node.alive()}"]
    for panic in node.panics():
        lines.append(f"NODE PANIC: {panic}")
    lines.append(f"{len(run['failures'])} distinct failures "
                 "(operation, check, status, problem code):")
    for failure in sorted(run["failures"], key=lambda f: (f["check"], f["operation"] or "")):
        lines.append(f"- [{failure.get('code') or ''}] {failure['title']} on {failure['operation']}"
                     f" -> {failure.get('status')} (x{failure['count']}, phase {failure.get('phase')})")
        message = failure.get("message", "").strip().splitlines()
        if message:
            lines.append("    " + " | ".join(message[:3])[:400])
        if failure.get("response"):
            lines.append("    response: " + failure["response"][:300].replace("\n", "\\n"))
        if failure.get("curl"):
            lines.append("    " + failure["curl"][:900])
    return "\n".join(lines)


def _fuzz(node_factory, workdir: Path, name: str, filters: list[str], examples: int) -> None:
    node = node_factory(name)
    run = run_schemathesis(node, workdir, name, filters, examples)
    report = describe(run, node)
    (workdir / f"{name}-failures.md").write_text(report + "\n")
    print("\n" + report)
    healthy = node.alive() and not node.panics()
    ok = run["exit_code"] == 0 and not run["failures"] and healthy
    if not ok:
        _FAILED.append(name)
    assert ok, report


def test_fuzz_lock_api(node_factory, workdir):
    """Every operation but membership changes, on its own node."""
    _fuzz(node_factory, workdir, "lock-api", ["--exclude-path-regex", MEMBERSHIP], EXAMPLES)


def test_fuzz_membership(node_factory, workdir):
    """Membership changes (admin), on a node of their own: the node must survive."""
    _fuzz(node_factory, workdir, "membership", ["--include-path-regex", MEMBERSHIP_RUN],
          EXAMPLES * MEMBERSHIP_FACTOR)
