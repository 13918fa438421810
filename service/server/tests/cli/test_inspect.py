"""The inspection commands (`baton locks|names|leases|elections get|list`,
`baton cluster status`, `baton watch`) as real processes (issue 15): a table by
default, the server's JSON with `--output json` (checked against the HTTP API's
own answer), a problem answer as one `baton: <status> <code>: <detail>` line on
stderr with exit 1, an unreachable endpoint as one clear line with exit 1, and
BATON_ENDPOINT as good as --endpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from conftest import EXIT_REQUEST_FAILED, EXIT_USAGE, baton_bin, free_port, quote, wait_for


def items(result) -> list[dict]:
    """Items of a list command's JSON output: one page document ({"items": ...}) per
    line, or one item per line."""
    found = []
    for doc in result.json_lines():
        found.extend(doc["items"] if isinstance(doc, dict) and "items" in doc else [doc])
    return found


def one_json(result) -> dict:
    docs = result.json_lines()
    assert len(docs) == 1, result
    return docs[0]


def same_fields(cli_doc: dict, http_doc: dict, ignore: tuple[str, ...] = ()) -> None:
    """The CLI printed the server's answer: every field the server sent with a value."""
    for key, value in http_doc.items():
        if key in ignore or value is None:
            continue
        assert cli_doc.get(key) == value, (key, cli_doc, http_doc)


def problem_line(server, method: str, path: str) -> str:
    status, problem, _ = server.call(method, path)
    assert status >= 400, (status, problem)
    return f"baton: {status} {problem['code']}: {problem['detail']}"


def assert_problem(result, expected_line: str) -> None:
    assert result.rc == EXIT_REQUEST_FAILED, result
    assert result.stderr.splitlines() == [expected_line], result
    assert result.stdout == "", result


@pytest.fixture
def held(server, name):
    """Three locks under one prefix, held over HTTP by h-0, h-1, h-2."""
    grants = [server.hold(f"{name}/lock-{i}", f"h-{i}") for i in range(3)]
    return {"prefix": name + "/", "grants": grants}


def test_locks_get(cli, server, held):
    grant = held["grants"][1]
    lock = server.lock(grant["name"])
    result = cli.run("locks", "get", grant["name"], "--output", "json")
    assert result.rc == 0, result
    doc = one_json(result)
    same_fields(doc, lock)
    assert doc["held"] is True and doc["token"] == grant["token"] and doc["holder"] == "h-1"

    table = cli.run("locks", "get", grant["name"])
    assert table.rc == 0, table
    fields = table.stdout.split()
    assert grant["name"] in fields and "h-1" in fields and str(grant["token"]) in fields, table

    free = cli.run("locks", "get", held["prefix"] + "free", "--output", "json")
    assert free.rc == 0, free
    assert one_json(free)["held"] is False


def test_locks_list(cli, server, held):
    page = server.ok("GET", "/v1/locks?prefix=" + quote(held["prefix"]))
    assert len(page["items"]) == 3
    result = cli.run("locks", "list", "--prefix", held["prefix"], "--output", "json")
    assert result.rc == 0, result
    listed = items(result)
    assert [doc["name"] for doc in listed] == [doc["name"] for doc in page["items"]], result
    for doc, expected in zip(listed, page["items"]):
        same_fields(doc, expected)

    table = cli.run("locks", "list", "--prefix", held["prefix"])
    assert table.rc == 0, table
    for grant in held["grants"]:
        assert grant["name"] in table.stdout and grant["holder"] in table.stdout, table
    assert "other-prefix" not in table.stdout

    limited = cli.run("locks", "list", "--prefix", held["prefix"], "--limit", "2", "--output", "json")
    assert limited.rc == 0, limited
    assert [doc["name"] for doc in items(limited)] == [doc["name"] for doc in page["items"][:2]], limited


def test_names_get_and_list(cli, server, name):
    registered = [server.ok("PUT", f"/v1/names/{name}/svc-{i}",
                            {"value": {"addr": f"10.0.0.{i}:8080"}, "ttl_ms": 30000, "holder": f"reg-{i}"})
                  for i in range(2)]
    answer = server.ok("GET", f"/v1/names/{name}/svc-1")
    result = cli.run("names", "get", f"{name}/svc-1", "--output", "json")
    assert result.rc == 0, result
    doc = one_json(result)
    same_fields(doc, answer)
    assert doc["value"] == {"addr": "10.0.0.1:8080"} and doc["token"] == registered[1]["token"]

    table = cli.run("names", "get", f"{name}/svc-1")
    assert table.rc == 0, table
    assert f"{name}/svc-1" in table.stdout and "reg-1" in table.stdout and "10.0.0.1:8080" in table.stdout, table

    page = server.ok("GET", "/v1/names?prefix=" + quote(name + "/"))
    listed = cli.run("names", "list", "--prefix", name + "/", "--output", "json")
    assert listed.rc == 0, listed
    assert [d["name"] for d in items(listed)] == [d["name"] for d in page["items"]] == \
        [f"{name}/svc-0", f"{name}/svc-1"], listed
    for got, expected in zip(items(listed), page["items"]):
        same_fields(got, expected)
    listed_table = cli.run("names", "list", "--prefix", name + "/")
    assert listed_table.rc == 0 and f"{name}/svc-0" in listed_table.stdout \
        and f"{name}/svc-1" in listed_table.stdout, listed_table


def test_leases_get(cli, server, held):
    grant = held["grants"][0]
    answer = server.ok("GET", "/v1/leases/" + grant["lease_id"])
    result = cli.run("leases", "get", grant["lease_id"], "--output", "json")
    assert result.rc == 0, result
    doc = one_json(result)
    same_fields(doc, answer, ignore=("remaining_ms",))
    assert doc["locks"] == [grant["name"]] and 0 < doc["remaining_ms"] <= doc["ttl_ms"], doc

    table = cli.run("leases", "get", grant["lease_id"])
    assert table.rc == 0, table
    assert "h-0" in table.stdout and grant["name"] in table.stdout, table


def test_elections_get(cli, server, name):
    won = server.ok("POST", f"/v1/elections/{name}:campaign",
                    {"candidate": "boss", "value": {"addr": "10.0.0.7:5432"}, "ttl_ms": 30000})
    answer = server.election(name)[1]
    result = cli.run("elections", "get", name, "--output", "json")
    assert result.rc == 0, result
    doc = one_json(result)
    same_fields(doc, answer)
    assert doc["leader"]["candidate"] == "boss" and doc["leader"]["token"] == won["token"], doc
    table = cli.run("elections", "get", name)
    assert table.rc == 0 and "boss" in table.stdout and str(won["token"]) in table.stdout.split(), table


def test_cluster_status(cli, server):
    answer = server.ok("GET", "/v1/cluster")
    result = cli.run("cluster", "status", "--output", "json")
    assert result.rc == 0, result
    doc = one_json(result)
    same_fields(doc, answer, ignore=("applied_revision", "commit_index", "term"))
    assert doc["members"] == answer["members"] and len(doc["members"]) == 1, doc

    table = cli.run("cluster", "status")
    assert table.rc == 0, table
    member = answer["members"][0]
    assert member["api_addr"] in table.stdout and member["raft_addr"] in table.stdout, table
    assert str(member["id"]) in table.stdout.split(), table


def test_problems_are_one_line_on_stderr(cli, server, name):
    # A lease id that does not exist: 404 lease_not_found.
    bogus = "AAAAAAAAAAAAAAAAAAAAAAAAAA"
    assert_problem(cli.run("leases", "get", bogus), problem_line(server, "GET", "/v1/leases/" + bogus))
    # A name that is not registered: 404 not_found.
    assert_problem(cli.run("names", "get", name + "/missing"),
                   problem_line(server, "GET", f"/v1/names/{name}/missing"))
    # An invalid lock name (257 bytes): 400 invalid_name. A free valid name is no error
    # (`GET /v1/locks/{name}` answers held: false).
    too_long = "a" * 257
    assert_problem(cli.run("locks", "get", too_long, "--output", "json"),
                   problem_line(server, "GET", "/v1/locks/" + too_long))
    for result in (cli.run("leases", "get", bogus), cli.run("names", "get", name + "/missing")):
        assert result.stderr.startswith("baton: 404 "), result


def test_conflict_problem_from_a_client_command(cli, server, name):
    """A 409 from a command that is not `baton lock`: `names register` of a taken name."""
    server.ok("PUT", f"/v1/names/{name}", {"value": 1, "ttl_ms": 30000, "holder": "owner"})
    result = cli.run("names", "register", name, "--value", "2", "--ttl-ms", "30000")
    assert result.rc == EXIT_REQUEST_FAILED, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("baton: 409 name_taken: "), result


@pytest.mark.parametrize("args", [("locks", "list"), ("cluster", "status"), ("leases", "get", "x")],
                         ids=["locks-list", "cluster-status", "leases-get"])
def test_unreachable_endpoint(cli, args):
    endpoint = f"http://127.0.0.1:{free_port()}"
    result = cli.run(*args, endpoint=endpoint, timeout=60)
    assert result.rc == EXIT_REQUEST_FAILED, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"baton: cannot reach {endpoint}"), result


def test_unreachable_endpoint_lock_runs_nothing(cli, name):
    endpoint = f"http://127.0.0.1:{free_port()}"
    ran = cli.path("ran")
    result = cli.run("lock", name, "--", *cli.child(ran), endpoint=endpoint, timeout=60)
    assert result.rc == EXIT_REQUEST_FAILED, result
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(f"baton: cannot reach {endpoint}"), result
    assert not os.path.exists(ran)


def test_usage_error_exits_2(cli):
    result = cli.run("lock")
    assert result.rc == EXIT_USAGE, result


def test_endpoint_from_the_environment(cli, server, held):
    grant = held["grants"][2]
    via_flag = cli.run("locks", "get", grant["name"], "--output", "json")
    via_env = cli.run("locks", "get", grant["name"], "--output", "json", endpoint=None,
                      env={"BATON_ENDPOINT": server.url})
    assert via_flag.rc == 0 and via_env.rc == 0, (via_flag, via_env)
    assert one_json(via_env) == one_json(via_flag)
    # Global options after the subcommand work too.
    after = cli.run("locks", "get", grant["name"], "--endpoint", server.url, "--output", "json", endpoint=None)
    assert after.rc == 0 and one_json(after) == one_json(via_flag), after
    # The flag wins over the environment.
    dead = f"http://127.0.0.1:{free_port()}"
    both = cli.run("locks", "get", grant["name"], "--output", "json", env={"BATON_ENDPOINT": dead})
    assert both.rc == 0 and one_json(both) == one_json(via_flag), both
    env_dead = cli.run("locks", "get", grant["name"], endpoint=None, env={"BATON_ENDPOINT": dead}, timeout=60)
    assert env_dead.rc == EXIT_REQUEST_FAILED and env_dead.stderr.startswith(f"baton: cannot reach {dead}"), env_dead

    # `baton lock` with the endpoint from the environment: the child sees it.
    envf = cli.path("env.json")
    run = cli.run("lock", f"{held['prefix']}by-env", "--", *cli.child(cli.path("runs"), "--env", envf),
                  endpoint=None, env={"BATON_ENDPOINT": server.url})
    assert run.rc == 0, run
    with open(envf) as f:
        assert json.load(f)["env"]["BATON_ENDPOINT"].rstrip("/") == server.url


def changes(server, name: str) -> tuple[int, dict]:
    """A lock acquired and released and a name registered under `name/`, after the
    revision returned (read from a list's Baton-Revision)."""
    _, _, headers = server.call("GET", "/v1/locks?prefix=" + quote(name + "/"))
    since = int({k.lower(): v for k, v in headers.items()}["baton-revision"])
    grant = server.hold(f"{name}/w", "watched")
    server.ok("POST", f"/v1/locks/{name}/w:release", {"lease_id": grant["lease_id"], "token": grant["token"]})
    server.ok("PUT", f"/v1/names/{name}/n", {"value": "v", "ttl_ms": 30000, "holder": "registrar"})
    return since, grant


def watched_events(proc) -> list[dict]:
    """The `{"event": ..., "data": {...}}` lines of a `baton watch --output json`, bookmarks left out."""
    docs = [json.loads(line) for line in proc.stdout().splitlines() if line.strip()]
    return [doc for doc in docs if doc["event"] != "bookmark"]


def stop(proc) -> None:
    assert proc.poll() is None, proc
    proc.signal(signal.SIGINT)
    proc.wait(20)


def test_watch(cli, server, name):
    since, grant = changes(server, name)
    every = cli.spawn("watch", "--prefix", name + "/", "--since", str(since), "--output", "json")
    table = cli.spawn("watch", "--prefix", name + "/", "--since", str(since))

    wait_for(lambda: "name.registered" in [doc["event"] for doc in watched_events(every)], 20,
             "the watch to reach name.registered")
    seen = watched_events(every)
    assert [doc["event"] for doc in seen] == ["lock.acquired", "lock.released", "name.registered"], every
    acquired = seen[0]["data"]
    assert acquired["name"] == f"{name}/w" and acquired["token"] == grant["token"], acquired
    assert acquired["holder"] == "watched", acquired

    wait_for(lambda: "name.registered" in table.stdout(), 20, "the table watch")
    line = next(line for line in table.stdout().splitlines() if "lock.acquired" in line)
    fields = line.split()
    assert int(fields[0]) > since and fields[1] == "lock.acquired" and fields[2] == f"{name}/w", line
    assert f"token={grant['token']}" in fields and "holder=watched" in fields, line
    stop(every)
    stop(table)


@pytest.mark.parametrize("kinds", ["lock"])
def test_watch_kinds(cli, server, name, kinds):
    """`--kinds lock`, as the README and the server spell kinds (singular)."""
    since, _ = changes(server, name)
    server.hold(f"{name}/sentinel", "sentinel")  # after the name: once it is seen, the name was passed
    locks_only = cli.spawn("watch", "--prefix", name + "/", "--since", str(since), "--kinds", kinds,
                           "--output", "json")
    wait_for(lambda: locks_only.poll() is not None
             or [doc["event"] for doc in watched_events(locks_only)][-1:] == ["lock.acquired"]
             and watched_events(locks_only)[-1]["data"]["name"] == f"{name}/sentinel",
             20, "the lock-only watch to reach the sentinel")
    assert locks_only.poll() is None, locks_only
    assert [doc["event"] for doc in watched_events(locks_only)] == \
        ["lock.acquired", "lock.released", "lock.acquired"], locks_only
    stop(locks_only)


def test_client_options_go_after_the_command_name(cli, server, held):
    """`--endpoint` and `--output` belong to the client commands: after the command
    name, before or after its action (`baton locks --output json get NAME`); they
    are not options of `baton` itself, whose other commands (serve, ...) have none."""
    grant = held["grants"][0]
    for args in (("locks", "--endpoint", server.url, "--output", "json", "get", grant["name"]),
                 ("locks", "get", grant["name"], "--endpoint", server.url, "--output", "json")):
        result = cli.run(*args, endpoint=None)
        assert result.rc == 0, result
        assert one_json(result)["token"] == grant["token"], result
    result = cli.run("--endpoint", server.url, "locks", "get", grant["name"], endpoint=None)
    assert result.rc == 2, result


def test_watch_ends_on_sigint_even_when_started_with_it_ignored(cli, server, name):
    """A non-interactive shell starts background jobs with SIGINT ignored, and the
    process inherits that: `make test` run from such a job hung in four tests here,
    because `baton watch` left SIGINT to its default action."""
    argv = [baton_bin(), "watch", "--prefix", name + "/", "--output", "json",
            "--endpoint", server.url]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=cli.env(), start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        first = proc.stdout.readline()  # the stream's opening bookmark
        assert b'"bookmark"' in first, first
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
