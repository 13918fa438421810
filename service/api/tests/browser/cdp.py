"""A small Chrome DevTools Protocol client: starts headless Debian Chromium and
drives one page over its WebSocket (websocket-client). Just what the browser
tests need: navigate, evaluate JavaScript, wait on a DOM fact with a deadline,
press keys, resize the viewport and take screenshots."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import websocket

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


class Browser:
    """One headless Chromium process with its own throwaway profile."""

    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="baton-chromium-")
        args = [
            CHROMIUM,
            "--headless=new",
            # Root (CI) cannot use Chromium's sandbox.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--remote-debugging-address=127.0.0.1",
            # Port 0: Chromium picks one and writes it to DevToolsActivePort.
            "--remote-debugging-port=0",
            f"--user-data-dir={self.profile}",
            "about:blank",
        ]
        self.log = open(os.path.join(self.profile, "chromium.log"), "wb")
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while True:
            if port_file.exists():
                lines = port_file.read_text().split("\n")
                if lines and lines[0].strip().isdigit():
                    self.port = int(lines[0])
                    break
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("Chromium did not start; see its log in " + self.profile)
            time.sleep(0.05)

    def new_page(self, width: int = 1280, height: int = 900, mobile: bool = False) -> "Page":
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            target = json.load(response)
        page = Page(target["webSocketDebuggerUrl"], target["id"], self.port)
        page.set_viewport(width, height, mobile)
        return page

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """One tab: commands are synchronous; events are kept for inspection."""

    def __init__(self, ws_url: str, target_id: str, port: int) -> None:
        # No Origin header: Chromium refuses DevTools connections from other origins.
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.target_id = target_id
        self.port = port
        self.ids = itertools.count(1)
        self.exceptions: list[str] = []
        self.console: list[str] = []
        # Path -> body served instead of the node's answer (see serve_files).
        self.overrides: dict[str, bytes] = {}
        self.send("Runtime.enable")
        self.send("Page.enable")

    def send(self, method: str, **params: Any) -> dict:
        call_id = next(self.ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def _event(self, message: dict) -> None:
        method = message.get("method")
        params = message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            self.exceptions.append(text)
        elif method == "Fetch.requestPaused":
            # Answered without waiting for the reply: this runs inside send()'s loop.
            path = urllib.parse.urlsplit(params["request"]["url"]).path
            body = self.overrides.get(path)
            if body is None:
                self._post("Fetch.continueRequest", requestId=params["requestId"])
            else:
                self._post("Fetch.fulfillRequest", requestId=params["requestId"], responseCode=200,
                           responseHeaders=[{"name": "Content-Type", "value": "text/html; charset=utf-8"},
                                            {"name": "Cache-Control", "value": "no-store"}],
                           body=base64.b64encode(body).decode())
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning"):
            self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))

    def _post(self, method: str, **params: Any) -> None:
        self.ws.send(json.dumps({"id": next(self.ids), "method": method, "params": params}))

    def serve_files(self, files: dict[str, bytes]) -> None:
        """Answers GETs of these paths (any host) with these HTML bodies instead
        of the server's: tests a page as edited against a binary built before."""
        self.overrides.update(files)
        self.send("Fetch.enable", patterns=[{"urlPattern": "*" + path + "*", "requestStage": "Request"}
                                            for path in self.overrides])

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r}: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result.get("result", {}).get("value")

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'", 15, "page load")

    def wait_for(self, expression: str, timeout: float = 10, what: str = "") -> Any:
        """Polls `expression` until it is truthy; fails with its last value after `timeout` s."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = self.evaluate(expression)
            except RuntimeError as error:
                last = str(error)
            else:
                if last:
                    return last
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what or expression}; last value: {last!r}")
            time.sleep(0.1)

    def set_viewport(self, width: int, height: int, mobile: bool = False) -> None:
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=mobile)

    def press(self, key: str) -> None:
        codes = {"Enter": 13, "Tab": 9, " ": 32, "Escape": 27}
        common = {"key": key, "code": "Space" if key == " " else key, "windowsVirtualKeyCode": codes[key]}
        text = {"text": "\r"} if key == "Enter" else {"text": " "} if key == " " else {}
        self.send("Input.dispatchKeyEvent", type="keyDown", **common, **text)
        self.send("Input.dispatchKeyEvent", type="keyUp", **common)

    def screenshot(self, path: str, full_page: bool = True) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            metrics = self.send("Page.getLayoutMetrics")
            size = metrics["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", **params)["data"]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/close/{self.target_id}", timeout=5).close()
            except OSError:
                pass
