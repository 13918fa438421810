//! `baton`: the server binary.

mod cli;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use actix_web::{App, HttpServer};
use anyhow::Context;
use baton_api::{configure, on_connect, openapi_json, ApiSettings, ApiState};
use baton_raft::Node;
use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command, ServeArgs};

fn init_tracing() {
    let filter = EnvFilter::try_from_env("BATON_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
}

/// Reads the cluster id stored beside the data, creating it on first start.
fn cluster_id(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join("CLUSTER_ID");
    if let Ok(text) = std::fs::read_to_string(&path) {
        return Ok(text.trim().to_owned());
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let id = format!("{:032x}", rand_id());
    std::fs::write(&path, format!("{id}\n"))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(id)
}

fn rand_id() -> u128 {
    Node::new_lease_id().0
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    args.validate().map_err(anyhow::Error::msg)?;
    let cluster_id = cluster_id(&args.data_dir)?;
    let node = Node::start(args.node_config())
        .await
        .context("starting the node")?;
    if !node.wait_until_leader(Duration::from_secs(10)).await {
        tracing::warn!("no leader yet; serving anyway (requests answer 503 until one is elected)");
    }
    let state = ApiState {
        node: node.clone(),
        settings: ApiSettings {
            default_ttl_ms: args.default_ttl_ms,
            max_wait_ms: args.max_wait_ms,
            cluster_id,
        },
    };
    let workers = args
        .http_workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let server = HttpServer::new(move || App::new().configure(configure(state.clone())))
        .on_connect(on_connect)
        .workers(workers)
        .shutdown_timeout(args.shutdown_timeout_s)
        // Signals are handled below: watch streams never finish by themselves,
        // so they are ended before actix waits for in-flight responses.
        .disable_signals()
        .bind(&args.listen)
        .with_context(|| format!("binding {}", args.listen))?
        .run();
    tokio::spawn(stop_on_signal(server.handle(), node.clone()));
    tracing::info!(listen = %args.listen, data_dir = %args.data_dir.display(), "baton is serving");
    server.await.context("http server")?;
    tracing::info!("stopping raft");
    node.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// On SIGTERM or SIGINT: end every watch stream (each gets a final `resync`
/// event), then stop accepting and let in-flight requests finish.
async fn stop_on_signal(server: actix_web::dev::ServerHandle, node: std::sync::Arc<Node>) {
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
    server.stop(true).await;
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Openapi => {
            std::io::stdout().write_all(openapi_json().as_bytes())?;
            Ok(())
        }
        Command::Serve(args) => {
            init_tracing();
            serve(args).await
        }
    }
}
