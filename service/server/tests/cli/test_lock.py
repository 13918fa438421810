"""`baton lock NAME [-- CMD]` as a real process against a real server (issue 15):
the child's token and environment, mutual exclusion between concurrent runs, loss
of the lock while the supervisor is stopped, signal forwarding, "not acquired",
exit statuses, and holding without a command."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from conftest import (EXIT_LOST, EXIT_NOT_ACQUIRED, intervals, pid_gone, read_json, records,
                      wait_for)


def env_dump(path: str, timeout: float = 20) -> dict:
    wait_for(lambda: os.path.exists(path), timeout, f"the child's environment in {path}")
    return read_json(path)


@pytest.mark.parametrize("export", [False, True], ids=["default", "export-lease-id"])
def test_child_sees_the_token_the_server_reports(cli, server, name, export):
    out, envf, go = cli.path("runs"), cli.path("env.json"), cli.path("go")
    baton = cli.spawn("lock", name, *(["--export-lease-id"] if export else []), "--",
                      *cli.child(out, "--env", envf, "--until", go))
    seen = env_dump(envf)
    env = seen["env"]
    lock = server.lock(name)

    assert lock["held"] is True, lock
    assert env["BATON_FENCING_TOKEN"] == str(lock["token"]), (env, lock)
    assert env["BATON_LOCK_NAME"] == name
    assert env["BATON_ENDPOINT"].rstrip("/") == server.url
    # Default holder: <hostname>:<pid of baton lock>.
    assert lock["holder"] == f"{socket.gethostname()}:{baton.pid}", lock
    # The child runs in its own process group, as a direct child of the supervisor.
    assert seen["pgid"] == seen["pid"], seen
    assert seen["ppid"] == baton.pid, seen
    if export:
        lease = server.ok("GET", "/v1/leases/" + env["BATON_LEASE_ID"])
        assert lease["locks"] == [name], lease
    else:
        assert "BATON_LEASE_ID" not in env, env

    Path(go).touch()
    assert baton.wait() == 0, baton
    after = server.lock(name)
    assert after["held"] is False and not after.get("delay_until_ms"), after
    if export:
        assert server.lease_status(env["BATON_LEASE_ID"]) == 404  # revoked on exit


def test_concurrent_runs_never_overlap(cli, server, name):
    out = cli.path("runs")
    runs = [cli.spawn("lock", name, "--ttl-ms", "5000", "--holder", f"runner-{i}", "--",
                      *cli.child(out, "--label", f"runner-{i}", "--hold", "0.4", "--tick", "0.05"))
            for i in range(4)]
    for run in runs:
        assert run.wait(60) == 0, run

    done = intervals(out)
    assert len(done) == 4, done
    assert sorted(run["label"] for run in done) == [f"runner-{i}" for i in range(4)]
    for earlier, later in zip(done, done[1:]):
        assert earlier["end"] is not None and earlier["last"] == earlier["end"], earlier
        assert earlier["end"] < later["start"], f"overlap: {earlier} and {later}"
        assert int(earlier["token"]) < int(later["token"]), f"tokens not increasing: {earlier} {later}"
    assert server.lock(name)["held"] is False


def test_stopped_supervisor_loses_the_lock_and_its_child(cli, server, name):
    """SIGSTOP the supervisor past its lease's TTL, SIGCONT it: it stops the child and
    exits 76; a waiting `baton lock` gets the lock only after the child is gone."""
    out, envf = cli.path("runs"), cli.path("first-env.json")
    # The default lock delay (kill grace + 1 s) is what keeps the waiter out while the
    # resumed supervisor stops its child.
    first = cli.spawn("lock", name, "--ttl-ms", "2000", "--kill-grace-ms", "500",
                      "--holder", "first", "--",
                      *cli.child(out, "--label", "first", "--env", envf, "--hold", "60", "--tick", "0.05"))
    child_pid = env_dump(envf)["pid"]
    first_token = server.lock(name)["token"]
    second = cli.spawn("lock", name, "--ttl-ms", "5000", "--holder", "second", "--",
                       *cli.child(out, "--label", "second", "--hold", "0.2"))
    wait_for(lambda: server.lock(name)["waiters"] == 1, 20, "the second run waiting")

    os.kill(first.pid, signal.SIGSTOP)
    try:
        # Past the TTL: the server has expired the first lease (the lock is no longer
        # held with the first token), while the child still runs.
        lock = wait_for(lambda: (lambda lock: lock if lock.get("token") != first_token or not lock["held"]
                                 else None)(server.lock(name)), 20, "the first lease to expire")
        assert not pid_gone(child_pid)
    finally:
        os.kill(first.pid, signal.SIGCONT)

    assert first.wait(20) == EXIT_LOST, first
    assert f"baton: lock {name} lost" in first.stderr(), first
    assert pid_gone(child_pid), "the first child still runs"
    assert second.wait(30) == 0, second

    done = {run["label"]: run for run in intervals(out)}
    assert done["first"]["end"] is None, f"the first child was not stopped: {done['first']}"
    assert done["first"]["last"] < done["second"]["start"], f"overlap: {done}"
    assert int(done["second"]["token"]) > int(first_token), done
    assert lock.get("holder") != "first", lock


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_signals_are_forwarded_to_the_child(cli, server, name, sig):
    out, envf, marker, ready = cli.path("runs"), cli.path("env.json"), cli.path("marker"), cli.path("ready")
    baton = cli.spawn("lock", name, "--export-lease-id", "--",
                      *cli.child(out, "--env", envf, "--trap", marker, "--trap-exit", "42",
                                 "--ready", ready, "--hold", "60"))
    wait_for(lambda: os.path.exists(ready), 20, "the child to be ready")
    lease_id = read_json(envf)["env"]["BATON_LEASE_ID"]
    assert server.lock(name)["held"] is True

    baton.signal(sig)
    assert baton.wait(20) == 42, baton  # the child's own status
    assert Path(marker).read_text() == sig.name
    lock = server.lock(name)
    assert lock["held"] is False and not lock.get("delay_until_ms"), lock
    assert server.lease_status(lease_id) == 404


def test_next_waiter_gets_the_lock_at_once_after_sigterm(cli, server, name):
    out, ready = cli.path("runs"), cli.path("ready")
    first = cli.spawn("lock", name, "--holder", "first", "--",
                      *cli.child(out, "--label", "first", "--ready", ready, "--hold", "60"))
    wait_for(lambda: os.path.exists(ready), 20, "the first child")
    second = cli.spawn("lock", name, "--holder", "second", "--",
                       *cli.child(out, "--label", "second", "--hold", "0"))
    wait_for(lambda: server.lock(name)["waiters"] == 1, 20, "the second run waiting")

    first.signal(signal.SIGTERM)
    assert first.wait(20) == 128 + signal.SIGTERM, first  # the child died of SIGTERM
    assert second.wait(20) == 0, second
    done = {run["label"]: run for run in intervals(out)}
    assert done["first"]["end"] is None and done["first"]["last"] < done["second"]["start"], done


def test_not_acquired_in_time_exits_75(cli, server, name):
    grant = server.hold(name, "someone-else")
    ran = cli.path("ran")
    for how in (["--wait-ms", "300"], ["--no-wait"]):
        result = cli.run("lock", name, *how, "--", *cli.child(ran), timeout=30)
        assert result.rc == EXIT_NOT_ACQUIRED, result
        assert result.stderr.strip(), result
        assert result.elapsed < 10, result
        if how[0] == "--wait-ms":
            assert result.elapsed >= 0.25, result  # it did wait
        assert not os.path.exists(ran), "the command ran without the lock"
    # The holder is unaffected, and nobody is left in the queue.
    lock = server.lock(name)
    assert lock["held"] and lock["token"] == grant["token"] and lock["holder"] == "someone-else", lock
    assert lock["waiters"] == 0, lock
    server.ok("POST", f"/v1/locks/{name}:renew", {"lease_id": grant["lease_id"], "token": grant["token"]})


@pytest.mark.parametrize("options, expected", [
    (["--exit", "3"], 3),
    (["--exit", "0"], 0),
    (["--kill-self", "SIGKILL"], 128 + 9),
], ids=["exit-3", "exit-0", "sigkill"])
def test_exit_status_passes_through(cli, server, name, options, expected):
    out = cli.path("runs")
    result = cli.run("lock", name, "--", *cli.child(out, *options))
    assert result.rc == expected, result
    assert [r["ev"] for r in records(out)] == ["start", "end"]
    assert server.lock(name)["held"] is False


def test_lost_when_the_lease_is_revoked(cli, server, name):
    """A refused keepalive (the lease revoked behind the supervisor's back) is a loss:
    the child is stopped and baton exits 76."""
    out, envf = cli.path("runs"), cli.path("env.json")
    baton = cli.spawn("lock", name, "--ttl-ms", "3000", "--kill-grace-ms", "500", "--export-lease-id", "--",
                      *cli.child(out, "--env", envf, "--hold", "60", "--tick", "0.05"))
    seen = env_dump(envf)
    server.ok("DELETE", "/v1/leases/" + seen["env"]["BATON_LEASE_ID"])
    assert baton.wait(20) == EXIT_LOST, baton
    assert f"baton: lock {name} lost" in baton.stderr(), baton
    assert pid_gone(seen["pid"])
    assert records(out)[-1]["ev"] != "end"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_without_a_command_holds_until_a_signal(cli, server, name, sig):
    baton = cli.spawn("lock", name, "--output", "json")
    grant = wait_for(lambda: baton.stdout().strip() and json.loads(baton.stdout().splitlines()[0]),
                     20, "the grant on stdout")
    lock = server.lock(name)
    assert lock["held"] and lock["token"] == grant["token"], (lock, grant)
    assert grant["name"] == name and grant["holder"] == lock["holder"], grant
    # The acquire answer (contract: "json: the acquire answer"), revision included.
    assert {"lease_id", "revision", "ttl_ms"} <= grant.keys(), grant
    assert grant["revision"] == lock["since_revision"], (grant, lock)
    assert server.lease_status(grant["lease_id"]) == 200
    time.sleep(0.2)
    assert baton.poll() is None, baton

    baton.signal(sig)
    assert baton.wait(20) == 0, baton
    after = server.lock(name)
    assert after["held"] is False and not after.get("delay_until_ms"), after
    assert server.lease_status(grant["lease_id"]) == 404


def test_without_a_command_prints_a_table(cli, server, name):
    baton = cli.spawn("lock", name, "--holder", "table-holder")
    lock = wait_for(lambda: (lambda lock: lock if lock["held"] else None)(server.lock(name)), 20, "the grant")
    wait_for(lambda: str(lock["token"]) in baton.stdout().split(), 20, "the grant on stdout")
    fields = baton.stdout().split()
    assert name in fields and "table-holder" in fields, baton
    with pytest.raises(ValueError):
        json.loads(baton.stdout())
    baton.signal(signal.SIGINT)
    assert baton.wait(20) == 0, baton
    assert server.lock(name)["held"] is False
