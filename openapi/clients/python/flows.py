"""Baton's real flows through a Python client generated from openapi/baton.json.

`make test-clients` (openapi/clients/test_clients.py) generates the client with
openapi-python-client into a temporary folder as the package `baton_client`, starts
`baton serve`, and runs:

    python flows.py --endpoint http://127.0.0.1:PORT --client-dir TMP

Every request the spec describes goes through the generated functions and models;
only the Server-Sent Events stream of `:observe` is read with httpx directly (the
generator does not parse `text/event-stream`). Each step is checked; the first
failure raises, and the exit status is non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from typing import Any, Iterator

import httpx

if not __debug__:
    sys.exit("flows.py checks with assert: run it without -O")

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--endpoint", default=os.environ.get("BATON_ENDPOINT", "http://127.0.0.1:7878"))
parser.add_argument("--client-dir", required=True,
                    help="folder holding the generated package `baton_client`")
args = parser.parse_args()
sys.path.insert(0, args.client_dir)

from baton_client import Client  # noqa: E402
from baton_client.api.elections import campaign, get_election, resign  # noqa: E402
from baton_client.api.leases import create_lease, get_lease, revoke_lease  # noqa: E402
from baton_client.api.locks import (  # noqa: E402
    acquire_lock, get_lock, list_locks, release_lock, renew_lock, validate_lock)
from baton_client.api.names import get_name, register_name  # noqa: E402
from baton_client.models import (  # noqa: E402
    AcquireBody, CampaignBody, CreateLeaseBody, Elected, ElectionInfo, HolderBody,
    LeaseCreated, LeaseInfo, LeaseRevoked, LockGrant, LockInfo, LockPage, LockReleased,
    LockRenewed, NameInfo, Problem, RegisterBody, Registered, Resigned, ResignBody,
    ValidateBody, Validation)
from baton_client.types import Response  # noqa: E402

# A name with `/` in it: the generated client percent-encodes it (`%2F`), which the
# server reads as the same name.
LOCK = "team-a/python/db/migrate"
ELECTION = "team-a/python/primary"
NAME = "svc/python/payments"


def step(text: str) -> None:
    print(f"python flows: {text}", flush=True)


def ok(response: Response[Any], status: int, model: type) -> Any:
    """The parsed body of a response that must have `status` and be a `model`."""
    assert response.status_code == status and isinstance(response.parsed, model), (
        f"wanted {status} {model.__name__}, got {int(response.status_code)}: "
        f"{response.content.decode(errors='replace')}")
    return response.parsed


def problem(response: Response[Any], status: int, code: str) -> Problem:
    """The typed problem of a response that must be an error with this code."""
    assert response.status_code == status and isinstance(response.parsed, Problem), (
        f"wanted a {status} problem, got {int(response.status_code)}: "
        f"{response.content.decode(errors='replace')}")
    assert response.parsed.code == code, f"wanted code {code}, got {response.parsed.code}"
    assert response.headers["content-type"].startswith("application/problem+json")
    return response.parsed


client = Client(base_url=args.endpoint, raise_on_unexpected_status=True,
                timeout=httpx.Timeout(30.0))


def leases_and_locks() -> None:
    step("create two leases")
    mine = ok(create_lease.sync_detailed(
        client=client, body=CreateLeaseBody(ttl_ms=20000, holder="py-worker")), 201, LeaseCreated)
    other = ok(create_lease.sync_detailed(
        client=client, body=CreateLeaseBody(ttl_ms=20000, holder="py-other")), 201, LeaseCreated)
    assert mine.holder == "py-worker" and mine.ttl_ms == 20000 and mine.lease_id != other.lease_id

    step(f"the other lease acquires {LOCK}")
    first = ok(acquire_lock.sync_detailed(
        LOCK, client=client, body=AcquireBody(lease_id=other.lease_id)), 200, LockGrant)
    assert first.name == LOCK and first.holder == "py-other", first

    step("a second acquire without waiting: 409 lock_held, read as a typed Problem")
    held = problem(acquire_lock.sync_detailed(
        LOCK, client=client, body=AcquireBody(lease_id=mine.lease_id, wait_ms=0)), 409, "lock_held")
    assert held.holder == "py-other" and held.token == first.token, held.to_dict()

    step("acquire with wait_ms while the other holder releases shortly after")
    result: dict[str, Any] = {}

    def wait_for_it() -> None:
        started = time.monotonic()
        result["response"] = acquire_lock.sync_detailed(
            LOCK, client=client,
            body=AcquireBody(lease_id=mine.lease_id, holder="py-waiter", wait_ms=15000))
        result["waited"] = time.monotonic() - started

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    deadline = time.monotonic() + 10
    while True:  # the waiter is in line before the holder lets go
        info = ok(get_lock.sync_detailed(LOCK, client=client), 200, LockInfo)
        if info.waiters == 1:
            assert info.queue == ["py-waiter"] and info.holder == "py-other", info.to_dict()
            break
        assert time.monotonic() < deadline, f"the waiter never queued: {info.to_dict()}"
        time.sleep(0.05)
    time.sleep(0.3)
    released = ok(release_lock.sync_detailed(
        LOCK, client=client, body=HolderBody(lease_id=other.lease_id, token=first.token)),
        200, LockReleased)
    assert released.released
    waiter.join(20)
    assert not waiter.is_alive(), "the waiting acquire never answered"
    response = result["response"]
    grant = ok(response, 200, LockGrant)
    assert result["waited"] >= 0.3, f"granted after {result['waited']:.3f} s: it did not wait"
    assert grant.lease_id == mine.lease_id and grant.holder == "py-waiter", grant
    assert grant.token > first.token, (grant.token, first.token)

    step("the fencing token in the body and in the Baton-Fencing-Token header agree")
    assert int(response.headers["Baton-Fencing-Token"]) == grant.token, response.headers
    assert int(response.headers["Baton-Revision"]) >= grant.revision, response.headers

    step("renew, validate, list, release")
    renewed = ok(renew_lock.sync_detailed(
        LOCK, client=client, body=HolderBody(lease_id=mine.lease_id, token=grant.token)),
        200, LockRenewed)
    assert renewed.token == grant.token and renewed.name == LOCK, renewed
    valid = ok(validate_lock.sync_detailed(
        LOCK, client=client, body=ValidateBody(token=grant.token)), 200, Validation)
    assert valid.valid is True and valid.current_token == grant.token, valid
    stale = ok(validate_lock.sync_detailed(
        LOCK, client=client, body=ValidateBody(token=first.token)), 200, Validation)
    assert stale.valid is False and stale.current_token == grant.token, stale
    page = ok(list_locks.sync_detailed(client=client, prefix="team-a/python/"), 200, LockPage)
    assert [lock.name for lock in page.items] == [LOCK], page.to_dict()
    ok(release_lock.sync_detailed(
        LOCK, client=client, body=HolderBody(lease_id=mine.lease_id, token=grant.token)),
        200, LockReleased)
    after = ok(validate_lock.sync_detailed(
        LOCK, client=client, body=ValidateBody(token=grant.token)), 200, Validation)
    assert after.valid is False, after
    problem(release_lock.sync_detailed(
        LOCK, client=client, body=HolderBody(lease_id=mine.lease_id, token=grant.token)),
        409, "lock_lost")

    for lease in (mine, other):
        ok(revoke_lease.sync_detailed(lease.lease_id, client=client), 200, LeaseRevoked)
    problem(get_lease.sync_detailed(mine.lease_id, client=client), 404, "lease_not_found")


def sse_events(response: httpx.Response) -> Iterator[tuple[str, str, Any]]:
    """(id, event, data) of each Server-Sent Event of a streamed response."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in fields:
                yield fields.get("id", ""), fields.get("event", "message"), json.loads(fields["data"])
            fields = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            fields[key] = fields[key] + "\n" + value if key == "data" and key in fields else value


def elections() -> None:
    step(f"campaign in {ELECTION}")
    alpha = ok(campaign.sync_detailed(ELECTION, client=client, body=CampaignBody(
        candidate="py-alpha", value={"addr": "10.0.0.7:5432"}, ttl_ms=20000)), 200, Elected)
    assert alpha.leader and alpha.value == {"addr": "10.0.0.7:5432"}, alpha
    now = get_election.sync_detailed(ELECTION, client=client)
    info = ok(now, 200, ElectionInfo)
    assert info.leader.candidate == "py-alpha" and info.leader.token == alpha.token, info.to_dict()
    revision = int(now.headers["Baton-Revision"])

    step("another candidate that will not wait: 409 not_elected, the typed Problem names the leader")
    gamma = ok(create_lease.sync_detailed(
        client=client, body=CreateLeaseBody(ttl_ms=20000, holder="py-gamma")), 201, LeaseCreated)
    lost = problem(campaign.sync_detailed(ELECTION, client=client, body=CampaignBody(
        candidate="py-gamma", value=None, lease_id=gamma.lease_id, wait_ms=0)), 409, "not_elected")
    assert lost.leader == "py-alpha", lost.to_dict()
    ok(revoke_lease.sync_detailed(gamma.lease_id, client=client), 200, LeaseRevoked)

    step("observe it over SSE (httpx streaming) from the election's Baton-Revision")
    seen: list[tuple[str, Any]] = []
    observing = threading.Event()
    failure: list[BaseException] = []

    def observe() -> None:
        url = f"{args.endpoint}/v1/elections/{ELECTION.replace('/', '%2F')}:observe"
        try:
            with httpx.stream("GET", url, params={"since": revision, "bookmark_ms": 200},
                              timeout=httpx.Timeout(30.0)) as response:
                assert response.status_code == 200, response.read()
                assert response.headers["content-type"].startswith("text/event-stream")
                observing.set()
                for _, event, data in sse_events(response):
                    if event.startswith("election."):
                        seen.append((event, data))
                    if event == "election.elected" and data.get("candidate") == "py-beta":
                        return
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)
            observing.set()

    observer = threading.Thread(target=observe, daemon=True)
    observer.start()
    assert observing.wait(10) and not failure, failure

    step("a second candidate waits in line; the leader resigns; the stream shows the change")
    result: dict[str, Any] = {}

    def stand() -> None:
        result["response"] = campaign.sync_detailed(ELECTION, client=client, body=CampaignBody(
            candidate="py-beta", value={"addr": "10.0.0.8:5432"}, ttl_ms=20000, wait_ms=15000))

    beta_thread = threading.Thread(target=stand)
    beta_thread.start()
    deadline = time.monotonic() + 10
    while ok(get_election.sync_detailed(ELECTION, client=client), 200, ElectionInfo).candidates < 1:
        assert time.monotonic() < deadline, "the second candidate never queued"
        time.sleep(0.05)
    resigned = ok(resign.sync_detailed(ELECTION, client=client, body=ResignBody(
        lease_id=alpha.lease_id, token=alpha.token)), 200, Resigned)
    assert resigned.resigned
    beta_thread.join(20)
    beta = ok(result["response"], 200, Elected)
    assert beta.token > alpha.token and beta.value == {"addr": "10.0.0.8:5432"}, beta
    observer.join(20)
    assert not observer.is_alive() and not failure, (failure, seen)
    events = [event for event, _ in seen]
    assert events == ["election.resigned", "election.elected"], seen
    assert seen[1][1]["token"] == beta.token and seen[1][1]["value"] == beta.value, seen
    info = ok(get_election.sync_detailed(ELECTION, client=client), 200, ElectionInfo)
    assert info.leader.candidate == "py-beta" and info.leader.token == beta.token, info.to_dict()
    ok(resign.sync_detailed(ELECTION, client=client, body=ResignBody(
        lease_id=beta.lease_id, token=beta.token)), 200, Resigned)


def names() -> None:
    step(f"register {NAME} and look it up")
    lease = ok(create_lease.sync_detailed(
        client=client, body=CreateLeaseBody(ttl_ms=20000, holder="py-payments")), 201, LeaseCreated)
    value = {"addr": "10.0.0.9:8080", "weight": 3}
    registered = ok(register_name.sync_detailed(
        NAME, client=client, body=RegisterBody(value=value, lease_id=lease.lease_id)), 201, Registered)
    assert registered.name == NAME and registered.value == value, registered
    found = ok(get_name.sync_detailed(NAME, client=client), 200, NameInfo)
    assert found.value == value and found.holder == "py-payments", found.to_dict()
    assert found.token == registered.token, found.to_dict()
    taken = problem(register_name.sync_detailed(NAME, client=client, body=RegisterBody(
        value={"addr": "10.0.0.10:8080"}, ttl_ms=5000)), 409, "name_taken")
    assert taken.holder == "py-payments", taken.to_dict()
    ok(revoke_lease.sync_detailed(lease.lease_id, client=client), 200, LeaseRevoked)
    problem(get_name.sync_detailed(NAME, client=client), 404, "not_found")


def idempotency() -> None:
    step("an Idempotency-Key retry: the same key and body answer the same lease and grant")
    key = f"py-{uuid.uuid4()}"
    body = CreateLeaseBody(ttl_ms=20000, holder="py-retry")
    first = create_lease.sync_detailed(client=client, body=body, idempotency_key=key)
    again = create_lease.sync_detailed(client=client, body=body, idempotency_key=key)
    lease, replay = ok(first, 201, LeaseCreated), ok(again, 201, LeaseCreated)
    assert replay.lease_id == lease.lease_id, (lease, replay)
    assert again.headers.get("Idempotent-Replayed") == "true", again.headers
    assert first.headers.get("Idempotent-Replayed") is None, first.headers
    info = ok(get_lease.sync_detailed(lease.lease_id, client=client), 200, LeaseInfo)
    assert info.lease_id == lease.lease_id, info.to_dict()

    acquire_key = f"py-{uuid.uuid4()}"
    grant_body = AcquireBody(lease_id=lease.lease_id)
    grant = ok(acquire_lock.sync_detailed(
        LOCK, client=client, body=grant_body, idempotency_key=acquire_key), 200, LockGrant)
    retried = acquire_lock.sync_detailed(
        LOCK, client=client, body=grant_body, idempotency_key=acquire_key)
    assert ok(retried, 200, LockGrant).token == grant.token, retried.parsed
    assert int(retried.headers["Baton-Fencing-Token"]) == grant.token
    problem(acquire_lock.sync_detailed(
        LOCK, client=client, body=AcquireBody(lease_id=lease.lease_id, wait_ms=1),
        idempotency_key=acquire_key), 422, "idempotency_key_reused")
    ok(revoke_lease.sync_detailed(lease.lease_id, client=client), 200, LeaseRevoked)


leases_and_locks()
elections()
names()
idempotency()
step("all flows passed")
