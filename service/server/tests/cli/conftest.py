"""Fixtures for the process tests of the `baton` client commands (issue 15): one
real `baton serve` for the session (free ports, temporary data directory), the
binary under test from BATON_BIN, and helpers that run `baton ...` as real
processes, read what their children recorded and ask the HTTP API directly.

Every test uses its own names (the `name` fixture), so the shared node carries
no state from one test into another."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

from baton_ports import free_port

HERE = Path(__file__).resolve().parent
CHILD = str(HERE / "child.py")

# Exit codes of the contract.
EXIT_REQUEST_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_ACQUIRED = 75
EXIT_LOST = 76


def baton_bin() -> str:
    explicit = os.environ.get("BATON_BIN")
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/baton-target"))
    return os.path.join(target, "debug", "baton")


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.02) -> Any:
    """Polls `condition` until it returns something truthy (returned) or fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def pid_gone(pid: int) -> bool:
    """True when no process `pid` runs any more (absent, or a zombie nobody reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def records(path: str | Path) -> list[dict]:
    """The JSON lines a child.py appended to `path` (none when it does not exist)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def intervals(path: str | Path) -> list[dict]:
    """One entry per child run (by pid): label, token, start, end (None without an end),
    last (the time of its last line); sorted by start."""
    runs: dict[int, dict] = {}
    for r in records(path):
        run = runs.setdefault(r["pid"], {"pid": r["pid"], "label": r["label"], "token": r["token"],
                                         "start": None, "end": None, "last": None})
        if r["ev"] == "start":
            run["start"] = r["t"]
        elif r["ev"] == "end":
            run["end"] = r["t"]
        run["last"] = r["t"] if run["last"] is None else max(run["last"], r["t"])
    return sorted(runs.values(), key=lambda run: run["start"] or 0)


class Server:
    """A single-node `baton serve` as a real process."""

    def __init__(self, workdir: str) -> None:
        self.data_dir = os.path.join(workdir, "data")
        self.log_path = os.path.join(workdir, "baton-serve.log")
        self.api_port = free_port()
        self.raft_port = free_port()
        self.url = f"http://127.0.0.1:{self.api_port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [baton_bin(), "serve", "--listen", f"127.0.0.1:{self.api_port}",
                 "--raft-listen", f"127.0.0.1:{self.raft_port}", "--data-dir", self.data_dir],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={k: v for k, v in os.environ.items() if not k.startswith("BATON_")})
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"baton serve exited with {self.process.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.HTTPError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("baton serve did not become ready: " + self.log())
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def call(self, method: str, path: str, body: Any = None, timeout: float = 30) -> tuple[int, Any, dict]:
        """One HTTP request: (status, parsed JSON body or None, headers)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
                return response.status, (json.loads(raw) if raw else None), dict(response.headers)
        except urllib.error.HTTPError as error:
            raw = error.read()
            return error.code, (json.loads(raw) if raw else None), dict(error.headers)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer, _ = self.call(method, path, body)
        assert 200 <= status < 300, (method, path, status, answer)
        return answer

    # The reads the tests compare the CLI with.
    def lock(self, name: str) -> dict:
        return self.ok("GET", "/v1/locks/" + quote(name))

    def election(self, name: str) -> tuple[int, Any]:
        status, answer, _ = self.call("GET", "/v1/elections/" + quote(name))
        return status, answer

    def lease_status(self, lease_id: str) -> int:
        return self.call("GET", "/v1/leases/" + quote(lease_id))[0]

    def hold(self, name: str, holder: str, ttl_ms: int = 60000) -> dict:
        """Acquires `name` over HTTP on a fresh lease (the grant: token, lease_id, ...)."""
        lease = self.ok("POST", "/v1/leases", {"ttl_ms": ttl_ms, "holder": holder})
        return self.ok("POST", f"/v1/locks/{quote(name)}:acquire", {"lease_id": lease["lease_id"]})


def quote(name: str) -> str:
    return urllib.parse.quote(name, safe="/")


class Result:
    def __init__(self, args: list[str], rc: int, stdout: str, stderr: str, elapsed: float) -> None:
        self.args, self.rc, self.stdout, self.stderr, self.elapsed = args, rc, stdout, stderr, elapsed

    def __repr__(self) -> str:
        return (f"<baton {' '.join(self.args)!r}: rc={self.rc} after {self.elapsed:.2f}s, "
                f"stdout={self.stdout[-1500:]!r}, stderr={self.stderr[-1500:]!r}>")

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]


class Proc:
    """A `baton ...` running in the background, its stdout and stderr going to files."""

    def __init__(self, args: list[str], popen: subprocess.Popen, out: Path, err: Path) -> None:
        self.args, self.popen, self.out, self.err = args, popen, out, err
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stdout(self) -> str:
        return self.out.read_text(errors="replace") if self.out.exists() else ""

    def stderr(self) -> str:
        return self.err.read_text(errors="replace") if self.err.exists() else ""

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self!r} still runs after {timeout} s") from None

    def __repr__(self) -> str:
        return (f"<baton {' '.join(self.args)!r} pid {self.pid} rc={self.popen.poll()}, "
                f"stdout={self.stdout()[-1500:]!r}, stderr={self.stderr()[-1500:]!r}>")


class Cli:
    """Runs the binary under test against the session's server, in a per-test directory."""

    def __init__(self, server: Server, tmp: Path) -> None:
        self.server = server
        self.tmp = tmp
        self.piddir = tmp / "pids"
        self.piddir.mkdir()
        self.procs: list[Proc] = []
        self.count = 0

    def path(self, name: str) -> str:
        return str(self.tmp / name)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
        env["BATON_TEST_PIDDIR"] = str(self.piddir)
        env.update(extra or {})
        return env

    def argv(self, args: tuple[str, ...], endpoint: str | None) -> list[str]:
        # --endpoint after the subcommand's own arguments, before a `--` and its command
        # (test_inspect.py checks the other place the contract allows: before the subcommand).
        args = list(args)
        at = args.index("--") if "--" in args else len(args)
        return [baton_bin(), *args[:at], *(["--endpoint", endpoint] if endpoint else []), *args[at:]]

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 30,
            endpoint: str | None = "server") -> Result:
        endpoint = self.server.url if endpoint == "server" else endpoint
        argv = self.argv(args, endpoint)
        started = time.monotonic()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  env=self.env(env), stdin=subprocess.DEVNULL, start_new_session=True)
        except subprocess.TimeoutExpired as error:
            raise AssertionError(f"baton {args!r} still ran after {timeout} s: {error}") from None
        return Result(list(args), done.returncode, done.stdout, done.stderr, time.monotonic() - started)

    def spawn(self, *args: str, env: dict[str, str] | None = None,
              endpoint: str | None = "server") -> Proc:
        endpoint = self.server.url if endpoint == "server" else endpoint
        self.count += 1
        out = self.tmp / f"baton-{self.count}.out"
        err = self.tmp / f"baton-{self.count}.err"
        with open(out, "wb") as o, open(err, "wb") as e:
            # Its own session: a signal the test sends goes to this process only.
            popen = subprocess.Popen(self.argv(args, endpoint), stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                     env=self.env(env), start_new_session=True)
        proc = Proc(list(args), popen, out, err)
        self.procs.append(proc)
        return proc

    def child(self, out: str, *options: str) -> list[str]:
        """The command line of a child.py that records into `out`."""
        return [sys.executable, CHILD, out, *options]

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.popen.kill()
                except ProcessLookupError:
                    pass
                proc.popen.wait()
        for entry in self.piddir.iterdir():
            pid = int(entry.name)
            if not pid_gone(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture(scope="session")
def server():
    if not os.access(baton_bin(), os.X_OK):
        pytest.fail(f"no baton binary at {baton_bin()} (set BATON_BIN)")
    workdir = tempfile.mkdtemp(prefix="baton-cli-test-")
    instance = Server(workdir)
    instance.start()
    yield instance
    instance.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def cli(server, tmp_path):
    instance = Cli(server, tmp_path)
    yield instance
    instance.cleanup()


@pytest.fixture
def name(request) -> str:
    """A lock/election/name of this test alone."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:80]
    return f"cli/{base}-{uuid.uuid4().hex[:8]}"
