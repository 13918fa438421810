"""/ui in headless Chromium against a real node: the page lists once, then
follows /v1/watch; changes made through the API appear without a reload, and
the page reconnects and catches up after the node restarts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile

import pytest

from conftest import Node, shots_dir

LOCK = "team-a/db/migrate"


def lock_row(name: str) -> str:
    """A JS expression: the lock's row as {holder, token, waiters}, or null."""
    return f"""(() => {{
      const row = [...document.querySelectorAll('tr[data-lock]')].find((r) => r.dataset.lock === {json.dumps(name)});
      if (!row) return null;
      const text = (sel) => (row.querySelector(sel) || {{}}).textContent || '';
      return {{holder: text('.holder'), token: text('.token'), waiters: text('.waiters')}};
    }})()"""


def has_lock(name: str, holder: str, token: int, waiters: int) -> str:
    return (f"(s => s && s.holder === {json.dumps(holder)} && s.token === '{token}'"
            f" && s.waiters.startsWith('{waiters}'))({lock_row(name)})")


def status_is(state: str) -> str:
    return f"document.getElementById('status').dataset.state === {json.dumps(state)}"


def open_live(page, node) -> None:
    page.open(node.url + "/ui")
    page.wait_for(status_is("live"), 15, "the page to say live")
    # Survives only if the page is never reloaded.
    page.evaluate("window.__sameDocument = 'yes'")


def test_holder_and_waiter_appear_live_and_the_waiter_becomes_holder(page, node):
    open_live(page, node)
    first = node.ok("POST", f"/v1/locks/{LOCK}:acquire", {"holder": "migrator-1", "ttl_ms": 30000})
    waiter = node.in_background("POST", f"/v1/locks/{LOCK}:acquire",
                                {"holder": "migrator-2", "ttl_ms": 30000, "wait_ms": 20000})
    page.wait_for(has_lock(LOCK, "migrator-1", first["token"], 1), 10,
                  "the holder and one waiter on the page")
    assert page.evaluate("document.querySelectorAll('#locks-body ol.queue li').length") == 1

    # The other sections fill in live too: an election with a candidate in line,
    # a registered name, and the lease count.
    leader = node.ok("POST", "/v1/elections/primary:campaign",
                     {"candidate": "pod-a", "value": {"addr": "10.0.0.7:5432"}, "ttl_ms": 30000})
    node.in_background("POST", "/v1/elections/primary:campaign",
                       {"candidate": "pod-b", "value": {"addr": "10.0.0.8:5432"}, "ttl_ms": 30000, "wait_ms": 20000})
    node.ok("PUT", "/v1/names/svc/payments", {"value": {"addr": "10.0.0.9:8080"}, "holder": "payments-1", "ttl_ms": 30000})
    node.ok("POST", "/v1/leases", {"ttl_ms": 60000, "holder": "batch-7"})
    page.wait_for("""(() => { const r = document.querySelector('tr[data-election="primary"]');
        return r && r.textContent.includes('pod-a') && r.textContent.includes('10.0.0.7:5432')
            && r.querySelector('td[data-label="Candidates in line"]').textContent === '1'; })()""",
                  10, "the election with its leader, value and one candidate in line")
    page.wait_for("""(() => { const r = document.querySelector('tr[data-name="svc/payments"]');
        return r && r.textContent.includes('payments-1') && r.textContent.includes('10.0.0.9:8080'); })()""",
                  10, "the registered name with its owner")
    # Leases: one per lock holder, waiter, candidate and name, and batch-7's.
    page.wait_for("document.getElementById('lease-count').textContent === '6'", 10, "6 live leases")
    page.wait_for("document.getElementById('lease-ttls').textContent.includes('TTL 1 min')", 10, "the TTL distribution")
    assert leader["lease_id"] not in page.evaluate("document.body.innerText")
    assert first["lease_id"] not in page.evaluate("document.body.innerText")

    # The lock's detail, opened from the keyboard: its recent events, from the
    # kept history and the stream.
    page.evaluate(f"document.querySelector('tr[data-lock={json.dumps(LOCK)}] button').focus()")
    page.press("Enter")
    page.wait_for("document.activeElement.id === 'detail-title'", 5, "focus on the opened detail")
    page.wait_for("""(() => { const t = document.getElementById('detail-events').textContent;
        return t.includes('lock.acquired') && t.includes('lock.queued'); })()""", 10, "the lock's events")
    if shots_dir():
        shoot(page, "ui")

    node.ok("POST", f"/v1/locks/{LOCK}:release", {"lease_id": first["lease_id"], "token": first["token"]})
    waiter["thread"].join(10)
    assert waiter.get("status") == 200, waiter
    assert waiter["body"]["holder"] == "migrator-2"
    page.wait_for(has_lock(LOCK, "migrator-2", waiter["body"]["token"], 0), 10,
                  "the waiter as the new holder, nobody waiting")
    page.wait_for("document.getElementById('detail-events').textContent.includes('lock.released')", 10,
                  "the release in the lock's events")
    assert page.evaluate("window.__sameDocument") == "yes", "the page was reloaded"
    assert page.exceptions == [], page.exceptions


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["graceful", "killed"])
def test_page_reconnects_and_catches_up_after_the_node_restarts(page, node, stop):
    # SIGTERM ends the stream with `event: resync` (reason shutdown); SIGKILL just
    # drops the connection. Either way the page resumes from the last id it saw.
    open_live(page, node)
    before = node.ok("POST", "/v1/locks/before-restart:acquire", {"holder": "job-1", "ttl_ms": 60000})
    page.wait_for(has_lock("before-restart", "job-1", before["token"], 0), 10, "the first lock")

    node.stop(stop)
    page.wait_for(status_is("reconnecting"), 10, "the page to say reconnecting")
    node.start()
    page.wait_for(status_is("live"), 15, "the page to be live again")
    after = node.ok("POST", "/v1/locks/after-restart:acquire", {"holder": "job-2", "ttl_ms": 60000})
    page.wait_for(has_lock("after-restart", "job-2", after["token"], 0), 10,
                  "a lock taken after the restart")
    # The lock from before survived the restart (its lease was reset in full) and is still shown.
    assert page.evaluate(has_lock("before-restart", "job-1", before["token"], 0))
    assert page.evaluate("window.__sameDocument") == "yes", "the page was reloaded"
    assert page.exceptions == [], page.exceptions


def shoot(page, name: str) -> None:
    """Full-page screenshots at desktop and phone width, plus the phone's first screen."""
    directory = shots_dir()
    page.screenshot(os.path.join(directory, f"{name}-desktop.png"))
    page.set_viewport(375, 812, mobile=True)
    page.wait_for("document.documentElement.clientWidth === 375", 5, "the phone viewport")
    page.evaluate("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375, "the page scrolls sideways at phone width"
    page.screenshot(os.path.join(directory, f"{name}-phone.png"))
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(os.path.join(directory, f"{name}-phone-top.png"), full_page=False)
    page.set_viewport(1280, 900)


def queue_of(name: str) -> str:
    """A JS expression: the holder identities listed in the lock's row queue."""
    return f"""(() => {{
      const row = [...document.querySelectorAll('tr[data-lock]')].find((r) => r.dataset.lock === {json.dumps(name)});
      return row ? [...row.querySelectorAll('ol.queue li')].map((li) => li.textContent) : null;
    }})()"""


@pytest.fixture
def secret_node():
    """A node with auth off and a cluster secret: the test force-releases through
    the API with the secret; the page cannot (it never sends the secret)."""
    workdir = tempfile.mkdtemp(prefix="baton-ui-secret-")
    instance = Node(workdir, secret="cluster-secret-for-the-browser-test")
    instance.start()
    yield instance
    instance.stop(signal.SIGKILL)
    shutil.rmtree(workdir, ignore_errors=True)


def test_queue_names_the_waiters_in_order_and_a_lock_delay_counts_down(page, secret_node):
    node = secret_node
    deploy, cron = "team-b/deploy", "team-b/cron"
    open_live(page, node)
    first = node.ok("POST", f"/v1/locks/{deploy}:acquire",
                    {"holder": "deployer-1", "ttl_ms": 60000, "lock_delay_ms": 3000})
    second = node.in_background("POST", f"/v1/locks/{deploy}:acquire",
                                {"holder": "deployer-2", "ttl_ms": 60000, "wait_ms": 20000})
    # The second waiter queues only once the first is in line, so the order is known.
    page.wait_for(has_lock(deploy, "deployer-1", first["token"], 1), 10, "the holder and its first waiter")
    node.in_background("POST", f"/v1/locks/{deploy}:acquire",
                       {"holder": "deployer-3", "ttl_ms": 60000, "wait_ms": 20000})
    page.wait_for(f"JSON.stringify({queue_of(deploy)}) === '[\"deployer-2\",\"deployer-3\"]'", 10,
                  "both waiters by name, in line order, in the list")
    assert "place in line" not in page.evaluate("document.body.innerText")

    page.evaluate(f"document.querySelector('tr[data-lock={json.dumps(deploy)}] button').click()")
    page.wait_for("""JSON.stringify([...document.querySelectorAll('#detail-queue li')].map((li) => li.textContent))
        === '["deployer-2","deployer-3"]'""", 10, "the queue in the lock's detail")
    # Auth off: the page offers no action, and says why.
    assert page.evaluate("document.getElementById('revoke-lock').disabled") is True
    assert "cluster secret" in page.evaluate("document.getElementById('revoke-lock-why').textContent")
    if shots_dir():
        shoot(page, "ui-lock-queue")

    # A lock in delay with nobody waiting: its delay ends without any event.
    quiet = node.ok("POST", f"/v1/locks/{cron}:acquire", {"holder": "cron-1", "ttl_ms": 60000, "lock_delay_ms": 2000})
    assert node.ok("POST", f"/v1/locks/{deploy}:revoke", {"token": first["token"]})["holder"] == "deployer-1"
    node.ok("POST", f"/v1/locks/{cron}:revoke", {"token": quiet["token"]})
    until = node.ok("GET", f"/v1/locks/{deploy}")["delay_until_ms"]
    assert until
    # "until HH:MM:SS (N s left)", the time being the API's delay_until_ms.
    page.wait_for(f"""(() => {{ const t = (document.getElementById('detail-delay') || {{}}).textContent || '';
        const d = new Date({until}), p = (n) => String(n).padStart(2, '0');
        const hms = p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds());
        return /until \\d\\d:\\d\\d:\\d\\d \\([1-3] s left\\)/.test(t) && t.includes('until ' + hms) && t.includes("leader's clock"); }})()""",
                  5, "the lock delay's end and countdown in the detail")
    page.wait_for(f"""(() => {{ const row = document.querySelector('tr[data-lock={json.dumps(cron)}]');
        return row && /in lock delay until \\d\\d:\\d\\d:\\d\\d/.test(row.querySelector('.delay').textContent); }})()""",
                  5, "the other lock in delay in the list")
    page.wait_for("document.getElementById('detail-events').textContent.includes('lock.force_released')", 10,
                  "the force-release in the lock's events")
    if shots_dir():
        page.screenshot(os.path.join(shots_dir(), "ui-lock-delay-desktop.png"))

    # After the delay the first waiter is granted, and the delay without waiters
    # leaves the list (the page re-reads a lock once its delay has passed).
    second["thread"].join(10)
    assert second.get("status") == 200 and second["body"]["holder"] == "deployer-2", second
    page.wait_for(has_lock(deploy, "deployer-2", second["body"]["token"], 1)
                  + f" && JSON.stringify({queue_of(deploy)}) === '[\"deployer-3\"]'", 10,
                  "the first waiter holding, the second still in line")
    page.wait_for(f"{lock_row(cron)} === null", 10, "the undelayed free lock gone from the list")
    assert page.evaluate("document.getElementById('detail-delay')") is None
    assert page.exceptions == [], page.exceptions
