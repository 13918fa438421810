//! How the OTLP/HTTP trace exporter reaches its collector: the trust roots for
//! an `https://` endpoint, an optional client certificate, and the timeout,
//! from the specification's `OTEL_EXPORTER_OTLP_[TRACES_]*` variables.
//!
//! The exporter's own default client cannot do https here: Baton's reqwest is
//! built with rustls and no built-in roots (`rustls-tls-manual-roots`), so
//! Baton builds the client itself and loads the roots it is told about.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;

/// Where the system's CA bundle lives when `SSL_CERT_FILE` does not say
/// (Debian, Ubuntu and Alpine; Fedora and RHEL; macOS and the BSDs).
const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// The exporter's connection settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportTransport {
    /// `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`: PEM CAs trusted for the
    /// collector's certificate, besides the system's bundle.
    pub certificate: Option<PathBuf>,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_CERTIFICATE` and `..._CLIENT_KEY`:
    /// the certificate chain and key presented to a collector that asks for
    /// one (mutual TLS).
    pub client_identity: Option<(PathBuf, PathBuf)>,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` in milliseconds (default 10 s).
    pub timeout: Duration,
}

impl ExportTransport {
    /// Reads the settings from `var` (already trimmed, empty as unset); the
    /// traces-specific variable wins over the general one, as the
    /// specification says.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<ExportTransport, String> {
        let either = |suffix: &str| {
            var(&format!("OTEL_EXPORTER_OTLP_TRACES_{suffix}"))
                .map(|value| (format!("OTEL_EXPORTER_OTLP_TRACES_{suffix}"), value))
                .or_else(|| {
                    var(&format!("OTEL_EXPORTER_OTLP_{suffix}"))
                        .map(|value| (format!("OTEL_EXPORTER_OTLP_{suffix}"), value))
                })
        };
        let timeout = match either("TIMEOUT") {
            None => Duration::from_secs(10),
            Some((name, value)) => match value.parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    return Err(format!(
                        "{name}={value} is not a timeout in milliseconds (a positive integer)"
                    ))
                }
            },
        };
        let client_certificate = either("CLIENT_CERTIFICATE");
        let client_key = either("CLIENT_KEY");
        let client_identity = match (client_certificate, client_key) {
            (None, None) => None,
            (Some((_, cert)), Some((_, key))) => Some((PathBuf::from(cert), PathBuf::from(key))),
            (Some((name, _)), None) | (None, Some((name, _))) => {
                return Err(format!(
                    "{name} is set without its pair: a client certificate needs both \
                     OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY"
                ))
            }
        };
        Ok(ExportTransport {
            certificate: either("CERTIFICATE").map(|(_, path)| PathBuf::from(path)),
            client_identity,
            timeout,
        })
    }

    /// The exporter's blocking HTTP client (the batch exporter sends from a
    /// thread of its own). Every file named must be readable and hold what it
    /// should: a node must not start and then silently export nothing.
    /// `system_bundle` is the system's CA bundle, when there is one.
    pub fn client(
        &self,
        system_bundle: Option<&Path>,
    ) -> anyhow::Result<reqwest::blocking::Client> {
        let mut roots = Vec::new();
        if let Some(path) = &self.certificate {
            roots.extend(certificates(path)?);
        }
        if let Some(path) = system_bundle {
            // The system's bundle is a convenience: one that cannot be parsed
            // is skipped, not fatal (the named certificate still applies).
            if let Ok(found) = certificates(path) {
                roots.extend(found);
            }
        }
        let identity = match &self.client_identity {
            None => None,
            Some((cert, key)) => {
                let mut pem = read(key)?;
                pem.extend(read(cert)?);
                Some(reqwest::Identity::from_pem(&pem).with_context(|| {
                    format!(
                        "{} and {}: not a PEM certificate chain and private key",
                        cert.display(),
                        key.display()
                    )
                })?)
            }
        };
        let timeout = self.timeout;
        // reqwest's blocking client runs a runtime of its own, which must not
        // be built (or dropped) on a thread of Baton's runtime.
        std::thread::spawn(move || {
            let mut builder = reqwest::blocking::Client::builder().timeout(timeout);
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
            if let Some(identity) = identity {
                builder = builder.identity(identity);
            }
            builder.build()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("building the OTLP exporter's HTTP client panicked"))?
        .context("building the OTLP exporter's HTTP client")
    }
}

/// The system's CA bundle: `SSL_CERT_FILE` when set (`var` reads it), else
/// the first of the usual places that exists.
pub fn system_bundle(var: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(file) = var("SSL_CERT_FILE") {
        return Some(PathBuf::from(file));
    }
    SYSTEM_BUNDLES
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

fn certificates(path: &Path) -> anyhow::Result<Vec<reqwest::Certificate>> {
    let found = reqwest::Certificate::from_pem_bundle(&read(path)?)
        .with_context(|| format!("{}: not a PEM certificate bundle", path.display()))?;
    anyhow::ensure!(
        !found.is_empty(),
        "{}: holds no PEM certificate",
        path.display()
    );
    Ok(found)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn transport(vars: &[(&str, &str)]) -> Result<ExportTransport, String> {
        ExportTransport::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn defaults_and_the_traces_variable_wins() {
        let plain = transport(&[]).unwrap();
        assert_eq!(plain.timeout, Duration::from_secs(10));
        assert_eq!(plain.certificate, None);
        assert_eq!(plain.client_identity, None);
        let both = transport(&[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/general.pem"),
            ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/traces.pem"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ])
        .unwrap();
        assert_eq!(both.certificate, Some(PathBuf::from("/traces.pem")));
        assert_eq!(both.timeout, Duration::from_millis(2500));
    }

    #[test]
    fn a_bad_timeout_or_half_a_client_identity_is_refused() {
        let zero = transport(&[("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0")]);
        assert!(zero.is_err_and(|e| e.contains("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT=0")));
        assert!(transport(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")]).is_err());
        let half = transport(&[("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k.pem")]);
        assert!(half.is_err_and(|e| e.contains("OTEL_EXPORTER_OTLP_CLIENT_KEY")));
        let pair = transport(&[
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k.pem"),
            ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "/c.pem"),
        ])
        .unwrap();
        assert_eq!(
            pair.client_identity,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem")))
        );
    }

    #[test]
    fn a_named_certificate_must_exist_and_hold_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let missing = ExportTransport {
            certificate: Some(dir.path().join("absent.pem")),
            client_identity: None,
            timeout: Duration::from_secs(1),
        };
        let error = missing.client(None).unwrap_err();
        assert!(format!("{error:#}").contains("absent.pem"), "{error:#}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let empty = ExportTransport {
            certificate: Some(empty),
            ..missing
        };
        let error = empty.client(None).unwrap_err();
        assert!(
            format!("{error:#}").contains("no PEM certificate"),
            "{error:#}"
        );
    }
}
