//! `baton probe URL`: a health check that needs no shell and no curl, for the
//! container image's `HEALTHCHECK` and Kubernetes `exec` probes.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

/// Settings of `baton probe`.
#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    /// URL to GET, e.g. `http://127.0.0.1:7878/readyz`.
    pub url: String,
    /// Give up after this long (connect and answer together).
    #[arg(long, default_value_t = 2_000)]
    pub timeout_ms: u64,
}

/// GETs the URL once: exit code 0 on a 2xx answer, 1 on any other status, on a
/// refused connection or on a timeout (with the reason on stderr).
pub async fn run(args: &ProbeArgs) -> ExitCode {
    match probe(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("baton probe {}: {reason}", args.url);
            ExitCode::FAILURE
        }
    }
}

async fn probe(args: &ProbeArgs) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(args.timeout_ms))
        .build()
        .map_err(|e| e.to_string())?;
    let response = client
        .get(&args.url)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("answered {status}"))
    }
}
