"""/ui with authentication on: a 401 makes the page ask for a token, which it
keeps in sessionStorage and sends on every call (the watch stream included);
a 403 shows "not permitted" in that section only.

The node here has no authentication of its own, so a small proxy in front of it
answers as the auth contract (API.md: 401 `unauthenticated`, 403 `forbidden`,
problem+json) says: a bearer token is required on /v1/* and /metrics, and this
token may not read names."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_ui import has_lock, status_is

TOKEN = "s3cret-reader"


class AuthProxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream_port: int) -> None:
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.upstream_port = upstream_port
        self.seen: list[tuple[str, str | None]] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: AuthProxy

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.forward()

    do_POST = do_PUT = do_DELETE = do_GET

    def problem(self, status: int, code: str) -> None:
        body = json.dumps({"type": f"https://baton.dev/errors/{code}", "title": code, "status": status,
                           "detail": f"{code} (test proxy)", "code": code}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/problem+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.path.startswith("/v1/") or self.path.startswith("/metrics"):
            auth = self.headers.get("Authorization")
            self.server.seen.append((self.path, auth))
            if auth != f"Bearer {TOKEN}":
                return self.problem(401, "unauthenticated")
            if self.path.startswith("/v1/names"):
                return self.problem(403, "forbidden")
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept", "last-event-id")}
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(key, value)
            if (response.getheader("Content-Type") or "").startswith("text/event-stream"):
                # Stream until either side closes: the body ends with the connection.
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                while chunk := response.read1(65536):
                    self.wfile.write(chunk)
                    self.wfile.flush()
            else:
                data = response.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
        except (OSError, ValueError, http.client.HTTPException):
            # Either side went away mid-stream (the page aborted, the node stopped).
            self.close_connection = True
        finally:
            upstream.close()


@pytest.fixture
def proxy(node):
    server = AuthProxy(node.api_port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_token_is_asked_for_kept_and_sent_and_403_is_not_permitted(page, node, proxy):
    page.open(proxy.url + "/ui")
    page.wait_for(status_is("auth") + " && !document.getElementById('auth').hidden", 10,
                  "the page to ask for a token")
    # A wrong token is refused and the form comes back.
    page.evaluate("document.getElementById('token').value = 'wrong'; document.querySelector('#auth-form button').click()")
    page.wait_for("!document.getElementById('auth').hidden && "
                  "document.getElementById('auth-message').textContent.includes('refused')", 10,
                  "the page to say the token was refused")
    page.evaluate(f"document.getElementById('token').value = {json.dumps(TOKEN)};"
                  " document.querySelector('#auth-form button').click()")
    page.wait_for(status_is("live"), 15, "the page to be live with the token")
    assert page.evaluate("sessionStorage.getItem('baton.token')") == TOKEN
    assert page.evaluate("document.getElementById('auth').hidden") is True, "\n".join(f"{p} {a}" for p, a in proxy.seen)

    grant = node.ok("POST", "/v1/locks/guarded:acquire", {"holder": "job-9", "ttl_ms": 30000})
    page.wait_for(has_lock("guarded", "job-9", grant["token"], 0), 10, "the lock, through the token's stream")
    page.wait_for("document.getElementById('names-error').textContent.startsWith('Not permitted')", 10,
                  "names shown as not permitted")
    assert page.evaluate("document.getElementById('locks-error').hidden") is True
    watches = [auth for path, auth in proxy.seen if path.startswith("/v1/watch") and auth == f"Bearer {TOKEN}"]
    assert watches, proxy.seen
    assert page.exceptions == [], page.exceptions
