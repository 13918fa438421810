"""Fixtures for the browser tests: one headless Chromium for the session and a
fresh single Baton node (free ports, temporary data directory) per test."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from cdp import Browser, Page

from baton_ports import free_port

ROOT = Path(__file__).resolve().parents[4]


def baton_bin() -> str:
    explicit = os.environ.get("BATON_BIN")
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/baton-target"))
    return os.path.join(target, "debug", "baton")


class Node:
    """A single-node Baton cluster as a real process; restartable on the same
    ports and data directory."""

    def __init__(self, workdir: str, extra_args: list[str] | None = None,
                 token: str | None = None, secret: str | None = None) -> None:
        # Sent as a bearer token by call/ok (auth on).
        self.token = token
        # The cluster secret (--cluster-secret), sent by call/ok as the
        # baton-cluster-secret header: with auth off, what admin calls need.
        self.secret = secret
        self.extra_args = (extra_args or []) + (["--cluster-secret", secret] if secret else [])
        self.data_dir = os.path.join(workdir, "data")
        self.log_path = os.path.join(workdir, "baton.log")
        self.api_port = free_port()
        self.raft_port = free_port()
        self.url = f"http://127.0.0.1:{self.api_port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [baton_bin(), "serve", "--listen", f"127.0.0.1:{self.api_port}",
             "--raft-listen", f"127.0.0.1:{self.raft_port}", "--data-dir", self.data_dir,
             *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"baton exited with {self.process.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.HTTPError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("baton did not become ready: " + self.log())
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
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

    def call(self, method: str, path: str, body: Any = None, timeout: float = 30) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.secret:
            headers["baton-cluster-secret"] = self.secret
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.call(method, path, body)
        assert 200 <= status < 300, (method, path, status, answer)
        return answer

    def in_background(self, method: str, path: str, body: Any = None) -> dict:
        """Sends a (waiting) request from a thread; the dict gets `status` and `body`."""
        result: dict = {}

        def run() -> None:
            try:
                result["status"], result["body"] = self.call(method, path, body)
            except OSError as error:
                result["error"] = error

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        result["thread"] = thread
        return result


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(baton_bin()):
        pytest.fail(f"no baton binary at {baton_bin()} (set BATON_BIN)")
    instance = Browser()
    yield instance
    instance.close()


@pytest.fixture
def node():
    workdir = tempfile.mkdtemp(prefix="baton-ui-test-")
    instance = Node(workdir)
    instance.start()
    yield instance
    instance.stop(signal.SIGKILL)
    shutil.rmtree(workdir, ignore_errors=True)


def ui_dir() -> str | None:
    """BATON_UI_DIR (e.g. service/api/static): serve /ui and /docs from these files
    instead of the copies compiled into the binary, to test edited pages against a
    binary built before the edit. Unset (make test-ui), the binary's own pages."""
    return os.environ.get("BATON_UI_DIR") or None


@pytest.fixture
def page(browser):
    instance: Page = browser.new_page()
    if ui_dir():
        instance.serve_files({"/ui": Path(ui_dir(), "ui.html").read_bytes(),
                              "/docs": Path(ui_dir(), "docs.html").read_bytes()})
    yield instance
    instance.close()


def shots_dir() -> str | None:
    """Where to save screenshots (UI_SHOTS_DIR), or None: the tests take them only on request."""
    return os.environ.get("UI_SHOTS_DIR") or None
