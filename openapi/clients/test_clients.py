"""Generated clients against a live node (issue 15): Python and TypeScript.

Run it with `make test-clients` (builds the binary, makes the Python venv, installs
the pinned TypeScript tools), or by hand from the repository root:

    BATON_BIN=/path/to/baton .venv/bin/pytest -q openapi/clients

What it does, each time from the COMMITTED openapi/baton.json (nothing generated is
committed, so the clients always follow the spec):

- Python: openapi-python-client (pinned in .ci/requirements-test.txt) generates the
  package `baton_client` into a temporary folder; any warning that parts of the
  client could not be generated fails the test;
- TypeScript: openapi-typescript (pinned in openapi/clients/typescript/package.json,
  installed by `.ci/setup node`) generates the types into a temporary folder, warning
  nothing; `tsc --noEmit` type-checks typescript/flows.ts against them and must be
  clean;
- starts `baton serve` on free loopback ports with a temporary data directory and runs
  python/flows.py and typescript/flows.ts (types stripped by the TypeScript compiler,
  run by Node) against it: leases, an acquire that waits while another holder
  releases, the fencing token in body and header, renew, validate, release, an
  election observed over Server-Sent Events, a name, an Idempotency-Key retry, a 409
  read as a typed problem, lock names containing `/`. Each program exits non-zero on
  the first failed check.

The programs print every step; a failure shows their output and the node's log.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from baton_ports import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SPEC = ROOT / "openapi" / "baton.json"
TS_DIR = HERE / "typescript"
NODE_BIN = TS_DIR / "node_modules" / ".bin"
VENV_BIN = Path(sys.executable).parent
# Each flow program gets this long (they take a few seconds).
FLOW_TIMEOUT_S = 120


def baton_bin() -> str:
    explicit = os.environ.get("BATON_BIN")
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/baton-target"))
    return os.path.join(target, "debug", "baton")


def run(command: list[str], what: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """Runs a command; a non-zero exit fails the test with everything it printed."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    if result.returncode != 0:
        pytest.fail(f"{what} exited with {result.returncode}\n$ {' '.join(command)}\n"
                    f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}", pytrace=False)
    return result


class Node:
    """One `baton serve` as a real process, on free ports, with a temporary data dir."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "baton.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [baton_bin(), "serve", "--listen", f"127.0.0.1:{self.port}",
                 "--raft-listen", "127.0.0.1:0", "--data-dir", str(workdir / "data")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"baton exited with {self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("baton did not become ready:\n" + self.log())
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
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


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory):
    started = Node(tmp_path_factory.mktemp("node"))
    yield started
    started.stop()


def run_flow(command: list[str], node: Node, what: str) -> None:
    env = {**os.environ, "BATON_ENDPOINT": node.url}
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=FLOW_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{what} did not finish in {FLOW_TIMEOUT_S} s\n--- output\n{exc.stdout}\n{exc.stderr}"
                    f"\n--- node log\n{node.log()}", pytrace=False)
    if result.returncode != 0 or "all flows passed" not in result.stdout:
        pytest.fail(f"{what} exited with {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n"
                    f"{result.stderr}\n--- node log\n{node.log()}", pytrace=False)
    assert node.process.poll() is None, "the node died during the flows:\n" + node.log()


# --- Python: openapi-python-client -------------------------------------------------


@pytest.fixture(scope="module")
def python_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding the generated package `baton_client`."""
    folder = tmp_path_factory.mktemp("python-client")
    # The generator's post-hooks run ruff (a dependency of openapi-python-client) from PATH.
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = run([str(VENV_BIN / "openapi-python-client"), "generate", "--path", str(SPEC),
                  "--output-path", str(folder / "baton_client"), "--meta", "none"],
                 "openapi-python-client", env=env)
    output = result.stdout + result.stderr
    # It reports what it could not generate (and failed post-hooks) as "Warning(s)
    # encountered while generating. Client was generated, but some pieces may be missing".
    assert "warning" not in output.lower() and "error" not in output.lower(), (
        "openapi-python-client could not generate everything from openapi/baton.json:\n" + output)
    assert (folder / "baton_client" / "api" / "locks" / "acquire_lock.py").is_file(), output
    return folder


def test_python_client_flows(python_client: Path, node: Node) -> None:
    run_flow([sys.executable, str(HERE / "python" / "flows.py"), "--endpoint", node.url,
              "--client-dir", str(python_client)], node, "python/flows.py")


# --- TypeScript: openapi-typescript + openapi-fetch --------------------------------


@pytest.fixture(scope="module")
def typescript_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the generated types, a tsconfig using them, and node_modules."""
    if not (NODE_BIN / "tsc").exists() or not (NODE_BIN / "openapi-typescript").exists():
        pytest.fail("the TypeScript tools are not installed: run `.ci/setup node` "
                    "(npm ci in openapi/clients/typescript)", pytrace=False)
    folder = tmp_path_factory.mktemp("typescript-client")
    # As a .ts file, not a .d.ts: the type-check then covers the generated types too
    # (skipLibCheck skips declaration files, i.e. node_modules).
    types = folder / "baton.ts"
    result = run([str(NODE_BIN / "openapi-typescript"), str(SPEC), "-o", str(types)],
                 "openapi-typescript", cwd=TS_DIR)
    # It prints a banner and the output path on stdout; warnings (` ⚠ `) and errors
    # (` ✘ `), including those of its Redocly lint, go to stderr.
    assert result.stderr.strip() == "" and "⚠" not in result.stdout, (
        "openapi-typescript warned about openapi/baton.json:\n" + result.stdout + result.stderr)
    (folder / "tsconfig.json").write_text(json.dumps({
        "extends": str(TS_DIR / "tsconfig.json"),
        "compilerOptions": {"paths": {"baton-api": [str(types)]}},
        "files": [str(TS_DIR / "flows.ts")],
    }, indent=2))
    # ES modules (as in typescript/package.json), and openapi-fetch for the stripped
    # program at run time.
    (folder / "package.json").write_text('{"type": "module"}\n')
    (folder / "node_modules").symlink_to(TS_DIR / "node_modules")
    return folder


def test_typescript_client_typechecks(typescript_build: Path) -> None:
    result = run([str(NODE_BIN / "tsc"), "--noEmit", "-p", str(typescript_build / "tsconfig.json")],
                 "tsc --noEmit", cwd=TS_DIR)
    assert result.stdout.strip() == "" and result.stderr.strip() == "", result.stdout + result.stderr


def test_typescript_client_flows(typescript_build: Path, node: Node) -> None:
    # Types only stripped here (test_typescript_client_typechecks checks them): the
    # TypeScript compiler's transpileModule, then Node runs the ES module.
    program = typescript_build / "flows.mjs"
    strip = (
        "const ts = require('typescript'); const fs = require('fs');"
        "const [source, target] = process.argv.slice(1);"
        "const out = ts.transpileModule(fs.readFileSync(source, 'utf8'), {fileName: source,"
        " reportDiagnostics: true, compilerOptions: {module: ts.ModuleKind.ESNext,"
        " target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true}});"
        "if (out.diagnostics.length) { console.error(JSON.stringify(out.diagnostics.map(d => d.messageText)));"
        " process.exit(1); }"
        "fs.writeFileSync(target, out.outputText);"
    )
    run(["node", "-e", strip, str(TS_DIR / "flows.ts"), str(program)], "transpiling flows.ts", cwd=TS_DIR)
    run_flow(["node", str(program), "--endpoint", node.url], node, "typescript/flows.ts")
