"""`baton lock --shared` and `baton semaphore NAME --limit N` as real processes against
a real server (issue 17): readers overlap, a writer waits for all of them and is not
overtaken by a later reader, a semaphore never runs more than `limit` commands at once,
and the refusals (limit_mismatch, full, invalid flags) end with the documented exits."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from conftest import EXIT_NOT_ACQUIRED, intervals, read_json, wait_for


def semaphore(server, name: str) -> dict:
    return server.ok("GET", "/v1/semaphores/" + urllib.parse.quote(name, safe=""))


def most_at_once(runs: list[dict]) -> int:
    """The most runs whose [start, end] intervals overlap at one instant."""
    edges = sorted([(run["start"], 1) for run in runs] + [(run["end"], -1) for run in runs],
                   key=lambda edge: (edge[0], edge[1]))
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_readers_share_and_a_queued_writer_blocks_later_readers(cli, server, name):
    out, go = cli.path("runs"), cli.path("go")
    readers = [cli.spawn("lock", name, "--shared", "--holder", f"reader-{i}", "--",
                         *cli.child(out, "--label", f"reader-{i}", "--env", cli.path(f"r{i}.json"),
                                    "--until", go))
               for i in range(2)]
    # Both children run at once: both readers hold the lock together.
    for i in range(2):
        wait_for(lambda i=i: os.path.exists(cli.path(f"r{i}.json")), 20, f"reader {i} started")
    lock = server.lock(name)
    assert lock["mode"] == "shared" and len(lock["holders"]) == 2, lock
    tokens = {read_json(cli.path(f"r{i}.json"))["env"]["BATON_FENCING_TOKEN"] for i in range(2)}
    assert tokens == {str(h["token"]) for h in lock["holders"]}, (tokens, lock)

    writer = cli.spawn("lock", name, "--holder", "writer", "--",
                       *cli.child(out, "--label", "writer", "--hold", "0.3"))
    wait_for(lambda: server.lock(name)["waiters"] == 1, 20, "the writer in line")
    late = cli.spawn("lock", name, "--shared", "--holder", "late-reader", "--",
                     *cli.child(out, "--label", "late-reader", "--hold", "0.1"))
    wait_for(lambda: server.lock(name)["waiters"] == 2, 20, "the late reader in line")
    # The lock is shared and the late reader compatible with its holders, yet it
    # waits: the writer asked first.
    assert len(server.lock(name)["holders"]) == 2

    Path(go).touch()
    for run in [*readers, writer, late]:
        assert run.wait(60) == 0, run
    runs = {run["label"]: run for run in intervals(out)}
    assert set(runs) == {"reader-0", "reader-1", "writer", "late-reader"}, runs
    assert runs["writer"]["start"] > max(runs["reader-0"]["end"], runs["reader-1"]["end"]), runs
    assert runs["late-reader"]["start"] > runs["writer"]["end"], runs
    assert int(runs["writer"]["token"]) < int(runs["late-reader"]["token"]), runs
    assert server.lock(name)["held"] is False


def test_a_semaphore_runs_at_most_limit_commands_at_once(cli, server, name):
    out = cli.path("runs")
    runs = [cli.spawn("semaphore", name, "--limit", "2", "--holder", f"worker-{i}", "--",
                      *cli.child(out, "--label", f"worker-{i}", "--hold", "0.4",
                                 *(["--env", cli.path("env.json")] if i == 0 else [])))
            for i in range(5)]
    for run in runs:
        assert run.wait(60) == 0, run
    done = intervals(out)
    assert sorted(run["label"] for run in done) == [f"worker-{i}" for i in range(5)], done
    assert all(run["end"] is not None for run in done), done
    assert most_at_once(done) == 2, done
    assert len({run["token"] for run in done}) == 5, done
    env = read_json(cli.path("env.json"))["env"]
    assert env["BATON_SEMAPHORE_NAME"] == name, env
    assert "BATON_LOCK_NAME" not in env, env
    after = semaphore(server, name)
    assert after["holders"] == [] and after["in_use"] == 0, after


def test_refusals_end_with_the_documented_exits(cli, server, name):
    go = cli.path("go")
    holder = cli.spawn("semaphore", name, "--limit", "1", "--",
                       *cli.child(cli.path("runs"), "--env", cli.path("env.json"), "--until", go))
    wait_for(lambda: os.path.exists(cli.path("env.json")), 20, "the first holder started")
    held = semaphore(server, name)
    assert held["limit"] == 1 and held["in_use"] == 1, held
    assert read_json(cli.path("env.json"))["env"]["BATON_FENCING_TOKEN"] == str(held["holders"][0]["token"])

    full = cli.run("semaphore", name, "--limit", "1", "--no-wait", "--", "true")
    assert full.rc == EXIT_NOT_ACQUIRED and "semaphore_full" in full.stderr, full
    mismatch = cli.run("semaphore", name, "--limit", "3", "--no-wait", "--", "true")
    assert mismatch.rc == 1 and "limit_mismatch" in mismatch.stderr, mismatch
    too_many = cli.run("semaphore", name + "-other", "--limit", "2", "--permits", "3", "--", "true")
    assert too_many.rc == 1 and "invalid_permits" in too_many.stderr, too_many
    delay = cli.run("semaphore", name, "--limit", "1", "--lock-delay-ms", "5000", "--", "true")
    assert delay.rc == 2 and "--lock-delay-ms" in delay.stderr, delay
    # --shared belongs to `baton lock` alone.
    shared_elect = cli.run("elect", name, "--shared", "--", "true")
    assert shared_elect.rc == 2, shared_elect
    # The refused runs left nothing behind: one holder, nobody waiting.
    assert semaphore(server, name)["in_use"] == 1

    Path(go).touch()
    assert holder.wait(30) == 0, holder
    assert semaphore(server, name)["in_use"] == 0
