"""/ui with authentication on (`baton serve --auth-file`): a 401 makes the page
ask for a token, which it keeps in sessionStorage and sends on every call (the
watch stream included); a 403 shows "not permitted" in that section only.

The node runs with a real auth file: `reader` may use and watch every lock but
no registered name; `ops` is the admin the test acts as. An admin's token
force-releases a lock from the page after a confirmation; a client's is refused."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from conftest import Node, baton_bin, shots_dir
from test_ui import has_lock, status_is

READER = "reader-token-for-the-browser-test"
ADMIN = "admin-token-for-the-browser-test"


def digest(token: str) -> str:
    """The auth file's digest of `token`, from the binary under test."""
    return subprocess.run([baton_bin(), "auth", "hash-token"], input=token, text=True,
                          capture_output=True, check=True).stdout.strip()


@pytest.fixture
def guarded_node(request):
    # /metrics "open" (default here) or "admin" (the server's default), by indirect parametrization.
    metrics = getattr(request, "param", "open")
    workdir = tempfile.mkdtemp(prefix="baton-ui-auth-")
    auth_file = os.path.join(workdir, "auth.yaml")
    with open(auth_file, "w") as f:
        json.dump({"principals": [
            {"name": "reader", "role": "client", "tokens": [digest(READER)],
             "locks": [""], "watch": [""]},
            {"name": "ops", "role": "admin", "tokens": [digest(ADMIN)]},
        ], "endpoints": {"metrics": metrics}}, f)
    instance = Node(workdir, ["--auth-file", auth_file], token=ADMIN)
    instance.metrics = metrics
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


STUCK = "nightly/report"


def sign_in(page, node, token: str) -> None:
    page.open(node.url + "/ui")
    page.wait_for(status_is("auth") + " && !document.getElementById('auth').hidden", 10,
                  "the page to ask for a token")
    page.evaluate(f"document.getElementById('token').value = {json.dumps(token)};"
                  " document.querySelector('#auth-form button').click()")
    page.wait_for(status_is("live"), 15, "the page to be live with the token")


def open_detail(page, name: str) -> None:
    page.evaluate(f"document.querySelector('tr[data-lock={json.dumps(name)}] button').click()")
    page.wait_for(f"document.getElementById('detail-title').textContent === {json.dumps('Lock ' + name)}",
                  5, "the lock's detail")


def revoke_requests(page) -> int:
    return page.evaluate("performance.getEntriesByType('resource').filter((e) => e.name.includes(':revoke')).length")


def test_admin_force_releases_a_lock_from_the_page_after_confirming(page, guarded_node):
    node = guarded_node
    held = node.ok("POST", f"/v1/locks/{STUCK}:acquire", {"holder": "report-1", "ttl_ms": 60000, "lock_delay_ms": 1000})
    waiter = node.in_background("POST", f"/v1/locks/{STUCK}:acquire",
                                {"holder": "report-2", "ttl_ms": 60000, "wait_ms": 20000})
    sign_in(page, node, ADMIN)
    page.wait_for(has_lock(STUCK, "report-1", held["token"], 1), 10, "the holder and its waiter")
    open_detail(page, STUCK)
    page.wait_for("(b => !b.hidden && !b.disabled)(document.getElementById('revoke-lock'))", 5,
                  "the force-release button, enabled for the admin")

    # From the keyboard: the dialog names the holder, its token and the next waiter,
    # and starts on Cancel. Escape cancels: nothing is sent, nothing changes.
    page.evaluate("document.getElementById('revoke-lock').focus()")
    page.press("Enter")
    page.wait_for("document.getElementById('confirm').open", 5, "the confirmation dialog")
    text = page.evaluate("document.getElementById('confirm').innerText")
    assert "report-1" in text and f"token {held['token']}" in text and "report-2" in text, text
    assert f'{{"token":{held["token"]}}}' in text, text
    assert page.evaluate("document.activeElement.id") == "confirm-cancel"
    page.press("Escape")
    page.wait_for("!document.getElementById('confirm').open", 5, "the dialog to close")
    assert revoke_requests(page) == 0
    assert page.evaluate("document.activeElement.id") == "revoke-lock", "focus did not return to the button"
    assert page.evaluate("document.getElementById('lock-result').hidden") is True
    still = node.ok("GET", f"/v1/locks/{STUCK}")
    assert (still["holder"], still["token"], still["waiters"]) == ("report-1", held["token"], 1), still

    # Confirmed (Tab to the Force-release button, Enter): sent with the shown token.
    page.press("Enter")
    page.wait_for("document.getElementById('confirm').open", 5, "the confirmation dialog again")
    if shots_dir():
        shoot_dialog(page, "ui-confirm")
    page.press("Tab")
    assert page.evaluate("document.activeElement.id") == "confirm-ok"
    page.press("Enter")
    try:
        page.wait_for(f"""(r => !r.hidden && r.dataset.outcome === 'released' && r.textContent.includes('report-1')
            && r.textContent.includes('token {held["token"]}'))(document.getElementById('lock-result'))""",
                      10, "the page to say the holding was force-released")
    except AssertionError as error:
        state = page.evaluate("(r => JSON.stringify({hidden: r.hidden, outcome: r.dataset.outcome, text: r.textContent,"
                              " open: document.getElementById('confirm').open,"
                              " value: document.getElementById('confirm').returnValue}))(document.getElementById('lock-result'))")
        raise AssertionError(f"{error}; result: {state}; revoke requests: {revoke_requests(page)}") from None
    assert revoke_requests(page) == 1
    waiter["thread"].join(10)
    assert waiter.get("status") == 200 and waiter["body"]["holder"] == "report-2", waiter
    page.wait_for(has_lock(STUCK, "report-2", waiter["body"]["token"], 0), 10,
                  "the waiter holding after the lock delay")
    page.wait_for("document.getElementById('detail-events').textContent.includes('lock.force_released')", 10,
                  "lock.force_released in the lock's events")
    assert page.exceptions == [], page.exceptions


@pytest.mark.parametrize("guarded_node", ["open", "admin"], indirect=True, ids=["metrics-open", "metrics-admin"])
def test_a_client_token_cannot_force_release(page, guarded_node):
    # metrics-admin: the client's 403 on /metrics tells the page before it tries;
    # metrics-open: it cannot know, so the server's 403 is shown when it tries.
    node = guarded_node
    held = node.ok("POST", f"/v1/locks/{STUCK}:acquire", {"holder": "report-1", "ttl_ms": 60000})
    sign_in(page, node, READER)
    page.wait_for(has_lock(STUCK, "report-1", held["token"], 0), 10, "the lock, for the client")
    open_detail(page, STUCK)
    if node.metrics == "admin":
        page.wait_for("""(b => !b.hidden && b.disabled && document.getElementById('revoke-lock-why').textContent
            .includes('needs an admin token'))(document.getElementById('revoke-lock'))""", 10,
                      "the button disabled: needs an admin token")
    else:
        page.wait_for("(b => !b.hidden && !b.disabled)(document.getElementById('revoke-lock'))", 5, "the button")
        page.evaluate("document.getElementById('revoke-lock').focus()")
        page.press("Enter")
        page.wait_for("document.getElementById('confirm').open", 5, "the confirmation dialog")
        page.press("Tab")
        page.press("Enter")
        page.wait_for("""(r => !r.hidden && r.dataset.outcome === 'forbidden' && r.textContent.includes('needs an admin token')
            && r.textContent.includes('not an admin'))(document.getElementById('lock-result'))""", 10,
                      "the refusal: needs an admin token")
        # From then on the page knows: the button is disabled, with the reason.
        page.wait_for("""document.getElementById('revoke-lock').disabled && document.getElementById('revoke-lock-why')
            .textContent.includes('needs an admin token')""", 5, "the button disabled after the 403")
        assert page.evaluate("document.activeElement.id") == "lock-result", "focus not moved from the disabled button to the answer"
    still = node.ok("GET", f"/v1/locks/{STUCK}")
    assert (still["holder"], still["token"]) == ("report-1", held["token"]), still
    assert page.exceptions == [], page.exceptions


def test_admin_force_releases_a_name_and_a_changed_leader_is_never_released(page, guarded_node):
    node = guarded_node
    node.ok("PUT", "/v1/names/svc/billing", {"value": {"addr": "10.0.0.5:80"}, "holder": "billing-1", "ttl_ms": 60000})
    first = node.ok("POST", "/v1/elections/primary:campaign", {"candidate": "pod-a", "value": 1, "ttl_ms": 60000})
    sign_in(page, node, ADMIN)

    # A registered name, from its row.
    page.wait_for("!!document.querySelector('[data-key=\"revoke-name:svc/billing\"]')", 10, "the name's button")
    page.evaluate("document.querySelector('[data-key=\"revoke-name:svc/billing\"]').click()")
    page.wait_for("document.getElementById('confirm').open && "
                  "document.getElementById('confirm').innerText.includes('billing-1')", 5, "the dialog naming the owner")
    page.evaluate("document.getElementById('confirm-ok').click()")
    page.wait_for("(r => !r.hidden && r.dataset.outcome === 'released')(document.getElementById('name-result'))", 10,
                  "the name force-released")
    page.wait_for("!document.querySelector('tr[data-name=\"svc/billing\"]')", 10, "the name gone from the list")
    assert node.call("GET", "/v1/names/svc/billing")[0] == 404

    # An election whose leader changes while the dialog is open: the shown token
    # is sent, so the new leader is not released.
    page.wait_for("!!document.querySelector('[data-key=\"revoke-election:primary\"]')", 10, "the leader's button")
    page.evaluate("document.querySelector('[data-key=\"revoke-election:primary\"]').click()")
    page.wait_for(f"document.getElementById('confirm').open && document.getElementById('confirm').innerText"
                  f".includes('token {first['token']}')", 5, "the dialog naming pod-a's token")
    node.ok("POST", "/v1/elections/primary:resign", {"lease_id": first["lease_id"], "token": first["token"]})
    second = node.ok("POST", "/v1/elections/primary:campaign", {"candidate": "pod-b", "value": 2, "ttl_ms": 60000})
    page.evaluate("document.getElementById('confirm-ok').click()")
    page.wait_for(f"""(r => !r.hidden && r.dataset.outcome === 'token_mismatch'
        && r.textContent.includes('token {second["token"]}'))(document.getElementById('election-result'))""",
                  10, "the mismatch: it changed hands, nothing changed")
    leader = node.ok("GET", "/v1/elections/primary")["leader"]
    assert (leader["candidate"], leader["token"]) == ("pod-b", second["token"]), leader
    assert page.exceptions == [], page.exceptions


def shoot_dialog(page, name: str) -> None:
    """The open dialog as seen (viewport, not full page) at desktop and phone width."""
    directory = shots_dir()
    page.screenshot(os.path.join(directory, f"{name}-desktop.png"), full_page=False)
    page.set_viewport(375, 812, mobile=True)
    page.wait_for("document.documentElement.clientWidth === 375", 5, "the phone viewport")
    page.evaluate("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    rect = page.evaluate("(r => [r.left, r.right])(document.getElementById('confirm').getBoundingClientRect())")
    assert rect[0] >= 0 and rect[1] <= 375, f"the dialog overflows the phone's width: {rect}"
    page.screenshot(os.path.join(directory, f"{name}-phone.png"), full_page=False)
    page.set_viewport(1280, 900)
