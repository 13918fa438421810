"""`/metrics` of a real node before and after a scripted workload (issue 14):
grants, a queued wait that times out, a queued wait that is granted, a lease
that expires, a 409, a keepalive, revocations and a watch stream. Every counter
and histogram count the workload touches must move by exactly what it did, and
everything else must stay put; both scrapes must parse with the Prometheus
project's own Python parser (`prometheus_client.parser`), and every histogram
must be well formed.

The node is this module's own (not the session's shared one), so no other test's
leases can expire into the counts. Nothing here asserts how long anything took."""

from __future__ import annotations

import threading
import urllib.request
from collections import Counter
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import Server, quote, wait_for

Sample = tuple[str, frozenset]


def parse(text: str) -> tuple[dict[Sample, float], dict[str, str]]:
    """Samples by (name, labels) and the type of each family, from the real parser."""
    samples: dict[Sample, float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        assert family.documentation, f"{family.name} has no HELP"
        # A gauge `x` beside a counter `x_total` is one family name to the parser.
        assert family.name not in types, f"two families are named {family.name}"
        types[family.name] = family.type
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"sample {key} appears twice"
            samples[key] = sample.value
    return samples, types


def check_histograms(samples: dict[Sample, float], types: dict[str, str]) -> None:
    """Buckets are cumulative, end in +Inf, and +Inf equals _count."""
    for name, kind in types.items():
        if kind != "histogram":
            continue
        series: dict[frozenset, list[tuple[float, float]]] = {}
        for (sample, labels), value in samples.items():
            if sample == name + "_bucket":
                rest = frozenset((k, v) for k, v in labels if k != "le")
                series.setdefault(rest, []).append((float(dict(labels)["le"]), value))
        assert series, f"histogram {name} has no series"
        for rest, buckets in series.items():
            buckets.sort()
            counts = [count for _, count in buckets]
            assert counts == sorted(counts), (name, rest, buckets)
            assert buckets[-1][0] == float("inf"), (name, rest)
            assert samples[(name + "_count", rest)] == counts[-1], (name, rest)
            assert (name + "_sum", rest) in samples, (name, rest)


def labels(**pairs: str) -> frozenset:
    return frozenset(pairs.items())


class Recorder:
    """Sends the workload's requests and remembers each answer by operation,
    status and code: what baton_requests_total must have counted."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.answers: Counter = Counter()
        self.lock = threading.Lock()

    def call(self, operation: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, answer, _ = self.server.call(method, path, body)
        code = answer.get("code", "ok") if status >= 400 and isinstance(answer, dict) else "ok"
        with self.lock:
            self.answers[(operation, str(status), code)] += 1
        return status, answer

    def ok(self, operation: str, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.call(operation, method, path, body)
        assert 200 <= status < 300, (operation, status, answer)
        return answer


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    server = Server(str(tmp_path_factory.mktemp("metrics-node")))
    server.start()
    # The cluster id is the one proposal a node makes by itself after start.
    wait_for(lambda: server.ok("GET", "/v1/cluster")["cluster_id"], 30, "the cluster id")
    yield server
    server.stop()


def scrape(server: Server) -> str:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return response.read().decode()


def test_a_scripted_workload_moves_every_metric_by_exactly_what_it_did(node):
    before_text = scrape(node)
    before, types = parse(before_text)
    check_histograms(before, types)
    r = Recorder(node)
    writes = 0  # requests that become log entries

    def write(operation: str, method: str, path: str, body: Any = None, ok: bool = True) -> Any:
        nonlocal writes
        writes += 1
        if ok:
            return r.ok(operation, method, path, body)
        return r.call(operation, method, path, body)

    l1 = write("create_lease", "POST", "/v1/leases", {"ttl_ms": 60000, "holder": "one"})["lease_id"]
    l2 = write("create_lease", "POST", "/v1/leases", {"ttl_ms": 60000, "holder": "two"})["lease_id"]
    # A lease that stays: the TTL gauge must show it in the 300 s bucket.
    write("create_lease", "POST", "/v1/leases", {"ttl_ms": 200000, "holder": "stays"})
    a = write("acquire_lock", "POST", "/v1/locks/m/a:acquire", {"lease_id": l1})
    # A 409 at once, and a queued wait that times out into a 409 (its cancel is a
    # proposal of the node's own).
    status, problem = write("acquire_lock", "POST", "/v1/locks/m/a:acquire", {"ttl_ms": 5000}, ok=False)
    assert (status, problem["code"]) == (409, "lock_held"), problem
    status, problem = write("acquire_lock", "POST", "/v1/locks/m/a:acquire",
                            {"lease_id": l2, "wait_ms": 300}, ok=False)
    assert (status, problem["code"]) == (409, "lock_held"), problem
    write("release_lock", "POST", "/v1/locks/m/a:release", {"lease_id": l1, "token": a["token"]})

    # A queued wait that is granted when the holder releases.
    c = write("acquire_lock", "POST", "/v1/locks/m/c:acquire", {"lease_id": l1})
    granted: dict[str, Any] = {}
    writes += 1
    waiter = threading.Thread(target=lambda: granted.update(answer=r.call(
        "acquire_lock", "POST", "/v1/locks/m/c:acquire", {"lease_id": l2, "wait_ms": 30000})))
    waiter.start()
    wait_for(lambda: r.ok("get_lock", "GET", "/v1/locks/m/c")["waiters"] == 1, 30, "the waiter in line")
    write("release_lock", "POST", "/v1/locks/m/c:release", {"lease_id": l1, "token": c["token"]})
    waiter.join(timeout=60)
    assert granted["answer"][0] == 200, granted

    # A lease that expires while it holds a lock (its expiry is the leader's proposal).
    l3 = write("create_lease", "POST", "/v1/leases", {"ttl_ms": 1000, "holder": "expires"})["lease_id"]
    write("acquire_lock", "POST", "/v1/locks/m/b:acquire", {"lease_id": l3})
    wait_for(lambda: r.call("get_lease", "GET", "/v1/leases/" + quote(l3))[0] == 404, 30, "the expiry")

    r.ok("keepalive_lease", "POST", f"/v1/leases/{quote(l1)}:keepalive")
    # A watch stream: opened, its headers read, closed.
    with urllib.request.urlopen(node.url + "/v1/watch?kinds=lock", timeout=10) as stream:
        assert stream.status == 200
    r.answers[("watch", "200", "ok")] += 1
    status, problem = r.call("unrouted", "GET", "/v1/no-such-thing")
    assert (status, problem["code"]) == (404, "route_not_found")
    # l2 ends its holding of m/c; l1 holds nothing any more.
    write("revoke_lease", "DELETE", "/v1/leases/" + quote(l2))
    write("revoke_lease", "DELETE", "/v1/leases/" + quote(l1))
    # The scrape before this workload is counted once it has answered.
    r.answers[("metrics", "200", "ok")] += 1

    after_text = scrape(node)
    after, types = parse(after_text)
    check_histograms(after, types)

    def delta(name: str, **pairs: str) -> float:
        key = (name, labels(**pairs))
        assert key in after, f"no sample {key} in the scrape after"
        return after[key] - before.get(key, 0.0)

    # Requests: exactly the recorded answers moved, and no other series.
    moved = {
        (dict(l)["operation"], dict(l)["status"], dict(l)["code"]): value - before.get((name, l), 0.0)
        for (name, l), value in after.items()
        if name == "baton_requests_total" and value != before.get((name, l), 0.0)
    }
    assert moved == dict(r.answers), (moved, dict(r.answers))
    by_operation = Counter()
    for (operation, _, _), count in r.answers.items():
        by_operation[operation] += count
    for (name, l), value in after.items():
        if name == "baton_request_duration_seconds_count":
            operation = dict(l)["operation"]
            assert value - before.get((name, l), 0.0) == by_operation[operation], operation

    # Applied state: grants of a, c (twice: l1, then the waiter l2) and b.
    expected = {
        ("baton_grants_total", labels(kind="lock")): 4,
        ("baton_releases_total", labels(kind="lock", reason="released")): 2,
        ("baton_releases_total", labels(kind="lock", reason="expired")): 1,
        ("baton_releases_total", labels(kind="lock", reason="revoked")): 1,
        ("baton_hold_seconds_count", labels(kind="lock")): 4,
        ("baton_leases_created_total", labels()): 4,
        ("baton_lease_expiries_total", labels()): 1,
        ("baton_lease_revocations_total", labels()): 2,
        ("baton_keepalives_total", labels(result="renewed")): 1,
        ("baton_waits_started_total", labels(kind="lock")): 2,
        ("baton_waits_ended_total", labels(kind="lock", end="timed_out")): 1,
        ("baton_waits_ended_total", labels(kind="lock", end="granted")): 1,
        ("baton_wait_seconds_count", labels(kind="lock")): 1,
        ("baton_watch_streams_opened_total", labels()): 1,
        # Every write, the expiry and the timed-out wait's cancel: one request each.
        ("baton_proposals_total", labels()): writes + 2,
        ("baton_proposal_batch_size_sum", labels()): writes + 2,
    }
    for (name, l), want in expected.items():
        assert delta(name, **dict(l)) == want, (name, dict(l))
    # Everything else of these families stayed put.
    families = {name for name, _ in expected} | {
        "baton_requests_refused_total", "baton_watch_resyncs_total", "baton_snapshots_built_total",
        "baton_snapshots_installed", "baton_raft_leader_changes_total", "baton_internal_errors_total",
        "baton_leader_call_seconds_count", "baton_keepalives_total",
        "baton_snapshot_build_seconds_count", "baton_snapshot_bytes"}
    for (name, l), value in after.items():
        if name in families and (name, l) not in expected:
            assert value == before.get((name, l), 0.0), (name, dict(l))
    # The log: each proposed entry appended once (one append each), committed and
    # applied here, its lag measured once.
    entries = delta("baton_proposal_batch_size_count")
    assert entries >= 1
    assert delta("baton_log_entries_appended_total") == entries
    # Their bytes as encoded (what the snapshot schedule weighs): every entry
    # carries at least its log id and one request.
    assert delta("baton_log_bytes_appended_total") >= 20 * entries
    assert delta("baton_log_append_seconds_count") == entries
    assert delta("baton_commit_apply_lag_seconds_count") == entries
    # Applying them read each one back once, right behind its append: from memory.
    assert delta("baton_log_entries_read_total", source="memory") == entries
    assert delta("baton_log_entries_read_total", source="disk") == 0

    # Gauges: nothing waits now, one lease lives, with a TTL between 60 and 300 s.
    assert after[("baton_waiting_requests", labels())] == 0
    assert after[("baton_proposer_queue_depth", labels())] == 0
    assert after[("baton_leases", labels())] == 1
    assert after[("baton_leases_by_ttl", labels(le="60"))] == 0
    assert after[("baton_leases_by_ttl", labels(le="300"))] == 1
    assert after[("baton_leases_by_ttl", labels(le="+Inf"))] == 1
    # The gauges from before this issue kept their names and their form.
    for gauge in ("baton_applied_revision", "baton_raft_term", "baton_raft_applied_index",
                  "baton_raft_is_leader", "baton_leases", "baton_locks_held", "baton_lock_waiters",
                  "baton_elections_led", "baton_names_registered", "baton_snapshots_installed",
                  "baton_waiting_requests"):
        assert types[gauge] == "gauge", gauge
        assert any(line.startswith(gauge + " ") for line in after_text.splitlines()), gauge
    # Snapshot build time and size are exposed (no snapshot is built here).
    assert types["baton_snapshot_build_seconds"] == "histogram"
    assert types["baton_snapshot_bytes"] == "gauge"
    # No lock name became a label value.
    assert "m/a" not in after_text and "m/c" not in after_text
