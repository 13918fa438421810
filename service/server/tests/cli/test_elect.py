"""`baton elect NAME -- CMD` and `baton elect NAME --observe` as real processes
(issue 15): the child runs only while its candidate leads, leadership passes to
the next candidate when the leader's child exits, and an observer prints every
leader in order."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

from conftest import EXIT_NOT_ACQUIRED, intervals, read_json, wait_for

TABLE_LEADER = re.compile(r"^(\d+) leader=(\S+) token=(\d+) value=(.*)$")


def leaders_in_table(text: str) -> list[tuple[str, int, object]]:
    """(candidate, token, value) of each `<revision> leader=<holder> token=<token> value=<json>` line."""
    found = []
    for line in text.splitlines():
        match = TABLE_LEADER.match(line.strip())
        if match:
            found.append((match.group(2), int(match.group(3)), json.loads(match.group(4))))
    return found


def leaders_in_json(text: str) -> list[tuple[str, int, object]]:
    """(candidate, token, value) of each `election.elected` event. A JSON line is
    `{"event", "id", "data"}` as for `baton watch` (the data alone would not say
    whether a leader was elected or resigned); bookmarks are lines too."""
    found = []
    for line in filter(str.strip, text.splitlines()):
        doc = json.loads(line)
        assert set(doc) == {"event", "id", "data"}, doc
        if doc["event"] == "election.elected":
            data = doc["data"]
            found.append((data["candidate"], data["token"], data.get("value")))
    return found


def after_warmup(leaders: list[tuple[str, int, object]]) -> list[tuple[str, int, object]]:
    last = max(i for i, (who, _, _) in enumerate(leaders) if who.startswith("warmup-"))
    return leaders[last + 1:]


def warm_up(server, name: str, observer, printed) -> None:
    """Waits until the observer(s) are live: campaigns and resigns over HTTP until
    `printed(candidate)` says the observers printed that leader."""
    attempt = 0

    def once() -> bool:
        nonlocal attempt
        attempt += 1
        who = f"warmup-{attempt}"
        won = server.ok("POST", f"/v1/elections/{name}:campaign", {"candidate": who, "value": None, "ttl_ms": 5000})
        server.ok("POST", f"/v1/elections/{name}:resign", {"lease_id": won["lease_id"], "token": won["token"]})
        try:
            return wait_for(lambda: printed(who), 2.0, "")
        except AssertionError:
            return False
    try:
        wait_for(once, 15, "the observer to print a leader", interval=0)
    except AssertionError as error:
        raise AssertionError(f"{error}: {observer!r}") from None


def stop(observer) -> None:
    assert observer.poll() is None, observer
    observer.signal(signal.SIGINT)
    observer.wait(20)


def test_elect_hands_over_when_the_leaders_child_exits(cli, server, name):
    observer = cli.spawn("elect", name, "--observe")
    warm_up(server, name, observer, lambda who: who in [c for c, _, _ in leaders_in_table(observer.stdout())])

    out, go, env1, env2 = cli.path("runs"), cli.path("go"), cli.path("env1.json"), cli.path("env2.json")
    first = cli.spawn("elect", name, "--holder", "c1", "--value", '{"n": 1}', "--ttl-ms", "5000", "--",
                      *cli.child(out, "--label", "c1", "--env", env1, "--until", go))
    wait_for(lambda: os.path.exists(env1), 20, "the first child")
    status, election = server.election(name)
    assert status == 200 and election["leader"]["candidate"] == "c1", election
    assert election["leader"]["value"] == {"n": 1}, election
    seen1 = read_json(env1)["env"]
    assert seen1["BATON_ELECTION_NAME"] == name, seen1
    assert seen1["BATON_FENCING_TOKEN"] == str(election["leader"]["token"]), (seen1, election)
    assert seen1["BATON_ENDPOINT"].rstrip("/") == server.url
    assert "BATON_LEASE_ID" not in seen1

    second = cli.spawn("elect", name, "--holder", "c2", "--value", '{"n": 2}', "--ttl-ms", "5000", "--",
                       *cli.child(out, "--label", "c2", "--env", env2, "--hold", "0.3"))
    wait_for(lambda: server.election(name)[1]["candidates"] == 1, 20, "the second candidate in line")
    # A losing candidate never runs its command, and --no-wait does not win either.
    no_wait = cli.run("elect", name, "--no-wait", "--", *cli.child(cli.path("never")))
    assert no_wait.rc == EXIT_NOT_ACQUIRED, no_wait
    assert not os.path.exists(cli.path("never"))
    assert not os.path.exists(env2)
    assert second.poll() is None, second

    Path(go).touch()
    assert first.wait(20) == 0, first
    assert second.wait(30) == 0, second

    runs = {run["label"]: run for run in intervals(out)}
    assert runs["c1"]["end"] < runs["c2"]["start"], runs
    assert int(runs["c1"]["token"]) < int(runs["c2"]["token"]), runs
    assert read_json(env2)["env"]["BATON_FENCING_TOKEN"] == runs["c2"]["token"]
    # Both resigned: no leader left.
    status, election = server.election(name)
    assert status == 404 or not election.get("leader"), (status, election)

    expected = [("c1", int(runs["c1"]["token"]), {"n": 1}), ("c2", int(runs["c2"]["token"]), {"n": 2})]
    wait_for(lambda: after_warmup(leaders_in_table(observer.stdout())) == expected, 20,
             f"the observer to print {expected}")
    stop(observer)


def test_observe_json_prints_each_leaders_event_data(cli, server, name):
    observer = cli.spawn("elect", name, "--observe", "--output", "json")
    warm_up(server, name, observer, lambda who: who in [c for c, _, _ in leaders_in_json(observer.stdout())])
    expected = []
    for who in ("j1", "j2"):
        won = server.ok("POST", f"/v1/elections/{name}:campaign",
                        {"candidate": who, "value": {"who": who}, "ttl_ms": 5000})
        server.ok("POST", f"/v1/elections/{name}:resign", {"lease_id": won["lease_id"], "token": won["token"]})
        expected.append((who, won["token"], {"who": who}))
    wait_for(lambda: after_warmup(leaders_in_json(observer.stdout())) == expected, 20,
             f"the observer to print {expected}")
    stop(observer)
