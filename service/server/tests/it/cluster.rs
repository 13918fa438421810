//! Multi-process tests of a replicated Baton: real binaries on loopback ports.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{self, call, eventually, eventually_every, free_port, AuthFile, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_and_every_node_serves_every_request() {
    let cluster = Cluster::start(3, &[]).await;
    // A node the initializer could not reach yet is recorded without its API
    // address and fills it in itself once it hears a leader
    // (`repair_own_address`, within about a second): reading the members
    // right after the start lost that race once in CI.
    let expected: Vec<Value> = cluster.nodes.iter().map(|node| json!(node.api)).collect();
    let members = eventually(Duration::from_secs(20), || async {
        let view = cluster.view(1).await?;
        let members = view["members"].as_array()?.clone();
        let known: Vec<Value> = members.iter().map(|m| m["api_addr"].clone()).collect();
        (known == expected).then_some(members)
    })
    .await
    .expect("every node's API address is known within 20 s");
    assert_eq!(members.len(), 3, "{members:?}");
    let cluster_ids = eventually(Duration::from_secs(20), || async {
        let mut ids = Vec::new();
        for id in 1..=3 {
            let (_, body) = cluster.get(id, "/v1/cluster").await;
            ids.push(body["cluster_id"].as_str()?.to_owned());
        }
        ids.iter().all(|id| !id.is_empty()).then_some(ids)
    })
    .await
    .expect("the cluster gets an id");
    assert!(
        cluster_ids.iter().all(|id| id == &cluster_ids[0]),
        "one id: {cluster_ids:?}"
    );
    for (member, node) in members.iter().zip(&cluster.nodes) {
        assert_eq!(
            member["api_addr"],
            json!(node.api),
            "every node's API is known"
        );
        assert_eq!(member["voter"], json!(true));
    }

    // Writes through each node, including followers (forwarded to the leader).
    let mut tokens = BTreeMap::new();
    let mut last_revision = 0;
    for id in 1..=3 {
        let lease = cluster.lease(id, 10_000).await;
        let (status, body) = cluster
            .post(
                id,
                &format!("/v1/locks/l{id}:acquire"),
                json!({"lease_id": lease}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        tokens.insert(id, body["token"].as_u64().unwrap());
        last_revision = last_revision.max(body["revision"].as_u64().unwrap());
        let (status, body) = cluster
            .call(
                id,
                reqwest::Method::PUT,
                &format!("/v1/names/svc-{id}"),
                Some(json!({"lease_id": lease, "value": {"node": id}})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let all: Vec<u64> = tokens.values().copied().collect();
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "tokens increase: {all:?}"
    );

    // ... are visible on every node: linearizable reads, and local reads once
    // the replica has applied the revision.
    for reader in 1..=3 {
        for (writer, token) in &tokens {
            let (status, body) = cluster.get(reader, &format!("/v1/locks/l{writer}")).await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["token"].as_u64(), Some(*token));
            let path =
                format!("/v1/names/svc-{writer}?consistency=local&min_revision={last_revision}");
            let (status, body) = cluster.get(reader, &path).await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["value"], json!({"node": writer}));
        }
    }

    // A waiting acquire on a follower is woken by a release through another node.
    let leader = cluster.wait_leader(None).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let other = (1..=3).find(|id| *id != leader && *id != follower).unwrap();
    let holder = cluster.lease(leader, 10_000).await;
    let (status, held) = cluster
        .post(
            leader,
            "/v1/locks/handoff:acquire",
            json!({"lease_id": holder}),
        )
        .await;
    assert_eq!(status, 200);
    let waiter = cluster.spawn_post(
        follower,
        "/v1/locks/handoff:acquire",
        json!({"ttl_ms": 10_000, "wait_ms": 20_000}),
    );
    let queued = eventually(Duration::from_secs(20), || async {
        let (_, body) = cluster.get(other, "/v1/locks/handoff").await;
        (body["waiters"].as_u64() == Some(1)).then_some(())
    })
    .await;
    assert!(queued.is_some(), "the follower's request queued");
    let (status, _) = cluster
        .post(
            other,
            "/v1/locks/handoff:release",
            json!({"lease_id": holder, "token": held["token"]}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, granted) = waiter.await.unwrap();
    assert_eq!(status, 200, "{granted}");
    assert!(granted["token"].as_u64() > held["token"].as_u64());

    // Followers measure how long they go between the leader's RPCs (issue 19:
    // snapshots must not stall heartbeats); heartbeats alone keep it counting.
    for id in [follower, other] {
        let gaps = eventually(Duration::from_secs(10), || async {
            let n = cluster
                .metric(id, "baton_raft_leader_contact_gap_seconds_count")
                .await;
            (n > 0.0).then_some(n)
        })
        .await;
        assert!(gaps.is_some(), "follower {id} measured leader contact gaps");
    }
}

/// Per worker: (lock name, token) of every grant it was told about, in order.
type Acknowledged = Vec<(String, u64)>;

/// The failover test's workers.
const WORKERS: usize = 4;

/// The workers' grants as they are acknowledged, per worker.
#[derive(Default)]
struct Progress {
    /// Set once the leader's process is dead.
    killed: AtomicBool,
    /// Grants acknowledged.
    granted: [AtomicUsize; WORKERS],
    /// Grants asked for after the leader's process was dead, replays of an
    /// earlier request excluded: each was made by the new leader.
    after_kill: [AtomicUsize; WORKERS],
}

impl Progress {
    fn after_kill(&self) -> Vec<usize> {
        self.after_kill
            .iter()
            .map(|n| n.load(Ordering::SeqCst))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_loses_no_grant_and_a_restarted_node_catches_up_by_snapshot() {
    const SNAPSHOT_EVERY: u64 = 40;
    let mut cluster = Cluster::start(3, &["--snapshot-every", &SNAPSHOT_EVERY.to_string()]).await;
    let leader = cluster.wait_leader(None).await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();

    // Workers talk to the followers (they survive); each holds a lease kept alive
    // throughout, and takes a new lock per step, keeping every grant.
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Progress::default());
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let client = cluster.client.clone();
        let bases: Vec<String> = followers
            .iter()
            .map(|id| cluster.node(*id).api.clone())
            .collect();
        let stop = stop.clone();
        let progress = progress.clone();
        workers.push(tokio::spawn(async move {
            let base = &bases[w % bases.len()];
            let (status, lease) = call(
                &client,
                base,
                reqwest::Method::POST,
                "/v1/leases",
                Some(json!({"ttl_ms": 4_000})),
            )
            .await;
            assert_eq!(status, 201, "{lease}");
            let lease = lease["lease_id"].as_str().unwrap().to_owned();
            let mut acked: Acknowledged = Vec::new();
            let mut last_keepalive = Instant::now();
            let mut step = 0;
            while !stop.load(Ordering::Relaxed) {
                if last_keepalive.elapsed() > Duration::from_millis(500) {
                    let path = format!("/v1/leases/{lease}:keepalive");
                    let (status, _) = call(&client, base, reqwest::Method::POST, &path, None).await;
                    if status == 200 {
                        last_keepalive = Instant::now();
                    }
                }
                let name = format!("w{w}-{step}");
                let asked_after_kill = progress.killed.load(Ordering::SeqCst);
                // The idempotency key makes a retry after a lost answer exact.
                let response = client
                    .post(format!("{base}/v1/locks/{name}:acquire"))
                    .header("idempotency-key", format!("{lease}-{step}"))
                    .json(&json!({"lease_id": lease}))
                    .send()
                    .await;
                if let Ok(response) = response {
                    if response.status() == 200 {
                        // A replay answers a request sent earlier (perhaps
                        // granted by the old leader), not this one.
                        let replayed = response.headers().contains_key("idempotent-replayed");
                        let body: Value = response.json().await.unwrap();
                        acked.push((name, body["token"].as_u64().unwrap()));
                        step += 1;
                        progress.granted[w].fetch_add(1, Ordering::SeqCst);
                        if asked_after_kill && !replayed {
                            progress.after_kill[w].fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                // Pacing of the load, not a wait: a refused request (while there
                // is no leader) is retried 5 ms later instead of in a tight loop.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (lease, acked)
        }));
    }

    // Every worker holds grants the kill could lose.
    let started = eventually(Duration::from_secs(60), || async {
        let granted = |n: &AtomicUsize| n.load(Ordering::SeqCst) >= 10;
        progress.granted.iter().all(granted).then_some(())
    })
    .await;
    assert!(
        started.is_some(),
        "every worker was granted locks before the kill"
    );
    // The dead node's log ends a few entries (those in flight) past this.
    let (_, view) = cluster.get(leader, "/v1/cluster").await;
    let log_at_kill = view["commit_index"].as_u64().unwrap();
    cluster.kill9(leader);
    progress.killed.store(true, Ordering::SeqCst);
    let killed_at = Instant::now();
    let new_leader = cluster.wait_leader(Some(leader)).await;
    assert!(followers.contains(&new_leader));
    // Counted from its election: a build between the kill and here is left
    // out, which only makes the wait below longer.
    let built_at_kill = cluster
        .metric(new_leader, "baton_snapshots_built_total")
        .await;
    // A grant through the new leader.
    let first_grant = eventually(Duration::from_secs(20), || async {
        let (status, _) = cluster
            .post(
                new_leader,
                "/v1/locks/after-failover:acquire",
                json!({"ttl_ms": 5_000}),
            )
            .await;
        (status == 200).then(|| killed_at.elapsed())
    })
    .await
    .expect("a grant after the failover");
    eprintln!("leader kill -> first grant on the new leader: {first_grant:?}");

    // Enough writes after the kill for the new leader to snapshot and purge past
    // what the dead node has: it snapshots every SNAPSHOT_EVERY entries and keeps
    // as many behind its snapshot, so 5 x SNAPSHOT_EVERY past the dead node's
    // commit index leaves a margin over the entries it had in flight. The
    // snapshots are built on a thread of idle priority, which a loaded machine
    // can leave behind the log: the new leader must also have built four since
    // the kill (each at least SNAPSHOT_EVERY entries after the one before, so
    // the fourth purges past the dead node's log), or the restarted node may
    // still catch up from the log (a clean-clone run saw that once, after test
    // nodes stopped prewriting 120 MiB and restarted ten times faster). And every
    // worker keeps being granted new locks, each asked for after the kill.
    let target = log_at_kill + 5 * SNAPSHOT_EVERY;
    let progressed = eventually(Duration::from_secs(120), || async {
        let view = cluster.view(new_leader).await?;
        let log = view["commit_index"].as_u64()?;
        let leader_api = &cluster.node(new_leader).api;
        let built =
            harness::try_metric(&cluster.client, leader_api, "baton_snapshots_built_total").await?;
        let every_worker = progress.after_kill().iter().all(|n| *n >= 3);
        (log >= target && built >= built_at_kill + 4.0 && every_worker).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut results = Vec::new();
    for worker in workers {
        results.push(worker.await.unwrap());
    }
    // The workers kept their leases alive; from here on this does, until the
    // test ends: the checks below and the restarted node's catch-up can take
    // longer than the 4 s TTL on a loaded machine, and an expired lease would
    // (rightly) release the locks the last check looks for (a clean-clone run
    // failed that way).
    let keepers: Vec<_> = results
        .iter()
        .map(|(lease, _)| cluster.keep_alive_every(new_leader, lease, Duration::from_millis(500)))
        .collect();
    let after_kill = progress.after_kill();
    assert!(
        after_kill.iter().all(|n| *n >= 3),
        "every worker was granted locks it asked for after the kill: {after_kill:?}"
    );
    assert!(
        progressed.is_some(),
        "the new leader's log reached {target} (from {log_at_kill} at the kill), with four snapshots built since"
    );

    let mut all_tokens = Vec::new();
    for (lease, acked) in &results {
        // Tokens of one worker increase (real-time order).
        assert!(acked.windows(2).all(|w| w[0].1 < w[1].1), "{acked:?}");
        // No lease of a live client expired across the failover.
        let (status, body) = cluster
            .get(new_leader, &format!("/v1/leases/{lease}"))
            .await;
        assert_eq!(status, 200, "lease {lease} survived: {body}");
        // Every acknowledged grant is still held, with its token.
        for (name, token) in acked {
            let (status, body) = cluster.get(new_leader, &format!("/v1/locks/{name}")).await;
            assert_eq!(status, 200, "{name}: {body}");
            assert_eq!(body["token"].as_u64(), Some(*token), "{name}: {body}");
            all_tokens.push(*token);
        }
    }
    let unique: std::collections::BTreeSet<_> = all_tokens.iter().collect();
    assert_eq!(unique.len(), all_tokens.len(), "tokens are unique");

    // The killed node comes back and catches up; it is far behind a purged log,
    // so by snapshot.
    cluster.spawn(leader);
    let (_, leader_view) = cluster.get(new_leader, "/v1/cluster").await;
    let target = leader_view["applied_revision"].as_u64().unwrap();
    let caught_up = eventually(Duration::from_secs(60), || async {
        let view = cluster.view(leader).await?;
        (view["applied_revision"].as_u64()? >= target).then_some(())
    })
    .await;
    assert!(
        caught_up.is_some(),
        "the restarted node caught up to {target}"
    );
    assert!(
        cluster.metric(leader, "baton_snapshots_installed").await >= 1.0,
        "the restarted node caught up through a snapshot"
    );
    let (name, token) = results[0].1.last().unwrap().clone();
    let (status, body) = cluster
        .get(leader, &format!("/v1/locks/{name}?consistency=local"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["token"].as_u64(), Some(token), "{name}: {body}");
    for keeper in keepers {
        keeper.stop().await;
    }
}

/// A leader killed and restarted before anyone else was elected used to lead
/// again in the same term (openraft restores a committed vote of its own at
/// once), with the committed index it stored, which lags: it rides on the next
/// append (`CommittedMark`). Its read index in that term was that index, so
/// reads confirmed by a quorum missed the last acknowledged writes until
/// replication caught up. Found by the chaos smoke: stale reads and refused
/// renews from a node after a kill-all. Now it starts as a follower
/// (`stored_leadership`). Here the follower that comes back was paused through
/// the writes, so the old leader could confirm a read with its answer well
/// before that follower caught up and the commit moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_restarted_in_its_term_answers_no_read_without_its_last_write() {
    a_restarted_leaders_reads_show_its_last_write(3).await;
}

/// The same with two voters, where the old leader's log holds every write
/// (each commit needed its disk) but its committed index lags all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_of_two_restarted_in_its_term_answers_no_read_without_its_last_write() {
    a_restarted_leaders_reads_show_its_last_write(2).await;
}

async fn a_restarted_leaders_reads_show_its_last_write(voters: u64) {
    let mut cluster = Cluster::start(voters, &[]).await;
    let leader = cluster.wait_leader(None).await;
    // With three voters, one follower misses every write below (the other
    // takes them and stays down after the kill); two need both.
    let behind = (1..=voters).rfind(|id| *id != leader).unwrap();
    if voters > 2 {
        cluster.pause(behind);
    }
    let lease = cluster.lease(leader, 60_000).await;
    let mut last = None;
    for step in 0..100 {
        let (status, body) = cluster
            .post(
                leader,
                &format!("/v1/locks/step-{step}:acquire"),
                json!({"lease_id": lease}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        last = Some((format!("step-{step}"), body["token"].as_u64().unwrap()));
    }
    let (name, token) = last.unwrap();
    for id in 1..=voters {
        cluster.kill9(id);
    }
    // The old leader comes back first (any third voter stays down): it can
    // confirm its leadership (and commit) only with `behind`, started after
    // the readers below are already asking.
    cluster.spawn(leader);
    let base = cluster.node(leader).api.clone();
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (client, base, path) = (
                cluster.client.clone(),
                base.clone(),
                format!("/v1/locks/{name}"),
            );
            tokio::spawn(async move {
                eventually_every(
                    Duration::from_millis(2),
                    Duration::from_secs(60),
                    || async {
                        let (status, body) =
                            call(&client, &base, reqwest::Method::GET, &path, None).await;
                        (status == 200).then_some(body)
                    },
                )
                .await
            })
        })
        .collect();
    // Its raft listener opens once Raft runs (its API may wait for a leader).
    let raft = format!("127.0.0.1:{}", cluster.node(leader).raft_port);
    let up = eventually(Duration::from_secs(60), || async {
        tokio::net::TcpStream::connect(&raft).await.ok()
    })
    .await;
    assert!(up.is_some(), "the old leader runs again");
    cluster.spawn(behind);
    for reader in readers {
        let body = reader.await.unwrap().expect("a read answered");
        assert_eq!(
            body["token"].as_u64(),
            Some(token),
            "the first read answered after the restart shows the last write: {body}"
        );
    }
}

/// Both followers' flushes commit a write before the leader's own append is
/// on disk (the leader replicates while it syncs, see
/// `a_leader_counts_itself_towards_a_quorum_only_once_its_append_is_on_disk`),
/// so a `kill -9` can take an acknowledged write out of the leader's log while
/// the followers keep it. Were the old leader to come back as the leader of its
/// old term, it would miss that write, and write different entries under the
/// log ids the followers already hold (openraft compares log ids, not
/// contents): the replicas would diverge. Here the write is held back on the
/// leader, every node killed, and the old leader restarted with one follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_only_the_followers_had_on_disk_survives_the_leaders_restart() {
    let mut cluster = Cluster::start(
        3,
        &[
            "--unsafe-leader-append-delay-ms",
            "60000",
            "--propose-timeout-ms",
            "30000",
        ],
    )
    .await;
    let leader = cluster.wait_leader(None).await;
    let (status, body) = cluster
        .post(leader, "/v1/locks/acked:acquire", json!({"ttl_ms": 60_000}))
        .await;
    assert_eq!(status, 200, "{body}");
    let token = body["token"].as_u64().unwrap();
    for id in 1..=3 {
        cluster.kill9(id);
    }
    // They come back without the hold.
    let hold = cluster
        .extra
        .iter()
        .position(|arg| arg == "--unsafe-leader-append-delay-ms")
        .unwrap();
    cluster.extra.drain(hold..hold + 2);
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    cluster.spawn(leader);
    cluster.spawn(follower);
    for id in [leader, follower] {
        let read = eventually(Duration::from_secs(60), || async {
            let (status, body) = cluster.get(id, "/v1/locks/acked").await;
            (status == 200).then_some(body)
        })
        .await
        .expect("a read answered");
        assert_eq!(read["token"].as_u64(), Some(token), "node {id}: {read}");
    }
    // A write after the restart lands on both replicas alike.
    let (status, body) = cluster
        .post(leader, "/v1/locks/after:acquire", json!({"ttl_ms": 60_000}))
        .await;
    assert_eq!(status, 200, "{body}");
    let revision = body["revision"].as_u64().unwrap();
    for id in [leader, follower] {
        let path = format!("/v1/locks/acked?consistency=local&min_revision={revision}");
        let (status, read) = cluster.get(id, &path).await;
        assert_eq!(status, 200, "{read}");
        assert_eq!(read["token"].as_u64(), Some(token), "node {id}: {read}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_node_joins_and_a_member_is_removed() {
    let mut cluster = Cluster::start(3, &[]).await;
    let (status, body) = cluster
        .call(
            1,
            reqwest::Method::PUT,
            "/v1/names/before-join",
            Some(json!({"ttl_ms": 60_000, "value": 1})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let revision = body["revision"].as_u64().unwrap();

    let joiner = cluster.add_joiner(2);
    cluster.spawn(joiner);
    let joined = eventually(Duration::from_secs(60), || async {
        let view = cluster.view(1).await?;
        let members = view["members"].as_array()?;
        let me = members.iter().find(|m| m["id"] == json!(joiner))?;
        (me["voter"] == json!(true)).then_some(())
    })
    .await;
    assert!(joined.is_some(), "node {joiner} became a voter");
    // A voter before it serves: the API listener opens once the node knows its
    // leader, a moment after the leader counts it in (a clean-clone run read
    // it in that moment and was refused the connection).
    cluster.wait_ready(joiner).await;
    let (status, body) = cluster
        .get(
            joiner,
            &format!("/v1/names/before-join?consistency=local&min_revision={revision}"),
        )
        .await;
    assert_eq!(status, 200, "the new node has the state: {body}");

    // Membership changes are admin calls: the cluster secret is required.
    let url = format!("{}/v1/cluster/members/2", cluster.node(1).api);
    let response = cluster.client.delete(&url).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let delete = reqwest::Method::DELETE;
    let (status, body) = cluster
        .admin(1, delete.clone(), "/v1/cluster/members/99", None)
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], json!("member_not_found"));

    let (status, body) = cluster
        .admin(1, delete, "/v1/cluster/members/2", None)
        .await;
    assert_eq!(status, 200, "{body}");
    // The joiner's own view follows once it has applied the change.
    let removed = eventually(Duration::from_secs(20), || async {
        let view = cluster.view(joiner).await?;
        let ids: Vec<u64> = view["members"]
            .as_array()?
            .iter()
            .filter_map(|m| m["id"].as_u64())
            .collect();
        (!ids.contains(&2) && ids.len() == 3).then_some(())
    })
    .await;
    assert!(removed.is_some(), "node 2 left the membership");
    cluster.kill9(2);
    // The remaining three (1, 3, 4) still grant.
    let (status, body) = cluster
        .post(
            joiner,
            "/v1/locks/after-removal:acquire",
            json!({"ttl_ms": 5_000}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_the_others_grants_nothing_and_reads_nothing() {
    let mut cluster = Cluster::start(3, &[]).await;
    let leader = cluster.wait_leader(None).await;
    let lease = cluster.lease(leader, 60_000).await;
    let (status, _) = cluster
        .post(
            leader,
            "/v1/locks/before:acquire",
            json!({"lease_id": lease}),
        )
        .await;
    assert_eq!(status, 200);

    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for id in &followers {
        cluster.pause(*id);
    }
    // The isolated leader can neither grant nor serve a linearizable read.
    let isolated = json!({"lease_id": lease});
    let (status, body, _) = cluster
        .post_keyed(
            leader,
            "/v1/locks/isolated:acquire",
            "isolated",
            isolated.clone(),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], json!("unavailable"));
    let nothing_applied = body["detail"]
        .as_str()
        .is_some_and(|detail| detail.contains("nothing was applied"));
    let (status, body) = cluster.get(leader, "/v1/locks/before").await;
    assert_eq!(status, 503, "{body}");
    let (status, _) = cluster
        .get(leader, "/v1/locks/before?consistency=local")
        .await;
    assert_eq!(status, 200, "a local read is still served, knowingly stale");

    for id in &followers {
        cluster.resume(*id);
    }
    // Healed: new writes go through, whoever leads now.
    let (status, body) = eventually(Duration::from_secs(20), || async {
        let (status, body) = cluster
            .post(leader, "/v1/locks/healed:acquire", json!({"ttl_ms": 5_000}))
            .await;
        (status == 200).then_some((status, body))
    })
    .await
    .expect("writes resume after the partition heals");
    assert_eq!(status, 200, "{body}");
    // The isolated write: its 503 said "may or may not have taken effect" (it
    // was in the isolated leader's log; if that node leads on after the heal,
    // it commits: seen in one run of six), unless it said "nothing was applied".
    // Now that a later write is committed, its fate is settled. What was not
    // acknowledged is resolved exactly once by a retry with the same
    // Idempotency-Key: a replay of the same grant if it took effect, a new grant
    // if it did not.
    let (status, before_retry) = cluster.get(leader, "/v1/locks/isolated").await;
    assert_eq!(status, 200, "{before_retry}");
    let took_effect = before_retry["held"] == json!(true);
    assert!(
        !(took_effect && nothing_applied),
        "a write answered \"nothing was applied\" took effect: {before_retry}"
    );
    let (status, retried, replayed) = cluster
        .post_keyed(leader, "/v1/locks/isolated:acquire", "isolated", isolated)
        .await;
    assert_eq!(status, 200, "{retried}");
    assert_eq!(
        replayed, took_effect,
        "the retry replays the isolated write exactly when it took effect: {before_retry} then {retried}"
    );
    if took_effect {
        assert_eq!(retried["token"], before_retry["token"], "{retried}");
    }
    let (_, after_retry) = cluster.get(leader, "/v1/locks/isolated").await;
    assert_eq!(after_retry["held"], json!(true), "{after_retry}");
    assert_eq!(after_retry["token"], retried["token"], "{after_retry}");
    let (_, held_by) = cluster.get(leader, &format!("/v1/leases/{lease}")).await;
    let locks = held_by["locks"].as_array().unwrap();
    assert!(locks.contains(&json!("isolated")), "{held_by}");

    // A follower cut off from both others answers 503 too.
    let leader = cluster.wait_leader(None).await;
    let lonely = (1..=3).find(|id| *id != leader).unwrap();
    let others: Vec<u64> = (1..=3).filter(|id| *id != lonely).collect();
    for id in &others {
        cluster.pause(*id);
    }
    let (status, body) = cluster
        .post(lonely, "/v1/locks/lonely:acquire", json!({"ttl_ms": 5_000}))
        .await;
    assert_eq!(status, 503, "{body}");
    let (status, _) = cluster.get(lonely, "/v1/locks/before").await;
    assert_eq!(status, 503);
    for id in &others {
        cluster.resume(*id);
    }
}

/// The heartbeat diagnostics end to end (the lines the snapshot-cluster
/// benchmark reads to tell whose delay a gap was): a follower stopped for
/// longer than heartbeats allow says, once it runs again, that it heard nothing
/// from its leader for that long; a stopped leader says it sent its peers
/// nothing. With a 1.5 s election timeout a follower warns after 375 ms; a
/// 600 ms stop is well over that and well short of an election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_logs_the_heartbeat_gap_it_caused() {
    const STOPPED: Duration = Duration::from_millis(600);
    let mut cluster = Cluster::start(
        3,
        &["--log-format", "json", "--election-timeout-ms", "1500"],
    )
    .await;
    let leader = cluster.wait_leader(None).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();

    let gap = stop_and_read_warning(
        &mut cluster,
        follower,
        STOPPED,
        "no RPC from the leader",
        "gap_ms",
        Duration::from_secs(10),
    )
    .await;
    // Its last RPC came before the stop and the next after it.
    let gap = gap.unwrap_or_else(|| {
        panic!(
            "node {follower} did not log a gap of {STOPPED:?}: {:?}",
            cluster.json_log(follower)
        )
    });
    assert_eq!(gap["fields"]["allowed_ms"], json!(375), "{gap}");

    // An append in flight when the leader stops times out once it runs again
    // and restarts the peer's idle clock, so a stop may go unreported: three tries.
    let mut idle = None;
    for _ in 0..3 {
        let leader = cluster.wait_leader(None).await;
        idle = stop_and_read_warning(
            &mut cluster,
            leader,
            STOPPED,
            "the leader sent this peer nothing",
            "idle_ms",
            Duration::from_secs(5),
        )
        .await;
        if idle.is_some() {
            break;
        }
    }
    assert!(
        idle.is_some(),
        "a stopped leader logs the peers it sent nothing"
    );
}

/// Stops node `id` for `stopped`, resumes it and waits up to `within` for a
/// warning logged after the stop whose message starts with `message` and whose
/// `field` (milliseconds) is at least `stopped`. Earlier lines do not count: a
/// loaded machine may have made gaps of its own.
async fn stop_and_read_warning(
    cluster: &mut Cluster,
    id: u64,
    stopped: Duration,
    message: &str,
    field: &str,
    within: Duration,
) -> Option<Value> {
    let before = cluster.json_log(id).len();
    cluster.pause(id);
    tokio::time::sleep(stopped).await;
    cluster.resume(id);
    let at_least = Some(stopped.as_millis() as u64);
    let cluster = &*cluster;
    eventually(within, || async move {
        let log = cluster.json_log(id);
        let found = harness::warnings(&log[before..], message)
            .find(|line| line["fields"][field].as_u64() >= at_least)
            .cloned();
        found
    })
    .await
}

/// Found by the chaos harness (seed 11, 5 nodes): a leader SIGSTOPped long enough
/// to be replaced woke up with every lease overdue on its own clock and proposed
/// their expiry; the proposal was forwarded to the new leader, which applied it,
/// ending a lease it had just kept alive. Expiry is now proposed locally only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_back_from_a_pause_expires_nothing() {
    let mut cluster = Cluster::start(3, &[]).await;
    let old = cluster.wait_leader(None).await;
    let follower = (1..=3).find(|id| *id != old).unwrap();
    let lease = cluster.lease(follower, 2_000).await;
    // Keepalives through the follower every 250 ms.
    let keeper = cluster.keep_alive_every(follower, &lease, Duration::from_millis(250));
    // Longer than an election (a new leader among the others) and than the
    // lease's TTL.
    cluster.pause(old);
    let paused_at = Instant::now();
    let new = cluster.wait_leader(Some(old)).await;
    // Time itself is the fact: the old leader's clock must find the lease overdue
    // (its TTL passed while it was stopped), which no event announces.
    tokio::time::sleep(Duration::from_millis(3_000).saturating_sub(paused_at.elapsed())).await;
    cluster.resume(old);
    // The old leader's lease ticker fires as soon as it runs again, so whatever
    // it decides on its overdue clock it decides before it learns that it no
    // longer leads (after that its ticker decides nothing). Wait until it has
    // learned, then until a write sent through it afterwards is applied by the
    // new leader: a proposal it sent on waking went out before that write.
    let deposed = eventually(Duration::from_secs(30), || async {
        let view = cluster.view(old).await?;
        (view["leader_id"].as_u64()? == new).then_some(())
    })
    .await;
    assert!(deposed.is_some(), "node {old} follows node {new} again");
    // (Acknowledged once the leader applied it; the read below is linearizable.)
    let written = eventually(Duration::from_secs(30), || async {
        let (status, _) = cluster
            .post(
                old,
                "/v1/locks/after-resume:acquire",
                json!({"ttl_ms": 60_000}),
            )
            .await;
        (status == 200).then_some(())
    })
    .await;
    assert!(
        written.is_some(),
        "a write through node {old} once it follows node {new}"
    );
    let (status, body) = cluster.get(new, &format!("/v1/leases/{lease}")).await;
    keeper.stop().await;
    assert_eq!(status, 200, "the kept-alive lease survived: {body}");
}

/// Chaos finding 7 (seed 1 smoke): a leader cut off from the others decided a
/// lease's expiry, but the proposal waited in its proposer behind entries that
/// could not commit. The node stepped down, was elected again, restarted every
/// lease at a full TTL and acknowledged a keepalive; then the stale expiry went
/// into the new term's log and ended the lease it had just vouched for. An
/// expiry now carries the term its clock decided it in, and an entry of another
/// term does not apply it.
///
/// The choreography makes the same node win again: with one follower stopped
/// and the leader holding entries the other lacks, that other can bump the term
/// but not win, and the old leader wins the next election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_expiry_from_before_a_re_election_ends_no_lease() {
    // SIGSTOP cannot cut single links: a resumed node also reads what was sent
    // to it while it was stopped, and may then win the election itself. Such a
    // run did not set the scene; it is tried again on a fresh cluster.
    for _ in 0..5 {
        if stale_expiry_scene().await {
            return;
        }
    }
    panic!("the same node was never elected again in a later term in 5 tries");
}

/// One try of the scene above: false when it could not be set (another node
/// won, or no new term began); panics if the acknowledged lease was lost.
async fn stale_expiry_scene() -> bool {
    // A propose timeout longer than the whole dance, so the queued expiry is
    // still waiting for a place when node 1 leads again.
    let mut cluster = Cluster::start(3, &["--propose-timeout-ms", "20000"]).await;
    let leader = cluster.wait_leader(None).await;
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (bumper, sleeper) = (others[0], others[1]);
    let lease = cluster.lease(leader, 2_000).await;
    let created = Instant::now();
    let term_of = |view: Option<Value>| view.and_then(|v| v["term"].as_u64());
    let first_term = term_of(cluster.view(leader).await).expect("the leader's term");

    // Cut the leader off; writes fill its proposer's two places in flight and
    // queue behind them.
    cluster.pause(bumper);
    cluster.pause(sleeper);
    // Apart in time, so that they are several entries, not one batch, even on
    // a loaded machine.
    let mut stuck = Vec::new();
    for n in 0..4 {
        stuck.push(cluster.spawn_post(
            leader,
            &format!("/v1/locks/stuck-{n}:acquire"),
            json!({"ttl_ms": 60_000}),
        ));
        // Choreography (kept as written): spacing in time is what makes them
        // separate entries; no fact says "the previous one was proposed".
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(
        created.elapsed() < Duration::from_millis(1_500),
        "the places in flight were full well before the lease's deadline"
    );
    // Past the lease's TTL and a few ticks: the leader's clock decides the
    // expiry, and the proposal queues behind the stuck entries. (Time is the
    // fact: the isolated leader's clock must pass the TTL; nothing observable.)
    tokio::time::sleep(Duration::from_millis(2_500).saturating_sub(created.elapsed())).await;

    // Node `bumper` campaigns alone while the leader is stopped: the term rises,
    // nobody wins.
    cluster.pause(leader);
    cluster.resume(bumper);
    // Wait until it has campaigned: without a higher term, the resumed leader
    // would simply go on leading in its old term, commit the queued expiry
    // there (rightly: nobody kept the lease alive) and the test would prove
    // nothing. That once made it fail 1 run in 4 on a loaded machine.
    let bumped = harness::eventually(Duration::from_secs(20), || async {
        term_of(cluster.view(bumper).await).filter(|term| *term > first_term)
    })
    .await;
    if bumped.is_none() {
        return false;
    }
    cluster.resume(leader);
    let again = cluster.wait_leader(None).await;
    let new_term = term_of(cluster.view(leader).await).unwrap_or_default();
    if again != leader || new_term <= first_term {
        return false;
    }

    // The new term restarted the lease at a full TTL. Keep it alive through the
    // leader every 200 ms, each call in its own task, until the stuck entries
    // have been answered (committed with the new term, or timed out) and the
    // queued expiry has had its chance.
    let keeper = cluster.keep_alive_every(leader, &lease, Duration::from_millis(200));
    let acknowledged = eventually(Duration::from_secs(20), || async {
        keeper
            .answers()
            .iter()
            .any(|(status, _)| *status == 200)
            .then_some(())
    })
    .await;
    assert!(
        acknowledged.is_some(),
        "a keepalive is acknowledged in the new term: {:?}",
        keeper.answers()
    );
    for task in stuck {
        let _ = task.await;
    }
    // Choreography (kept as written): keepalives go on while the queued expiry
    // has its chance; a regression shows as a 404 among them.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let answers = keeper.stop().await;
    let (status, body) = cluster.get(leader, &format!("/v1/leases/{lease}")).await;
    assert_eq!(status, 200, "the acknowledged lease is still there: {body}");
    let first_ok = answers
        .iter()
        .position(|(status, _)| *status == 200)
        .unwrap();
    let later: Vec<u16> = answers[first_ok..]
        .iter()
        .map(|(status, _)| *status)
        .collect();
    assert!(
        !later.contains(&404),
        "no keepalive after the first acknowledgement finds the lease gone: {later:?}"
    );
    cluster.resume(sleeper);
    true
}

/// Graceful shutdown of a leader hands leadership over first: by the time its
/// process has exited, the others already follow a new leader (without a
/// hand-over they would keep the dead one for a lease and an election timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_with_sigterm_hands_over_before_it_exits() {
    let mut cluster = Cluster::start(3, &[]).await;
    let leader = cluster.wait_leader(None).await;
    let (status, before) = cluster
        .post(
            leader,
            "/v1/locks/before-handover:acquire",
            json!({"ttl_ms": 60_000}),
        )
        .await;
    assert_eq!(status, 200, "{before}");
    let pid = cluster.node(leader).child.as_ref().unwrap().id();
    harness::signal(pid, "TERM");
    let child = cluster.nodes[(leader - 1) as usize].child.as_mut().unwrap();
    let exited = harness::exited(child, Duration::from_secs(30)).await;
    let status = exited.expect("the old leader exits after SIGTERM");
    assert!(status.success(), "clean exit: {status:?}");
    let mut views = Vec::new();
    for id in (1..=3).filter(|id| *id != leader) {
        views.push(cluster.view(id).await.and_then(|v| v["leader_id"].as_u64()));
    }
    assert!(
        views.iter().any(|l| l.is_some_and(|l| l != leader)),
        "a new leader was in place when the old one exited: {views:?}"
    );
    cluster.nodes[(leader - 1) as usize].child = None;
    let new = cluster.wait_leader(Some(leader)).await;
    let (status, body) = cluster.get(new, "/v1/locks/before-handover").await;
    assert_eq!(status, 200);
    assert_eq!(body["token"], before["token"], "{body}");
}

/// Issue 5: a follower serves watches from its own replica, and sees exactly the
/// sequence the leader does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_on_a_follower_see_the_same_sequence_as_on_the_leader() {
    let cluster = Cluster::start(3, &[]).await;
    let leader = cluster.wait_leader(None).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    // A scripted workload through every node: leases, locks with a hand-off,
    // an election, a name, a revoke.
    for id in 1..=3 {
        let lease = cluster.lease(id, 30_000).await;
        let (_, held) = cluster
            .post(
                id,
                "/v1/locks/shared:acquire",
                json!({"lease_id": lease, "wait_ms": 5_000}),
            )
            .await;
        let (status, _) = cluster
            .post(
                id,
                "/v1/locks/shared:release",
                json!({"lease_id": lease, "token": held["token"]}),
            )
            .await;
        assert_eq!(status, 200);
        let (_, body) = cluster
            .post(
                id,
                "/v1/elections/boss:campaign",
                json!({"lease_id": lease, "candidate": format!("n{id}"), "value": id}),
            )
            .await;
        let _ = body;
        let (status, _) = cluster
            .call(
                id,
                reqwest::Method::PUT,
                &format!("/v1/names/n{id}"),
                Some(json!({"lease_id": lease, "value": id})),
            )
            .await;
        assert_eq!(status, 201);
        let (status, body) = cluster
            .call(
                id,
                reqwest::Method::DELETE,
                &format!("/v1/leases/{lease}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // Every write was applied by the leader before it was acknowledged (a
    // follower's own view may lag behind, and once cut the stream short here).
    let (_, view) = cluster.get(leader, "/v1/cluster").await;
    let last = view["applied_revision"].as_u64().unwrap();
    let mut streams = Vec::new();
    for id in [leader, follower] {
        let url = format!("{}/v1/watch?since=0", cluster.node(id).api);
        let mut response = cluster.client.get(&url).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let frames = harness::sse_frames(&mut response, Some(last)).await;
        streams.push(
            frames
                .into_iter()
                .filter(|frame| frame.1 != "bookmark")
                .collect::<Vec<_>>(),
        );
    }
    assert!(
        streams[0].len() > 20,
        "the workload produced events: {:?}",
        streams[0]
    );
    let ids: Vec<u64> = streams[0].iter().map(|f| f.0).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in revision order");
    assert_eq!(streams[0], streams[1], "leader and follower agree");
}

/// Found by the chaos harness (seeds 1 and 11): a wait that timed out while the
/// leader was unreachable answered 409, but its cancel never reached the log, so
/// the waiter stayed queued and was granted the lock later, to nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_times_out_during_a_leader_change_really_leaves_the_queue() {
    let mut cluster = Cluster::start(3, &[]).await;
    let leader = cluster.wait_leader(None).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let holder = cluster.lease(leader, 60_000).await;
    let (status, held) = cluster
        .post(
            leader,
            "/v1/locks/contested:acquire",
            json!({"lease_id": holder}),
        )
        .await;
    assert_eq!(status, 200);
    let sent = Instant::now();
    let waiter = cluster.spawn_post(
        follower,
        "/v1/locks/contested:acquire",
        json!({"ttl_ms": 60_000, "wait_ms": 1_500}),
    );
    let queued = eventually(Duration::from_secs(20), || async {
        let (_, body) = cluster.get(leader, "/v1/locks/contested").await;
        (body["waiters"].as_u64() == Some(1)).then_some(())
    })
    .await;
    assert!(queued.is_some(), "the follower's request queued");
    // The leader stops just before the wait times out: the cancel meets a
    // leader that cannot answer, then a new one. (Time is the fact here: the
    // wait's own 1.5 s timer, which announces nothing before it fires.)
    tokio::time::sleep(Duration::from_millis(1_300).saturating_sub(sent.elapsed())).await;
    cluster.pause(leader);
    // The others elect a new leader, and the follower's cancel, retried until
    // it is applied, reaches it: only then does the wait answer.
    cluster.wait_leader(Some(leader)).await;
    let (status, body) = waiter.await.unwrap();
    assert_eq!(status, 409, "the wait timed out and left the queue: {body}");
    cluster.resume(leader);

    let now_leader = cluster.wait_leader(None).await;
    let (status, _) = cluster
        .post(
            now_leader,
            "/v1/locks/contested:release",
            json!({"lease_id": holder, "token": held["token"]}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, body) = cluster.get(now_leader, "/v1/locks/contested").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["held"],
        json!(false),
        "nobody was granted the lock: {body}"
    );
    assert_eq!(body["waiters"], json!(0), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_mode_forwards_everything_and_survives_a_leader_change() {
    let mut cluster = Cluster::start(3, &[]).await;
    let targets = cluster
        .nodes
        .iter()
        .map(|n| n.api.clone())
        .collect::<Vec<_>>()
        .join(",");
    let port = free_port();
    let mut proxy = std::process::Command::new(harness::baton_bin())
        .args([
            "serve",
            "--proxy",
            &targets,
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .env("BATON_LOG", "warn")
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = cluster.client.clone();
    let up = eventually(Duration::from_secs(20), || async {
        let (status, body) = call(&client, &base, reqwest::Method::GET, "/healthz", None).await;
        (status == 200 && body["mode"] == json!("proxy")).then_some(())
    })
    .await;
    assert!(up.is_some(), "the proxy serves");

    let (status, lease) = call(
        &client,
        &base,
        reqwest::Method::POST,
        "/v1/leases",
        Some(json!({"ttl_ms": 10_000})),
    )
    .await;
    assert_eq!(status, 201, "{lease}");
    let (status, via_proxy) = call(
        &client,
        &base,
        reqwest::Method::POST,
        "/v1/locks/via-proxy:acquire",
        Some(json!({"lease_id": lease["lease_id"]})),
    )
    .await;
    assert_eq!(status, 200, "{via_proxy}");
    assert!(via_proxy["token"].is_u64(), "{via_proxy}");
    let (status, body) = call(&client, &base, reqwest::Method::GET, "/v1/nope", None).await;
    assert_eq!(status, 404, "errors pass through unchanged: {body}");
    assert_eq!(body["code"], json!("route_not_found"));

    let leader = cluster.wait_leader(None).await;
    cluster.kill9(leader);
    let granted = eventually(Duration::from_secs(30), || async {
        let (status, body) = call(
            &client,
            &base,
            reqwest::Method::POST,
            "/v1/locks/after-leader-change:acquire",
            Some(json!({"ttl_ms": 5_000})),
        )
        .await;
        (status == 200).then_some(body)
    })
    .await;
    assert!(
        granted.is_some(),
        "the proxy keeps working after the leader died"
    );
    let (status, body) = call(
        &client,
        &base,
        reqwest::Method::GET,
        "/v1/locks/via-proxy",
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["token"], via_proxy["token"], "{body}");
    let _ = proxy.kill();
    let _ = proxy.wait();
}

/// Failover timing: leader kill -> first successful grant, median over 10
/// trials. A measurement, not an assertion; run it with
/// `cargo nextest run --workspace --run-ignored only -E 'test(failover_timing)' --no-capture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run explicitly"]
async fn failover_timing() {
    // Production timing: the defaults (100 ms heartbeats, 500 ms election timeout).
    let mut cluster = Cluster::start(
        3,
        &["--heartbeat-ms", "100", "--election-timeout-ms", "500"],
    )
    .await;
    let mut samples = Vec::new();
    for trial in 0..10 {
        let leader = cluster.wait_leader(None).await;
        let asker = (1..=3).find(|id| *id != leader).unwrap();
        cluster.kill9(leader);
        let killed = Instant::now();
        let elapsed = eventually(Duration::from_secs(60), || async {
            let (status, _) = cluster
                .post(
                    asker,
                    &format!("/v1/locks/trial-{trial}:acquire"),
                    json!({"ttl_ms": 5_000}),
                )
                .await;
            (status == 200).then(|| killed.elapsed())
        })
        .await
        .expect("a grant after failover");
        samples.push(elapsed);
        cluster.spawn(leader);
        cluster.wait_ready(leader).await;
    }
    samples.sort();
    eprintln!("failover samples: {samples:?}");
    eprintln!(
        "median leader kill -> first grant: {:?}",
        samples[samples.len() / 2]
    );
}

/// `POST /v1/cluster/members` to node 1 as admin.
async fn add_member(cluster: &Cluster, body: Value) -> (u16, Value) {
    let post = reqwest::Method::POST;
    cluster
        .admin(1, post, "/v1/cluster/members", Some(body))
        .await
}

/// Fuzzing (issue 16) found membership requests that stopped every later write (a
/// voter that cannot be reached) or changed the leader's own addresses. Each is
/// now a 4xx that changes nothing, and writes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_requests_that_would_break_the_cluster_are_refused() {
    let cluster = Cluster::start(1, &[]).await;
    let before = cluster.view(1).await.unwrap()["members"].clone();

    let (status, body) = add_member(
        &cluster,
        json!({"id": 0, "api_addr": "http://127.0.0.1:1", "raft_addr": "http://127.0.0.1:2"}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], json!("invalid_body"));

    // Nothing listens there: this node used to become a voter, and with two voters
    // of which one is gone, no write could commit again.
    let closed = free_port();
    let (status, body) = add_member(
        &cluster,
        json!({"id": 7, "api_addr": format!("http://127.0.0.1:{closed}"),
               "raft_addr": format!("http://127.0.0.1:{closed}")}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], json!("membership_refused"));
    assert!(
        body["detail"].as_str().unwrap().contains("does not answer"),
        "{body}"
    );

    // The leader's own addresses come from its flags, not from a request.
    let (status, body) = add_member(
        &cluster,
        json!({"id": 1, "api_addr": "http://127.0.0.1:29999", "raft_addr": "http://127.0.0.1:29998"}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], json!("membership_refused"));

    // Schemathesis (issue 16): a new id with the leader's own addresses passed
    // the reachability check (the leader answered it) and made openraft panic,
    // ending the process with code 70. The answering node must be the one added.
    let own = cluster.node(1);
    for voter in [true, false] {
        let (status, body) = add_member(
            &cluster,
            json!({"id": 2, "voter": voter, "api_addr": own.api,
                   "raft_addr": format!("http://127.0.0.1:{}", own.raft_port)}),
        )
        .await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["code"], json!("membership_refused"));
        assert!(
            body["detail"].as_str().unwrap().contains("is node 1"),
            "{body}"
        );
    }

    assert_eq!(cluster.view(1).await.unwrap()["members"], before);
    let (status, body) = cluster
        .post(
            1,
            "/v1/locks/after-refused-members:acquire",
            json!({"ttl_ms": 5000}),
        )
        .await;
    assert_eq!(status, 200, "writes go on: {body}");
}

/// Whether an acquire of lock `name` through node `via` is granted within 60 s
/// (retried while the cluster settles).
async fn granted_through(cluster: &Cluster, via: u64, name: &str) -> bool {
    let path = format!("/v1/locks/{name}:acquire");
    let granted = eventually(Duration::from_secs(60), || {
        let path = path.clone();
        async move {
            let (status, _) = cluster.post(via, &path, json!({})).await;
            (status == 200).then_some(())
        }
    })
    .await;
    granted.is_some()
}

/// `GET /raft/status` on node `id`'s peer listener with `secret`: the status code.
async fn peer_status_with(cluster: &Cluster, id: u64, secret: &str) -> u16 {
    let url = format!(
        "http://127.0.0.1:{}/raft/status",
        cluster.node(id).raft_port
    );
    cluster
        .client
        .get(url)
        .header("baton-cluster-secret", secret)
        .send()
        .await
        .map(|response| response.status().as_u16())
        .unwrap_or(0)
}

/// The peer listener (hyper on the node's runtime since session 49) answers
/// whatever is not a peer request with a 4xx, never a dropped connection, and
/// every answer under `/raft` behind the secret names the node's log version,
/// a refusal too. After all of it, the node still serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_listener_answers_what_is_not_a_peer_request_with_a_4xx() {
    use reqwest::Method;
    let cluster = Cluster::start(1, &[]).await;
    let base = format!("http://127.0.0.1:{}", cluster.node(1).raft_port);
    let version = baton_core::LOG_VERSION.to_string();
    let ours = Some(harness::SECRET);
    // A stale vote (term 0), refused whatever the node's state; padded past
    // 256 KiB, the body is parsed on the blocking pool instead of the runtime.
    let vote =
        r#"{"vote":{"leader_id":{"term":0,"node_id":9},"committed":false},"last_log_id":null}"#;
    let padded_vote = " ".repeat(300 << 10) + vote;
    let large_garbage = "x".repeat(300 << 10);
    let cases: Vec<(Method, &str, Option<&str>, &str, u16)> = vec![
        (Method::POST, "/raft/append", None, "{}", 401),
        (Method::POST, "/raft/append", Some("wrong"), "{}", 401),
        (Method::POST, "/raft/append", ours, "{not json", 400),
        (Method::POST, "/raft/vote", ours, "[]", 400),
        (Method::POST, "/raft/vote", ours, &large_garbage, 400),
        (Method::POST, "/raft/vote", ours, vote, 200),
        (Method::POST, "/raft/vote", ours, &padded_vote, 200),
        (Method::GET, "/raft/append", ours, "", 405),
        (Method::PUT, "/raft/leader", ours, "", 405),
        (Method::POST, "/raft/status", ours, "", 405),
        (Method::GET, "/raft/nothing", ours, "", 404),
        (Method::GET, "/v1/locks", ours, "", 404),
        (Method::GET, "/raft/status", ours, "", 200),
    ];
    for (method, path, secret, body, expected) in cases {
        let mut request = cluster
            .client
            .request(method.clone(), format!("{base}{path}"))
            .body(body.to_owned());
        if let Some(secret) = secret {
            request = request.header("baton-cluster-secret", secret);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|error| panic!("{method} {path}: no answer: {error}"));
        let status = response.status().as_u16();
        let named = response
            .headers()
            .get("baton-log-version")
            .map(|value| value.to_str().unwrap().to_owned());
        let allow = response
            .headers()
            .get("allow")
            .map(|value| value.to_str().unwrap().to_owned());
        let text = response.text().await.unwrap();
        assert_eq!(status, expected, "{method} {path}: {text}");
        // A 405 names the one method the path answers (RFC 9110, 15.5.6).
        let only = if path == "/raft/status" {
            "GET"
        } else {
            "POST"
        };
        assert_eq!(
            allow,
            (status == 405).then(|| only.to_owned()),
            "{method} {path}"
        );
        let behind_secret = secret == ours && path.starts_with("/raft/");
        assert_eq!(
            named,
            behind_secret.then(|| version.clone()),
            "{method} {path}"
        );
        if status == 200 {
            let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
            match path {
                "/raft/vote" => assert_eq!(answer["Ok"]["vote_granted"], json!(false), "{answer}"),
                _ => assert_eq!(answer["node_id"], json!(1), "{answer}"),
            }
        }
    }
    // A declared length over the 128 MiB limit is refused before the body is
    // sent (before, the listener waited for all of it, and the answer came only
    // after 128 MiB had been read).
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", cluster.node(1).raft_port))
        .await
        .unwrap();
    let head = format!(
        "POST /raft/append HTTP/1.1\r\nhost: peer\r\nbaton-cluster-secret: {}\r\n\
         content-length: {}\r\n\r\n{{",
        harness::SECRET,
        (128u64 << 20) + 1
    );
    tokio::io::AsyncWriteExt::write_all(&mut stream, head.as_bytes())
        .await
        .unwrap();
    let mut answer = vec![0; 512];
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read(&mut stream, &mut answer),
    )
    .await
    .expect("no answer to an oversized peer request before its body was sent")
    .unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let (code, body) = cluster
        .post(1, "/v1/locks/after-bad-peer-requests:acquire", json!({}))
        .await;
    assert_eq!(code, 200, "{body}");
}

/// A leader with two appends in flight (`--max-inflight-appends 2`, the
/// default) sends the second on another connection, so a follower can get it
/// before the first. The follower holds it until the first is in its log and
/// takes both; handed to Raft at once, the second was refused as a conflict
/// (`wait_for_the_append_ahead` in peer_server.rs; without the wait this test
/// fails on the second answer). An append far beyond the log is a leader
/// probing, and is refused at once; one just past it whose predecessor never
/// comes is refused after the wait. `/metrics` counts both holds.
///
/// The first append makes node 9 a second voter: a lone voter that follows
/// someone else calls an election at its next Raft tick (every 75 ms here), and
/// the later appends then met a higher term (`HigherVote`, in about half the
/// runs, session 55). With two voters node 1 waits out the leader lease and an
/// election timeout (1.5 s at least) first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_two_appends_that_arrive_in_the_wrong_order() {
    // Heartbeats of 2 s: an append is held half of one (1 s) for the one ahead
    // of it. In clean-clone CI runs (this test among the first, while other
    // tests' nodes start and prewrite their logs) node 1 took longer than 25 ms
    // and then 250 ms to take the first append (its vote and two entries,
    // synced), and the hold was counted given up.
    let cluster = Cluster::start(
        1,
        &["--heartbeat-ms", "2000", "--election-timeout-ms", "20000"],
    )
    .await;
    let (_, info) = cluster.get(1, "/v1/cluster").await;
    let term = info["term"].as_u64().expect("term");
    let last = info["commit_index"].as_u64().expect("commit index");
    let me = &info["members"][0];
    let url = format!("http://127.0.0.1:{}/raft/append", cluster.node(1).raft_port);
    // A leader of a later term: node 1 follows it on its first append.
    let leader = json!({"term": term + 1000, "node_id": 9});
    let two_voters = json!({"Membership": {
        "configs": [[1, 9]],
        "nodes": {
            "1": {"api_addr": me["api_addr"], "raft_addr": me["raft_addr"]},
            "9": {"api_addr": "http://127.0.0.1:9", "raft_addr": "http://127.0.0.1:9"},
        },
    }});
    let append = |prev: Value, first: u64, count: u64| {
        let entries: Vec<Value> = (first..first + count)
            .map(|index| {
                let payload = if index == last + 1 {
                    two_voters.clone()
                } else {
                    json!("Blank")
                };
                json!({"log_id": {"leader_id": leader, "index": index}, "payload": payload})
            })
            .collect();
        json!({
            "vote": {"leader_id": leader, "committed": true},
            "prev_log_id": prev,
            "leader_commit": null,
            "entries": entries,
        })
    };
    let send = |body: Value| {
        let request = cluster
            .client
            .post(&url)
            .header("baton-cluster-secret", harness::SECRET)
            .json(&body);
        async move {
            let response = request.send().await.expect("an answer");
            response.json::<Value>().await.expect("a JSON answer")
        }
    };
    let ahead = append(
        json!({"leader_id": {"term": term, "node_id": 1}, "index": last}),
        last + 1,
        2,
    );
    let behind = append(json!({"leader_id": leader, "index": last + 2}), last + 3, 1);

    let second = tokio::spawn(send(behind));
    // Let the second one reach the node and wait there first.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let first = send(ahead).await;
    let second = second.await.expect("the second append");
    assert_eq!(first, json!({"Ok": "Success"}));
    assert_eq!(
        second,
        json!({"Ok": "Success"}),
        "the second, arrived first"
    );

    let probe = append(
        json!({"leader_id": leader, "index": last + 1000}),
        last + 1001,
        1,
    );
    assert_eq!(send(probe).await, json!({"Ok": "Conflict"}));

    // One just past the log whose predecessor never comes: held for half a
    // heartbeat, then refused.
    let orphan = append(json!({"leader_id": leader, "index": last + 4}), last + 5, 1);
    assert_eq!(send(orphan).await, json!({"Ok": "Conflict"}));

    let metrics = cluster
        .client
        .get(format!("{}/metrics", cluster.node(1).api))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    for (outcome, count) in [("in_order", 1), ("given_up", 1)] {
        let line = format!("baton_raft_appends_ahead_total{{outcome=\"{outcome}\"}} {count}");
        assert!(
            metrics.lines().any(|l| l == line),
            "no `{line}` in:\n{metrics}"
        );
    }
}

/// Issue 16: the cluster secret is rotated by three rolling restarts (accept the
/// new one, send the new one, forget the old one), and after every single
/// restart the cluster still takes writes through every node: no step leaves
/// two members that refuse each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_secret_rotates_by_rolling_restarts_without_an_outage() {
    const NEW: &str = "the-next-cluster-secret-0123456789";
    let old = harness::SECRET;
    let mut cluster = Cluster::start(3, &[]).await;
    for id in 1..=3 {
        assert_eq!(peer_status_with(&cluster, id, old).await, 200);
        assert_eq!(peer_status_with(&cluster, id, NEW).await, 401, "node {id}");
    }
    let steps: [&[&str]; 3] = [
        &["--cluster-secret", old, "--accept-cluster-secret", NEW],
        &["--cluster-secret", NEW, "--accept-cluster-secret", old],
        &["--cluster-secret", NEW],
    ];
    let membership: Vec<Vec<String>> = cluster
        .nodes
        .iter()
        .map(|n| n.membership_args.clone())
        .collect();
    let mut writes = 0;
    for (step, secrets) in steps.iter().enumerate() {
        for id in 1..=3u64 {
            cluster.kill9(id);
            let node = &mut cluster.nodes[(id - 1) as usize];
            node.membership_args = membership[(id - 1) as usize].clone();
            node.membership_args
                .extend(secrets.iter().map(|s| s.to_string()));
            cluster.spawn(id);
            cluster.wait_ready(id).await;
            // Every node takes a write: appends from the leader, calls from
            // followers to the leader, all with the mix of settings now running.
            for via in 1..=3 {
                writes += 1;
                let granted = granted_through(&cluster, via, &format!("rotation/{writes}")).await;
                assert!(
                    granted,
                    "step {step}, node {id} restarted: no write through node {via}"
                );
            }
        }
    }
    for id in 1..=3 {
        assert_eq!(peer_status_with(&cluster, id, NEW).await, 200);
        assert_eq!(peer_status_with(&cluster, id, old).await, 401, "node {id}");
    }
}

/// An https client trusting `ca`, presenting `identity` (certificate, key) when given.
fn https_client(ca: &std::path::Path, identity: Option<(&str, &str)>) -> reqwest::Client {
    let certs = ca.parent().unwrap();
    let identity = identity.map(|(cert, key)| (certs.join(cert), certs.join(key)));
    let tls = baton_raft::client_config_trusting(
        ca,
        identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
    )
    .unwrap();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Issue 16: TLS on both listeners; peers verify each other's certificates in
/// both directions (on top of the cluster secret), and every node still serves
/// every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_https_and_peers_prove_who_they_are() {
    let cluster = Cluster::start_tls(3, &[]).await;
    let certs = cluster.certs.clone().unwrap();
    // Every node takes writes: leader appends, follower-to-leader calls and
    // the answers all cross TLS.
    for via in 1..=3 {
        let granted = granted_through(&cluster, via, &format!("tls/{via}")).await;
        assert!(granted, "no write through node {via}");
    }
    let api = cluster.node(1).api.clone();
    assert!(api.starts_with("https://"));
    // Plain HTTP on the TLS port gets no answer; neither does a client that
    // does not trust the cluster's CA.
    let plain = api.replace("https://", "http://");
    let answer = reqwest::get(format!("{plain}/healthz")).await;
    assert!(
        answer.as_ref().map_or(true, |r| !r.status().is_success()),
        "{answer:?}"
    );
    let other = tempfile::tempdir().unwrap();
    let stranger = harness::write_certs(other.path());
    let untrusting = https_client(&stranger.join("ca.crt"), None);
    assert!(untrusting
        .get(format!("{api}/healthz"))
        .send()
        .await
        .is_err());
    // The peer port requires a certificate from the peer CA, even with the
    // right secret.
    let raft = format!(
        "https://127.0.0.1:{}/raft/status",
        cluster.node(1).raft_port
    );
    let anonymous = https_client(&certs.join("ca.crt"), None);
    let refused = anonymous
        .get(&raft)
        .header("baton-cluster-secret", harness::SECRET)
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let peer = https_client(&certs.join("ca.crt"), Some(("node.crt", "node.key")));
    let status = peer
        .get(&raft)
        .header("baton-cluster-secret", harness::SECRET)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
}

/// Issue 16: a client certificate from `--tls-client-ca` stands for the
/// principal whose `certificates` name it, with that principal's rights. The
/// certificate reaches the handlers through the connection hook, which both
/// ways of serving the API call (`--http-workers`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_its_principal_with_the_api_on_the_runtime() {
    a_client_certificate_is_its_principal(harness::API_ON_RUNTIME).await;
}

/// [`a_client_certificate_is_its_principal_with_the_api_on_the_runtime`], served by HTTP workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_its_principal_with_http_workers() {
    a_client_certificate_is_its_principal(harness::API_ON_WORKERS).await;
}

async fn a_client_certificate_is_its_principal(api_mode: &[&str]) {
    let auth = AuthFile::new(
        "principals:\n  - name: billing\n    role: client\n    certificates: [\"billing.client\"]\n    locks: [\"billing/\"]\n",
    );
    let extra = [&["--auth-file", auth.arg.as_str()][..], api_mode].concat();
    let cluster = Cluster::start_tls(1, &extra).await;
    let certs = cluster.certs.clone().unwrap();
    let api = cluster.node(1).api.clone();
    let billing = https_client(
        &certs.join("ca.crt"),
        Some(("billing.client.crt", "billing.client.key")),
    );
    let acquire = |client: &reqwest::Client, name: &str| {
        client
            .post(format!("{api}/v1/locks/{name}:acquire"))
            .json(&json!({}))
            .send()
    };
    let granted = acquire(&billing, "billing/nightly").await.unwrap();
    assert_eq!(granted.status(), 200);
    let forbidden = acquire(&billing, "payroll/run").await.unwrap();
    assert_eq!(forbidden.status(), 403);
    // The node certificate is valid (same CA) but names no principal: 401, as
    // is no certificate and no token.
    let node_cert = https_client(&certs.join("ca.crt"), Some(("node.crt", "node.key")));
    assert_eq!(
        acquire(&node_cert, "billing/x").await.unwrap().status(),
        401
    );
    let nobody = https_client(&certs.join("ca.crt"), None);
    assert_eq!(acquire(&nobody, "billing/x").await.unwrap().status(), 401);
}

/// Issue 16: renewed certificate files are served without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_certificates_are_served_without_a_restart() {
    let cluster = Cluster::start_tls(1, &[]).await;
    let certs = cluster.certs.clone().unwrap();
    let url = format!("{}/healthz", cluster.node(1).api);
    let old_ca = https_client(&certs.join("ca.crt"), None);
    assert!(old_ca.get(&url).send().await.is_ok());
    // A new CA and node certificate replace the files in place (as a
    // Kubernetes Secret update does).
    let renewal = tempfile::tempdir().unwrap();
    let renewed = harness::write_certs(renewal.path());
    let old_ca_file = renewal.path().join("old-ca.crt");
    std::fs::copy(certs.join("ca.crt"), &old_ca_file).unwrap();
    for file in ["node.crt", "node.key", "ca.crt"] {
        std::fs::copy(renewed.join(file), certs.join(format!("{file}.new"))).unwrap();
        std::fs::rename(certs.join(format!("{file}.new")), certs.join(file)).unwrap();
    }
    let new_ca = https_client(&renewed.join("ca.crt"), None);
    let served = eventually(Duration::from_secs(30), || {
        let (new_ca, url) = (&new_ca, &url);
        async move { new_ca.get(url).send().await.ok().map(|_| ()) }
    })
    .await;
    assert!(served.is_some(), "the renewed certificate was never served");
    // A new connection (the old client's pooled one predates the renewal).
    let old_ca = https_client(&old_ca_file, None);
    assert!(
        old_ca.get(&url).send().await.is_err(),
        "the old certificate is no longer served"
    );
}

/// Waiters of lock `busy` on node 1.
async fn waiters(cluster: &Cluster) -> u64 {
    let (_, body) = cluster.get(1, "/v1/locks/busy").await;
    body["waiters"].as_u64().unwrap_or(0)
}

/// Issue 16: a TLS client that queues for a lock, then says close_notify and
/// hangs up, leaves the queue at once (the close_notify bytes in front of the
/// FIN must not hide the hang-up until `wait_ms` runs out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_that_hangs_up_while_waiting_leaves_the_queue_with_the_api_on_the_runtime() {
    a_tls_client_that_hangs_up_while_waiting_leaves_the_queue(harness::API_ON_RUNTIME).await;
}

/// The same served by HTTP workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_that_hangs_up_while_waiting_leaves_the_queue_with_http_workers() {
    a_tls_client_that_hangs_up_while_waiting_leaves_the_queue(harness::API_ON_WORKERS).await;
}

async fn a_tls_client_that_hangs_up_while_waiting_leaves_the_queue(api_mode: &[&str]) {
    use std::io::Write;
    let cluster = Cluster::start_tls(1, api_mode).await;
    let certs = cluster.certs.clone().unwrap();
    let (status, _) = cluster
        .post(1, "/v1/locks/busy:acquire", json!({"ttl_ms": 60_000}))
        .await;
    assert_eq!(status, 200);
    let port = cluster.node(1).api_port;
    let ca = certs.join("ca.crt");
    let (hang_up, hang_up_now) = std::sync::mpsc::channel::<()>();
    let client = std::thread::spawn(move || {
        let config = Arc::new(baton_raft::client_config_trusting(&ca, None).unwrap());
        let server = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let connection = rustls::ClientConnection::new(config, server).unwrap();
        let socket = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut tls = rustls::StreamOwned::new(connection, socket);
        let body = r#"{"wait_ms": 60000}"#;
        write!(
            tls,
            "POST /v1/locks/busy:acquire HTTP/1.1\r\nhost: baton\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        tls.flush().unwrap();
        hang_up_now.recv().unwrap();
        tls.conn.send_close_notify();
        tls.flush().unwrap();
        tls.sock.shutdown(std::net::Shutdown::Write).unwrap();
        // Keep the socket until the test is done looking.
        let _ = hang_up_now.recv();
    });
    let queued = eventually(Duration::from_secs(20), || async {
        (waiters(&cluster).await == 1).then_some(())
    })
    .await;
    assert!(queued.is_some(), "the TLS client never queued");
    hang_up.send(()).unwrap();
    // It asked to wait 60 s; only the hang-up can end its wait this soon.
    let left = eventually(Duration::from_secs(20), || async {
        (waiters(&cluster).await == 0).then_some(())
    })
    .await;
    drop(hang_up);
    client.join().unwrap();
    assert!(left.is_some(), "the waiter stayed after its client hung up");
}

/// Issue 16: with TLS, client certificates and auth on, a node joins: its join
/// call presents the node certificate, which names no principal, and the
/// cluster secret it also carries is what admits it. An admin identified by
/// its client certificate sees it become a voter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_a_tls_cluster_with_auth_on() {
    let auth = AuthFile::new(
        "principals:\n  - name: ops\n    role: admin\n    certificates: [\"billing.client\"]\n",
    );
    let mut cluster = Cluster::start_tls(3, &["--auth-file", &auth.arg]).await;
    let certs = cluster.certs.clone().unwrap();
    let admin = https_client(
        &certs.join("ca.crt"),
        Some(("billing.client.crt", "billing.client.key")),
    );
    let joiner = cluster.add_joiner(2);
    cluster.spawn(joiner);
    let url = format!("{}/v1/cluster", cluster.node(1).api);
    let joined = eventually(Duration::from_secs(60), || {
        let (admin, url) = (&admin, &url);
        async move {
            let view: Value = admin.get(url).send().await.ok()?.json().await.ok()?;
            let members = view["members"].as_array()?;
            let me = members.iter().find(|m| m["id"] == json!(joiner))?;
            (me["voter"] == json!(true)).then_some(())
        }
    })
    .await;
    assert!(joined.is_some(), "node {joiner} never became a voter");
}

/// A keepalive writes no log entry, so the serving replica judges who owns the
/// lease. A follower that has not applied the lease's creation yet must catch up
/// before it judges: before session 40 it found no owner, let another
/// principal's token through and forwarded the keepalive, which the leader
/// granted (the chart suite's auth test saw a 200 under load). The follower is
/// stopped while the lease is created and the keepalive is sent to it then, so it
/// reads the request as soon as it runs again, before the leader's next append.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_the_lease_still_refuses_another_principals_keepalive() {
    const OPS: &str = "ops-token-0123456789abcdef";
    const BILLING: &str = "billing-token-0123456789abc";
    let auth = AuthFile::new(&format!(
        "principals:\n  - name: ops\n    role: admin\n    tokens: [\"{}\"]\n  - name: billing\n    role: client\n    tokens: [\"{}\"]\n    locks: [\"billing/\"]\n",
        baton_api::auth::hash_token(OPS),
        baton_api::auth::hash_token(BILLING)
    ));
    let mut cluster = Cluster::start(3, &["--auth-file", &auth.arg]).await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/cluster", cluster.node(1).api);
    let leader = eventually(Duration::from_secs(30), || {
        let (client, url) = (&client, &url);
        async move {
            let view: Value = client
                .get(url)
                .bearer_auth(OPS)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            view["leader_id"].as_u64()
        }
    })
    .await
    .expect("no leader");
    let behind = (1..=3).find(|id| *id != leader).unwrap();
    for round in 0..3 {
        cluster.pause(behind);
        let created = client
            .post(format!("{}/v1/leases", cluster.node(leader).api))
            .bearer_auth(BILLING)
            .json(&json!({"ttl_ms": 60_000}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status().as_u16(), 201, "round {round}");
        let lease: Value = created.json().await.unwrap();
        let lease_id = lease["lease_id"].as_str().unwrap().to_owned();
        let keepalive = client
            .post(format!(
                "{}/v1/leases/{lease_id}:keepalive",
                cluster.node(behind).api
            ))
            .bearer_auth(OPS)
            .json(&json!({}))
            .timeout(Duration::from_secs(20))
            .send();
        let answer = tokio::spawn(keepalive);
        tokio::time::sleep(Duration::from_millis(200)).await;
        cluster.resume(behind);
        let answer = answer.await.unwrap().unwrap();
        let status = answer.status().as_u16();
        let problem: Value = answer.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (status, problem["code"].clone()),
            (403, json!("forbidden")),
            "round {round}: {problem}"
        );
    }
}

/// What node `id`'s peer listener says its log version is (`baton-log-version`
/// on `GET /raft/status`).
async fn advertised_log_version(cluster: &Cluster, id: u64) -> Option<String> {
    let url = format!(
        "http://127.0.0.1:{}/raft/status",
        cluster.node(id).raft_port
    );
    let response = cluster
        .client
        .get(url)
        .header("baton-cluster-secret", harness::SECRET)
        .send()
        .await
        .ok()?;
    let header = response.headers().get("baton-log-version")?;
    Some(header.to_str().ok()?.to_owned())
}

/// The leader's `baton_cluster_log_version`, once the cluster agrees on a
/// leader that shows it and it equals `wanted`.
async fn leader_sees_log_version(cluster: &Cluster, wanted: f64) -> bool {
    eventually(Duration::from_secs(20), || async {
        let leader = cluster.view(1).await?["leader_id"].as_u64()?;
        let base = &cluster.node(leader).api;
        let seen = harness::try_metric(&cluster.client, base, "baton_cluster_log_version").await?;
        (seen == wanted).then_some(())
    })
    .await
    .is_some()
}

/// Expires three one-second leases created through the leader and waits until
/// every node has applied their expiry.
async fn three_leases_expire_everywhere(cluster: &Cluster) {
    let leader = cluster.wait_leader(None).await;
    let mut leases = Vec::new();
    for _ in 0..3 {
        leases.push(cluster.lease(leader, 1_000).await);
    }
    for id in 1..=3 {
        for lease in &leases {
            let gone = eventually(Duration::from_secs(15), || async {
                let (status, _) = cluster.get(id, &format!("/v1/leases/{lease}")).await;
                (status == 404).then_some(())
            })
            .await;
            assert!(gone.is_some(), "node {id} still has lease {lease}");
        }
    }
}

/// A rolling upgrade half done: one member says it runs log version 0 (what a
/// build before `ExpireLeasesOfTerm` answers, without the header). The leader
/// sees it at its next heartbeat and expires leases one per command, which
/// every build can parse; once the member says it runs this build's version,
/// expiries are batched again. (The choice of command itself is
/// `node::tests::expiries_are_batched_only_when_every_member_decodes_the_batch`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_of_an_older_log_version_holds_the_leader_to_commands_it_decodes() {
    let mut cluster = Cluster::start(3, &[]).await;
    let current = baton_core::LOG_VERSION.to_string();
    assert_eq!(advertised_log_version(&cluster, 3).await, Some(current));
    assert!(
        leader_sees_log_version(&cluster, f64::from(baton_core::LOG_VERSION)).await,
        "a cluster of this build runs its version"
    );

    cluster.kill9(3);
    cluster.nodes[2]
        .membership_args
        .extend(["--log-version".to_owned(), "0".to_owned()]);
    cluster.spawn(3);
    cluster.wait_ready(3).await;
    assert_eq!(advertised_log_version(&cluster, 3).await, Some("0".into()));
    assert!(
        leader_sees_log_version(&cluster, 0.0).await,
        "the leader heard node 3 say 0"
    );
    three_leases_expire_everywhere(&cluster).await;

    cluster.kill9(3);
    let args = &mut cluster.nodes[2].membership_args;
    args.truncate(args.len() - 2);
    cluster.spawn(3);
    cluster.wait_ready(3).await;
    assert!(
        leader_sees_log_version(&cluster, f64::from(baton_core::LOG_VERSION)).await,
        "node 3 upgraded: the cluster runs this build's version again"
    );
    three_leases_expire_everywhere(&cluster).await;
}

/// The patched openraft core (vendor/openraft) sends a leader's entries to the
/// followers while its own append syncs. It must still count the leader
/// towards a quorum only once that append is on disk: with one follower gone,
/// a write needs the leader's own flush, which the flag holds back 4 s. A
/// leader that counted itself at submission would commit in milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_counts_itself_towards_a_quorum_only_once_its_append_is_on_disk() {
    const HOLD: Duration = Duration::from_secs(4);
    let mut cluster = Cluster::start(
        3,
        &[
            "--unsafe-leader-append-delay-ms",
            "4000",
            "--propose-timeout-ms",
            "30000",
        ],
    )
    .await;
    let leader = cluster.wait_leader(None).await;
    // Both followers up: their two flushes commit the write without the
    // leader's, still held (the overlap itself is measured in BENCHMARKS.md).
    cluster.lease(leader, 60_000).await;

    let follower = (1..=3).find(|id| *id != leader).unwrap();
    cluster.kill9(follower);
    let started = Instant::now();
    cluster.lease(leader, 60_000).await;
    let took = started.elapsed();
    assert!(
        took >= HOLD,
        "a write committed after {took:?}, before the leader's own append \
         (held {HOLD:?}) was on disk, with only one follower up (or the leader's \
         appends no longer take the un-awaited path the hold applies to)"
    );
    assert_eq!(
        cluster.wait_leader(None).await,
        leader,
        "no election meanwhile"
    );
}

/// The patched replication stream (vendor/openraft) holds a commit back
/// `--commit-heartbeat-delay-us` for entries to carry it. When none follow, it
/// must still send the commit on its own: with heartbeats 15 s apart, a
/// follower that applies a lone write within 5 s heard it from that message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_no_entry_follows_still_reaches_the_followers() {
    let cluster = Cluster::start(
        3,
        &[
            "--heartbeat-ms",
            "10000",
            "--election-timeout-ms",
            "30000",
            "--commit-heartbeat-delay-us",
            "1000",
        ],
    )
    .await;
    let leader = cluster.wait_leader(None).await;
    let (status, body) = cluster
        .call(
            leader,
            reqwest::Method::PUT,
            "/v1/names/lone-write",
            Some(json!({"ttl_ms": 60_000, "value": 1})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let revision = body["revision"].as_u64().unwrap();
    for follower in (1..=3).filter(|id| *id != leader) {
        let applied = eventually(Duration::from_secs(5), || async {
            let view = cluster.view(follower).await?;
            (view["applied_revision"].as_u64()? >= revision).then_some(())
        })
        .await;
        assert!(
            applied.is_some(),
            "node {follower} did not apply revision {revision} within 5 s: \
             the commit waited for a periodic heartbeat"
        );
    }
}
