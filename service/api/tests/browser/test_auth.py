"""/ui with authentication on (`baton serve --auth-file`): a 401 makes the page
ask for a token, which it keeps in sessionStorage and sends on every call (the
watch stream included); a 403 shows "not permitted" in that section only.

The node runs with a real auth file: `reader` may use and watch every lock but
no registered name; `ops` is the admin the test acts as."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from conftest import Node, baton_bin
from test_ui import has_lock, status_is

READER = "reader-token-for-the-browser-test"
ADMIN = "admin-token-for-the-browser-test"


def digest(token: str) -> str:
    """The auth file's digest of `token`, from the binary under test."""
    return subprocess.run([baton_bin(), "auth", "hash-token"], input=token, text=True,
                          capture_output=True, check=True).stdout.strip()


@pytest.fixture
def guarded_node():
    workdir = tempfile.mkdtemp(prefix="baton-ui-auth-")
    auth_file = os.path.join(workdir, "auth.yaml")
    with open(auth_file, "w") as f:
        json.dump({"principals": [
            {"name": "reader", "role": "client", "tokens": [digest(READER)],
             "locks": [""], "watch": [""]},
            {"name": "ops", "role": "admin", "tokens": [digest(ADMIN)]},
        ], "endpoints": {"metrics": "open"}}, f)
    instance = Node(workdir, ["--auth-file", auth_file], token=ADMIN)
    instance.start()
    yield instance
    instance.stop(signal.SIGKILL)
    shutil.rmtree(workdir, ignore_errors=True)


def test_token_is_asked_for_kept_and_sent_and_403_is_not_permitted(page, guarded_node):
    node = guarded_node
    page.open(node.url + "/ui")
    page.wait_for(status_is("auth") + " && !document.getElementById('auth').hidden", 10,
                  "the page to ask for a token")
    # A wrong token is refused and the form comes back.
    page.evaluate("document.getElementById('token').value = 'wrong'; document.querySelector('#auth-form button').click()")
    page.wait_for("!document.getElementById('auth').hidden && "
                  "document.getElementById('auth-message').textContent.includes('refused')", 10,
                  "the page to say the token was refused")
    page.evaluate(f"document.getElementById('token').value = {json.dumps(READER)};"
                  " document.querySelector('#auth-form button').click()")
    page.wait_for(status_is("live"), 15, "the page to be live with the token")
    assert page.evaluate("sessionStorage.getItem('baton.token')") == READER
    assert page.evaluate("document.getElementById('auth').hidden") is True

    # The admin takes a lock; the reader's page sees it through its own stream
    # (the watch carries only what the reader may see, and it may see locks).
    grant = node.ok("POST", "/v1/locks/guarded:acquire", {"holder": "job-9", "ttl_ms": 30000})
    page.wait_for(has_lock("guarded", "job-9", grant["token"], 0), 10, "the lock, through the token's stream")
    page.wait_for("document.getElementById('names-error').textContent.startsWith('Not permitted')", 10,
                  "names shown as not permitted")
    assert page.evaluate("document.getElementById('locks-error').hidden") is True
    assert READER not in page.evaluate("document.body.innerText"), "the token is never shown"
    assert page.exceptions == [], page.exceptions
