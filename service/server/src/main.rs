//! `baton`: the server binary.
//!
//! This file wires `baton serve` (the node, the peer and API listeners, signals, the
//! leader's hand-over on SIGTERM, proxy mode) and dispatches the other subcommands.
//!
//! ## Modules
//!
//! - `api_on_runtime`: the client API served on the runtime's own thread (`--http-workers 0`).
//! - `cli`: the command line and environment: every flag, its checks, and the node
//!   configuration built from them.
//! - `telemetry`: log lines (`--log-format`) and the OTLP trace exporter (`OTEL_*`).
//! - `otlp_transport`: how the exporter reaches its collector (https roots, client certificate, timeout).
//! - `proxy`: `baton serve --proxy`, a stateless sidecar that forwards to the leader.
//! - `dev_cluster`: `baton dev cluster`, a local cluster in one command.
//! - `dev_certs`: `baton dev certs`, a throw-away CA and certificates for trying TLS.
//! - `auth_cli`: `baton auth`, making tokens and the digests an auth file stores.
//! - `probe`: `baton probe URL`, a health check that needs no shell and no curl.
//! - `client`: the typed HTTP client of the client commands, on the API crate's types.
//! - `client_cli`: the client commands' shared arguments, exit codes and error reports.
//! - `supervisor`: `baton lock` and `baton elect`: run a command only while the holding lasts.
//! - `inspect`: `baton locks|elections|names|leases|watch|cluster`, one request each.
//! - `event_stream`: reading a `text/event-stream` answer event by event.
//! - `table`: aligned text tables for the human-readable output.

mod api_on_runtime;
mod auth_cli;
mod cli;
mod client;
mod client_cli;
mod dev_certs;
mod dev_cluster;
mod event_stream;
mod http_timeouts;
mod inspect;
mod open_files;
mod otlp_transport;
mod probe;
mod proxy;
mod supervisor;
mod table;
mod telemetry;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{web, App, HttpServer};
use anyhow::Context;
use baton_api::{configure, on_connect, openapi_json, ApiState};
use baton_raft::{client_config_trusting, IdlePoll, Node, PeerServer, Tls};
use clap::Parser;

use crate::api_on_runtime::ApiOnRuntime;
use crate::cli::{Cli, Command, DevCommand, ServeArgs};
use crate::proxy::Proxy;
use crate::supervisor::Target;

/// Every allocation of the server goes through mimalloc rather than glibc's
/// malloc (why: `Cargo.toml` and ARCHITECTURE.md, "Memory allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Installs logging and, when the `OTEL_*` variables ask for it, the trace
/// exporter; an unsupported `OTEL_*` value fails the start.
fn init_telemetry(args: &ServeArgs) -> anyhow::Result<telemetry::Telemetry> {
    let traces =
        telemetry::trace_settings(|name| std::env::var(name).ok()).map_err(anyhow::Error::msg)?;
    let (instance, node_id) = match (&args.proxy, args.resolved_node_id()) {
        (Some(_), _) => (format!("proxy-{}", args.listen), None),
        (None, Ok(id)) => (format!("node-{id}"), Some(id)),
        (None, Err(_)) => ("node".to_owned(), None),
    };
    telemetry::init(args.log_format, traces, &instance, node_id)
}

async fn serve(
    args: ServeArgs,
    idle_poll: Arc<IdlePoll>,
    api_on_runtime: bool,
) -> anyhow::Result<()> {
    open_files::raise_and_report();
    if let Some(targets) = args.proxy.clone() {
        return serve_proxy(&args, &targets).await;
    }
    let node_id = args.resolved_node_id().map_err(anyhow::Error::msg)?;
    let tls = load_tls(&args)?;
    // Before anything listens: a node whose auth file is broken must not serve
    // without it.
    let auth = match &args.auth_file {
        Some(path) => {
            let auth = std::sync::Arc::new(baton_api::auth::Authenticator::load(path)?);
            tokio::spawn(auth.clone().reload_on_change(Duration::from_secs(2)));
            tracing::info!(path = %path.display(), principals = auth.policy().principals.len(), "auth is on");
            Some(auth)
        }
        None => {
            tracing::warn!("no --auth-file: anyone who reaches the API port may use every lock, lease and name");
            None
        }
    };
    // Bind the peer listener first: with port 0 its address is known only now,
    // and the node advertises it.
    let raft_listener = std::net::TcpListener::bind(&args.raft_listen)
        .with_context(|| format!("binding the raft listener {}", args.raft_listen))?;
    let raft_url = args.advertise_raft.clone().unwrap_or(format!(
        "{}://{}",
        args.scheme(),
        raft_listener.local_addr()?
    ));
    let mut config = args
        .node_config(node_id, raft_url.clone())
        .map_err(anyhow::Error::msg)?;
    config.tls = tls.clone();
    config.idle_poll = idle_poll;
    let clustered = !config.peers.is_empty() || config.join.is_some();
    if config.cluster_secret.is_none() && clustered {
        tracing::warn!(
            "no --cluster-secret: anyone who reaches the raft listener can act as a peer"
        );
    }
    if clustered {
        match &tls {
            None if config.cluster_secret.is_some() && !args.insecure_plaintext_peers => {
                anyhow::bail!(
                    "the cluster secret would cross the network in clear text: set --tls-cert, \
                     --tls-key and --tls-peer-ca, or --insecure-plaintext-peers on a network you trust"
                );
            }
            Some(tls) if tls.files().peer_ca.is_none() => {
                anyhow::bail!(
                    "TLS on a cluster needs --tls-peer-ca: peers verify each other against it"
                );
            }
            Some(_) => {
                // The secret would go out before a TLS listener refused it.
                let plain = config
                    .peers
                    .values()
                    .chain(config.join.iter())
                    .find(|url| !url.starts_with("https://"));
                if let Some(url) = plain {
                    anyhow::bail!(
                        "with TLS on, every peer and --join URL must be https://, got {url}"
                    );
                }
            }
            None => {}
        }
    }
    if args.unsafe_no_fsync {
        tracing::warn!("--unsafe-no-fsync: the log skips its write-ahead log, so a crash loses acknowledged writes; for the fault harness's negative control only");
    }
    let node = Node::start(config).await.context("starting the node")?;
    let peer_tls = tls
        .as_ref()
        .map(|tls| tls.peer_server_config())
        .transpose()?;
    let peers = PeerServer::start(raft_listener, node.clone(), peer_tls)
        .context("serving the raft listener")?;
    if !node.wait_until_leader_known(Duration::from_secs(10)).await {
        tracing::warn!("no leader yet; serving anyway (requests answer 503 until one is elected)");
    }
    let state = ApiState {
        node: node.clone(),
        settings: args.api_settings(),
        auth: auth.clone(),
        rate_limiter: Default::default(),
        metrics: Default::default(),
    };
    tracing::info!(
        http_workers = if api_on_runtime { 0 } else { workers(&args) },
        runtime_threads = tokio::runtime::Handle::current().metrics().num_workers(),
        idle_poll_us = args.idle_poll_us,
        "threads"
    );
    if api_on_runtime {
        let server_config = tls
            .as_ref()
            .map(|tls| tls.api_server_config())
            .transpose()?;
        let api = ApiOnRuntime::bind(
            &args.listen,
            state,
            server_config,
            Duration::from_secs(args.shutdown_timeout_s),
        )
        .await?;
        tokio::spawn(stop_on_signal(
            ApiStop::OnRuntime(api.stop_handle()),
            node.clone(),
        ));
        tracing::info!(node_id, listen = %args.listen, raft = %raft_url, data_dir = %args.data_dir.display(), api_on_runtime = true, "baton is serving");
        api.run().await;
    } else {
        let server = HttpServer::new(move || App::new().configure(configure(state.clone())))
            .on_connect(on_connect)
            .keep_alive(http_timeouts::KEEP_ALIVE)
            .client_request_timeout(http_timeouts::REQUEST_HEAD_TIMEOUT)
            .workers(workers(&args))
            .shutdown_timeout(args.shutdown_timeout_s)
            // Signals are handled below: watch streams never finish by themselves,
            // so they are ended before actix waits for in-flight responses.
            .disable_signals();
        let server = match &tls {
            Some(tls) => server.bind_rustls_0_23(&args.listen, tls.api_server_config()?),
            None => server.bind(&args.listen),
        }
        .with_context(|| format!("binding {}", args.listen))?
        .run();
        tokio::spawn(stop_on_signal(
            ApiStop::Workers(server.handle()),
            node.clone(),
        ));
        tracing::info!(node_id, listen = %args.listen, raft = %raft_url, data_dir = %args.data_dir.display(), "baton is serving");
        // On SIGTERM the API stops accepting and lets in-flight requests finish;
        // the peer listener stays up meanwhile so their entries can still commit.
        server.await.context("http server")?;
    }
    // A leader hands over first, so the cluster has a new leader before we exit.
    node.hand_over_leadership().await;
    tracing::info!("stopping raft");
    node.shutdown().await;
    peers.stop().await;
    tracing::info!("stopped");
    Ok(())
}

/// The TLS material of `--tls-*`, reloaded when its files change; `None`
/// without `--tls-cert`.
fn load_tls(args: &ServeArgs) -> anyhow::Result<Option<Arc<Tls>>> {
    let Some(files) = args.tls_files() else {
        return Ok(None);
    };
    let tls = Tls::load(files)?;
    tokio::spawn(tls.clone().reload_on_change(Duration::from_secs(2)));
    tracing::info!(
        client_certificates = tls.files().client_ca.is_some(),
        peer_verification = tls.files().peer_ca.is_some(),
        "TLS is on"
    );
    Ok(Some(tls))
}

fn workers(args: &ServeArgs) -> usize {
    args.http_workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

async fn serve_proxy(args: &ServeArgs, targets: &str) -> anyhow::Result<()> {
    let tls = load_tls(args)?;
    // The cluster is reached over https when its CA is given; the proxy then
    // presents its own certificate, if it has one, to clusters that ask.
    let upstream_tls = match &args.tls_peer_ca {
        Some(ca) => Some(client_config_trusting(
            ca,
            args.tls_cert.as_deref().zip(args.tls_key.as_deref()),
        )?),
        None => None,
    };
    let proxy = Proxy::new(targets, upstream_tls).context("building the proxy's HTTP client")?;
    tokio::spawn(proxy.clone().discover(Duration::from_secs(2)));
    let data = web::Data::from(proxy);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/healthz", web::get().to(proxy::healthz))
            .default_service(web::to(proxy::forward))
    })
    .on_connect(on_connect)
    .keep_alive(http_timeouts::KEEP_ALIVE)
    .client_request_timeout(http_timeouts::REQUEST_HEAD_TIMEOUT)
    .workers(workers(args))
    .shutdown_timeout(args.shutdown_timeout_s);
    let server = match &tls {
        Some(tls) => server.bind_rustls_0_23(&args.listen, tls.api_server_config()?),
        None => server.bind(&args.listen),
    }
    .with_context(|| format!("binding {}", args.listen))?
    .run();
    tracing::info!(listen = %args.listen, cluster = %targets, "baton proxy is serving");
    server.await.context("http server")?;
    Ok(())
}

/// A panic anywhere (openraft's core task included) ends the process: a node
/// with a dead Raft task would stay up but never serve again, while an exit
/// lets the supervisor restart it from its durable state.
fn exit_on_panic() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        eprintln!("baton: exiting after a panic (exit code 70)");
        std::process::exit(70);
    }));
}

/// How the client API is stopped: actix's workers, or the loop on the runtime.
enum ApiStop {
    Workers(actix_web::dev::ServerHandle),
    OnRuntime(api_on_runtime::StopHandle),
}

/// On SIGTERM or SIGINT: end every watch stream (each gets a final `resync`
/// event), then stop accepting and let in-flight requests finish.
async fn stop_on_signal(api: ApiStop, node: std::sync::Arc<Node>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = match signal(SignalKind::terminate()) {
        Ok(terminate) => terminate,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM");
            return;
        }
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("stopping: ending watch streams, finishing in-flight requests");
    node.watch_hub().close();
    match api {
        ApiStop::Workers(server) => server.stop(true).await,
        ApiStop::OnRuntime(stop) => stop.stop(),
    }
}

/// `baton lock` / `baton elect NAME -- CMD`.
async fn hold(
    options: client_cli::ClientOptions,
    args: client_cli::HoldArgs,
    target: Target,
) -> ExitCode {
    if target != Target::Election && args.value.is_some() {
        eprintln!("baton: --value is for elections (baton elect)");
        return ExitCode::from(2);
    }
    if matches!(target, Target::Semaphore { .. }) && args.lock_delay_ms.is_some() {
        eprintln!("baton: --lock-delay-ms is for locks (semaphores have no lock delay)");
        return ExitCode::from(2);
    }
    match options.client() {
        Ok(client) => supervisor::run(client, target, args, options.output).await,
        Err(error) => client_cli::report(&error),
    }
}

fn main() -> anyhow::Result<ExitCode> {
    exit_on_panic();
    let cli = Cli::parse();
    // Before the runtime is built: a thread count of 0 would reach tokio's or
    // actix's assertions and end in a panic rather than a usage error.
    if let Command::Serve(args) = &cli.command {
        args.validate().map_err(anyhow::Error::msg)?;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let tokio_env_set = std::env::var_os("TOKIO_WORKER_THREADS").is_some();
    let api_on_runtime =
        matches!(&cli.command, Command::Serve(args) if args.api_on_runtime(cores, tokio_env_set));
    let idle_poll = Arc::new(match &cli.command {
        Command::Serve(args) => IdlePoll::new(args.idle_poll()),
        _ => IdlePoll::default(),
    });
    let runtime = runtime(&cli, &idle_poll, api_on_runtime, cores, tokio_env_set)?;
    // The API's connections, when on the runtime, are actix services, which are
    // not `Send`: they are spawned on this set, which runs on the runtime's thread.
    let local = tokio::task::LocalSet::new();
    runtime.block_on(local.run_until(run(cli, idle_poll, api_on_runtime)))
}

/// The runtime. With the client API on it (`api_on_runtime`), a current-thread
/// runtime: one thread runs everything, and a lone request's answer is polled
/// in `IdlePoll::await_briefly` on that thread, so it has no park hook.
/// Otherwise the multi-threaded runtime everything but HTTP runs on: a server
/// gets [`cli::ServeArgs::runtime_worker_threads`] workers, the other commands
/// tokio's default, and its workers poll for up to `idle_poll`'s budget before
/// they park while the node leads alone (see [`IdlePoll`]).
fn runtime(
    cli: &Cli,
    idle_poll: &Arc<IdlePoll>,
    api_on_runtime: bool,
    cores: usize,
    tokio_env_set: bool,
) -> std::io::Result<tokio::runtime::Runtime> {
    if api_on_runtime {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    // The hook reads the runtime's metrics, which exist only once it is built.
    // Kept, not taken per look: `Handle::metrics` clones the handle (an atomic
    // count up and down every time).
    let metrics = Arc::new(std::sync::OnceLock::<tokio::runtime::RuntimeMetrics>::new());
    if !idle_poll.budget().is_zero() {
        let (idle_poll, metrics) = (idle_poll.clone(), metrics.clone());
        builder.on_thread_park(move || {
            if let Some(metrics) = metrics.get() {
                // A task woken from an HTTP worker lands in the global queue.
                idle_poll.before_park(|| metrics.global_queue_depth() > 0);
            }
        });
    }
    if let Command::Serve(args) = &cli.command {
        if let Some(threads) = args.runtime_worker_threads(cores, tokio_env_set) {
            builder.worker_threads(threads);
        }
    }
    let runtime = builder.build()?;
    let _ = metrics.set(runtime.metrics());
    Ok(runtime)
}

async fn run(cli: Cli, idle_poll: Arc<IdlePoll>, api_on_runtime: bool) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Openapi => {
            std::io::stdout().write_all(openapi_json().as_bytes())?;
        }
        Command::Probe(args) => return Ok(probe::run(&args).await),
        Command::Serve(args) => {
            let telemetry = init_telemetry(&args)?;
            let served = serve(*args, idle_poll, api_on_runtime).await;
            // After the API stopped: the last requests' spans go out too.
            telemetry.shutdown().await;
            served?;
        }
        Command::Auth(command) => auth_cli::run(&command)?,
        Command::Dev(DevCommand::Cluster(args)) => dev_cluster::run(args).await?,
        Command::Dev(DevCommand::Certs(args)) => dev_certs::run(&args)?,
        Command::Lock(command) => {
            let target = Target::Lock {
                shared: command.shared,
            };
            return Ok(hold(command.client, command.hold, target).await);
        }
        Command::Semaphore(command) => {
            let target = Target::Semaphore {
                limit: command.limit,
                permits: command.permits,
            };
            return Ok(hold(command.client, command.hold, target).await);
        }
        Command::Elect(command) if command.observe => {
            return Ok(match command.client.client() {
                Ok(client) => {
                    inspect::observe(&client, &command.hold.name, command.client.output).await
                }
                Err(error) => client_cli::report(&error),
            });
        }
        Command::Elect(command) => {
            return Ok(hold(command.client, command.hold, Target::Election).await)
        }
        Command::Locks(command) => return Ok(inspect::locks(command).await),
        Command::Elections(command) => return Ok(inspect::elections(command).await),
        Command::Names(command) => return Ok(inspect::names(command).await),
        Command::Leases(command) => return Ok(inspect::leases(command).await),
        Command::Watch(command) => return Ok(inspect::watch(command).await),
        Command::Cluster(command) => return Ok(inspect::cluster(command).await),
    }
    Ok(ExitCode::SUCCESS)
}
