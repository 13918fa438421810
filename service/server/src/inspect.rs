//! `baton locks|elections|names|leases|watch|cluster` and `baton elect
//! --observe`: one request (or stream) each, printed as a table or as JSON.

use std::process::ExitCode;

use baton_api::force_release::ForceReleaseBody;
use baton_api::leases::CreateLeaseBody;
use baton_api::members::AddMemberBody;
use baton_api::names::RegisterBody;
use serde::Serialize;
use serde_json::Value;

use crate::client::{Client, ClientError, HoldingKind, ListQuery};
use crate::client_cli::{
    report, ClusterAction, ClusterCommand, ElectionsAction, ElectionsCommand, LeasesAction,
    LeasesCommand, ListArgs, LocksAction, LocksCommand, NamesAction, NamesCommand, Output,
    RevokeArgs, WatchCommand,
};
use crate::event_stream::{Event, EventStream};
use crate::table::Table;

/// What a command printed, or why it failed.
type Shown = Result<(), ClientError>;

fn finish(shown: Shown) -> ExitCode {
    match shown {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => report(&error),
    }
}

fn json<T: Serialize>(value: &T) {
    println!("{}", serde_json::to_string(value).unwrap_or_default());
}

fn opt<T: ToString>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// `baton locks ...`.
pub async fn locks(command: LocksCommand) -> ExitCode {
    let output = command.client.output;
    let client = match command.client.client() {
        Ok(client) => client,
        Err(error) => return report(&error),
    };
    finish(match command.action {
        LocksAction::Get { name } => show_lock(&client, &name, output).await,
        LocksAction::List(list) => list_locks(&client, &list, output).await,
        LocksAction::Revoke(revoke) => {
            force_release(&client, HoldingKind::Lock, &revoke, output).await
        }
    })
}

async fn show_lock(client: &Client, name: &str, output: Output) -> Shown {
    let lock = client.get_lock(name).await?;
    match output {
        Output::Json => json(&lock),
        Output::Table => {
            let mut table = Table::new(&[
                "NAME", "HELD", "HOLDER", "TOKEN", "SINCE", "WAITERS", "QUEUE",
            ]);
            table.row(vec![
                lock.name,
                lock.held.to_string(),
                opt(lock.holder),
                opt(lock.token),
                opt(lock.since_revision),
                lock.waiters.to_string(),
                lock.queue.join(","),
            ]);
            print!("{table}");
        }
    }
    Ok(())
}

/// The items of a paged list under `list.prefix`, following `next_page_token`
/// until the last page or `list.limit` items; `fetch` asks for one page.
async fn all_pages<T, F, Fut>(list: &ListArgs, mut fetch: F) -> Result<Vec<T>, ClientError>
where
    F: FnMut(ListQuery) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), ClientError>>,
{
    let mut items = Vec::new();
    let mut query = ListQuery {
        prefix: list.prefix.clone(),
        ..ListQuery::default()
    };
    loop {
        let (page, next) = fetch(query.clone()).await?;
        items.extend(page);
        match next {
            Some(next) if list.limit.is_none_or(|limit| items.len() < limit) => {
                query.page_token = Some(next);
            }
            _ => break,
        }
    }
    items.truncate(list.limit.unwrap_or(usize::MAX));
    Ok(items)
}

async fn list_locks(client: &Client, list: &ListArgs, output: Output) -> Shown {
    let items = all_pages(list, |query| async move {
        let page = client.list_locks(&query).await?;
        Ok((page.items, page.next_page_token))
    })
    .await?;
    match output {
        Output::Json => json(&serde_json::json!({ "items": items })),
        Output::Table => {
            let mut table = Table::new(&["NAME", "HOLDER", "TOKEN", "WAITERS"]);
            for lock in items {
                table.row(vec![
                    lock.name,
                    opt(lock.holder),
                    opt(lock.token),
                    lock.waiters.to_string(),
                ]);
            }
            print!("{table}");
        }
    }
    Ok(())
}

async fn force_release(
    client: &Client,
    kind: HoldingKind,
    revoke: &RevokeArgs,
    output: Output,
) -> Shown {
    let body = ForceReleaseBody {
        token: revoke.token,
    };
    let released = client.force_release(kind, &revoke.name, &body).await?;
    match output {
        Output::Json => json(&released),
        Output::Table => {
            let mut table = Table::new(&["NAME", "TOKEN", "HOLDER"]);
            table.row(vec![
                released.name,
                released.token.to_string(),
                released.holder,
            ]);
            print!("{table}");
        }
    }
    Ok(())
}

/// `baton elections ...`.
pub async fn elections(command: ElectionsCommand) -> ExitCode {
    let output = command.client.output;
    let client = match command.client.client() {
        Ok(client) => client,
        Err(error) => return report(&error),
    };
    finish(match command.action {
        ElectionsAction::Get { name } => {
            async {
                let election = client.get_election(&name).await?;
                match output {
                    Output::Json => json(&election),
                    Output::Table => {
                        let mut table = Table::new(&[
                            "NAME",
                            "LEADER",
                            "TOKEN",
                            "SINCE",
                            "CANDIDATES",
                            "VALUE",
                        ]);
                        table.row(vec![
                            election.name,
                            election.leader.candidate,
                            election.leader.token.to_string(),
                            election.leader.since_revision.to_string(),
                            election.candidates.to_string(),
                            election.leader.value.to_string(),
                        ]);
                        print!("{table}");
                    }
                }
                Ok::<(), ClientError>(())
            }
            .await
        }
        ElectionsAction::Revoke(revoke) => {
            force_release(&client, HoldingKind::Election, &revoke, output).await
        }
    })
}

/// `baton names ...`.
pub async fn names(command: NamesCommand) -> ExitCode {
    let output = command.client.output;
    let client = match command.client.client() {
        Ok(client) => client,
        Err(error) => return report(&error),
    };
    finish(match command.action {
        NamesAction::Get { name } => {
            async {
                let entry = client.get_name(&name).await?;
                match output {
                    Output::Json => json(&entry),
                    Output::Table => {
                        let mut table = Table::new(&["NAME", "HOLDER", "TOKEN", "SINCE", "VALUE"]);
                        table.row(vec![
                            entry.name,
                            entry.holder,
                            entry.token.to_string(),
                            entry.since_revision.to_string(),
                            entry.value.to_string(),
                        ]);
                        print!("{table}");
                    }
                }
                Ok::<(), ClientError>(())
            }
            .await
        }
        NamesAction::List(list) => list_names(&client, &list, output).await,
        NamesAction::Register {
            name,
            value,
            ttl_ms,
        } => {
            async {
                let body = RegisterBody {
                    lease_id: None,
                    ttl_ms,
                    holder: None,
                    value,
                };
                let registered = client.register_name(&name, &body).await?;
                match output {
                    Output::Json => json(&registered),
                    Output::Table => {
                        let mut table = Table::new(&["NAME", "TOKEN", "LEASE", "REVISION"]);
                        table.row(vec![
                            registered.name,
                            registered.token.to_string(),
                            registered.lease_id,
                            registered.revision.to_string(),
                        ]);
                        print!("{table}");
                    }
                }
                Ok::<(), ClientError>(())
            }
            .await
        }
        NamesAction::Revoke(revoke) => {
            force_release(&client, HoldingKind::Name, &revoke, output).await
        }
    })
}

async fn list_names(client: &Client, list: &ListArgs, output: Output) -> Shown {
    let items = all_pages(list, |query| async move {
        let page = client.list_names(&query).await?;
        Ok((page.items, page.next_page_token))
    })
    .await?;
    match output {
        Output::Json => json(&serde_json::json!({ "items": items })),
        Output::Table => {
            let mut table = Table::new(&["NAME", "HOLDER", "TOKEN", "VALUE"]);
            for entry in items {
                table.row(vec![
                    entry.name,
                    entry.holder,
                    entry.token.to_string(),
                    entry.value.to_string(),
                ]);
            }
            print!("{table}");
        }
    }
    Ok(())
}

/// `baton leases ...`.
pub async fn leases(command: LeasesCommand) -> ExitCode {
    let output = command.client.output;
    let client = match command.client.client() {
        Ok(client) => client,
        Err(error) => return report(&error),
    };
    finish(
        async {
            match command.action {
                LeasesAction::Create { ttl_ms, holder } => {
                    let lease = client
                        .create_lease(&CreateLeaseBody { ttl_ms, holder })
                        .await?;
                    match output {
                        Output::Json => json(&lease),
                        Output::Table => {
                            let mut table = Table::new(&["LEASE", "TTL_MS", "HOLDER"]);
                            table.row(vec![lease.lease_id, lease.ttl_ms.to_string(), lease.holder]);
                            print!("{table}");
                        }
                    }
                }
                LeasesAction::Get { lease_id } => {
                    let lease = client.get_lease(&lease_id).await?;
                    match output {
                        Output::Json => json(&lease),
                        Output::Table => {
                            let mut table = Table::new(&[
                                "LEASE",
                                "HOLDER",
                                "TTL_MS",
                                "REMAINING_MS",
                                "LOCKS",
                                "ELECTIONS",
                                "NAMES",
                            ]);
                            table.row(vec![
                                lease.lease_id,
                                lease.holder,
                                lease.ttl_ms.to_string(),
                                lease.remaining_ms.to_string(),
                                lease.locks.join(","),
                                lease.elections.join(","),
                                lease.names.join(","),
                            ]);
                            print!("{table}");
                        }
                    }
                }
                LeasesAction::Keepalive { lease_id } => {
                    let kept = client
                        .keepalive(&lease_id, std::time::Duration::from_secs(10))
                        .await?;
                    match output {
                        Output::Json => json(&kept),
                        Output::Table => {
                            let mut table = Table::new(&["LEASE", "TTL_MS"]);
                            table.row(vec![kept.lease_id, kept.ttl_ms.to_string()]);
                            print!("{table}");
                        }
                    }
                }
                LeasesAction::Revoke { lease_id } => {
                    let revoked = client.revoke_lease(&lease_id).await?;
                    match output {
                        Output::Json => json(&revoked),
                        Output::Table => {
                            let released = &revoked.released;
                            let mut table = Table::new(&["REVOKED", "LOCKS", "ELECTIONS", "NAMES"]);
                            table.row(vec![
                                revoked.revoked.to_string(),
                                released.locks.join(","),
                                released.elections.join(","),
                                released.names.join(","),
                            ]);
                            print!("{table}");
                        }
                    }
                }
            }
            Ok::<(), ClientError>(())
        }
        .await,
    )
}

/// `baton cluster ...`.
pub async fn cluster(command: ClusterCommand) -> ExitCode {
    let output = command.client.output;
    let client = match command.client.client() {
        Ok(client) => client.with_cluster_secret(command.cluster_secret.clone()),
        Err(error) => return report(&error),
    };
    finish(
        async {
            match command.action {
                ClusterAction::Status => {
                    let cluster = client.cluster().await?;
                    match output {
                        Output::Json => json(&cluster),
                        Output::Table => {
                            println!(
                                "cluster {}  node {}  leader {}  term {}  applied {}  commit {}",
                                cluster.cluster_id,
                                cluster.node_id,
                                opt(cluster.leader_id),
                                cluster.term,
                                cluster.applied_revision,
                                cluster.commit_index
                            );
                            let mut table = Table::new(&["ID", "ROLE", "API", "RAFT"]);
                            for member in cluster.members {
                                let role = if Some(member.id) == cluster.leader_id {
                                    "leader"
                                } else if member.voter {
                                    "voter"
                                } else {
                                    "learner"
                                };
                                table.row(vec![
                                    member.id.to_string(),
                                    role.into(),
                                    member.api_addr,
                                    member.raft_addr,
                                ]);
                            }
                            print!("{table}");
                        }
                    }
                }
                ClusterAction::Add {
                    id,
                    api,
                    raft,
                    learner,
                } => {
                    let body = AddMemberBody {
                        id,
                        api_addr: api,
                        raft_addr: raft,
                        voter: !learner,
                    };
                    let changed = client.add_member(&body).await?;
                    show_membership(&changed, output);
                }
                ClusterAction::Remove { id } => {
                    let changed = client.remove_member(id).await?;
                    show_membership(&changed, output);
                }
            }
            Ok::<(), ClientError>(())
        }
        .await,
    )
}

fn show_membership(changed: &baton_api::members::MembershipChanged, output: Output) {
    match output {
        Output::Json => json(changed),
        Output::Table => println!("node {}: {}", changed.id, changed.status),
    }
}

/// `baton watch`: every event until the stream ends or the user interrupts.
pub async fn watch(command: WatchCommand) -> ExitCode {
    let output = command.client.output;
    let client = match command.client.client() {
        Ok(client) => client,
        Err(error) => return report(&error),
    };
    let mut query = Vec::new();
    if let Some(prefix) = command.prefix {
        query.push(("prefix", prefix));
    }
    if let Some(kinds) = command.kinds {
        query.push(("kinds", kinds));
    }
    if let Some(since) = command.since {
        query.push(("since", since.to_string()));
    }
    match client.watch(&query).await {
        Ok(stream) => follow(stream, output, describe_change).await,
        Err(error) => report(&error),
    }
}

/// `baton elect NAME --observe`: the election's leader changes.
pub async fn observe(client: &Client, name: &str, output: Output) -> ExitCode {
    match client.observe(name).await {
        Ok(stream) => follow(stream, output, describe_leader).await,
        Err(error) => report(&error),
    }
}

/// Prints each event (bookmarks only in JSON) until the stream ends, or until
/// SIGINT, SIGTERM or SIGHUP (exit 0: the way to end a watch). The signals are
/// handled, not left to their default action: a process started in the
/// background by a non-interactive shell inherits SIGINT ignored, and such a
/// `baton watch` never ended on Ctrl-C's signal (found by `make test` run from
/// a background job: four CLI tests waited forever).
async fn follow(
    mut stream: EventStream,
    output: Output,
    describe: fn(&Event, &Value) -> String,
) -> ExitCode {
    use std::io::Write;
    let mut signals = match crate::supervisor::Signals::new() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("baton: cannot listen for signals: {error}");
            return ExitCode::FAILURE;
        }
    };
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            _ = signals.any() => return ExitCode::SUCCESS,
        };
        match next {
            Ok(Some(event)) => {
                let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                match output {
                    Output::Json => json(&serde_json::json!({
                        "event": event.event, "id": event.id, "data": data
                    })),
                    Output::Table if event.event == "bookmark" => continue,
                    Output::Table => println!("{}", describe(&event, &data)),
                }
                let _ = std::io::stdout().flush();
            }
            Ok(None) => {
                eprintln!("baton: the server ended the stream");
                return ExitCode::FAILURE;
            }
            Err(error) => {
                eprintln!("baton: the stream broke: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
}

/// `42 lock.acquired team-a/db holder=worker-1 token=42 ttl_ms=15000`.
fn describe_change(event: &Event, data: &Value) -> String {
    let mut line = format!(
        "{} {} {}",
        event.id.as_deref().unwrap_or("-"),
        event.event,
        data["name"].as_str().unwrap_or("")
    );
    if let Some(fields) = data.as_object() {
        for (key, value) in fields {
            if key != "name" && key != "revision" {
                let value = value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_owned);
                line.push_str(&format!(" {key}={value}"));
            }
        }
    }
    line
}

/// `42 leader=db-1 token=42 value={"addr":"10.0.0.7"}` or `43 no leader (resigned)`.
fn describe_leader(event: &Event, data: &Value) -> String {
    let revision = event.id.as_deref().unwrap_or("-");
    match event.event.as_str() {
        "election.elected" => format!(
            "{revision} leader={} token={} value={}",
            data["candidate"].as_str().unwrap_or(""),
            data["token"],
            data["value"]
        ),
        "election.proclaimed" => format!(
            "{revision} proclaimed token={} value={}",
            data["token"], data["value"]
        ),
        "resync" => format!("{revision} resync"),
        other if other.starts_with("election.candidate") => format!("{revision} {other}"),
        other => format!(
            "{revision} no leader ({})",
            data["reason"]
                .as_str()
                .unwrap_or(other.strip_prefix("election.").unwrap_or(other))
        ),
    }
}
