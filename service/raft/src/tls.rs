//! TLS on both listeners and on calls to peers: rustls with the ring provider,
//! certificates and CA bundles read from PEM files and read again when they
//! change, so a renewed certificate (cert-manager, a rotated Secret) is used for
//! new connections without a restart.
//!
//! One node certificate serves the client API and the peer listener, and is
//! presented as this node's client certificate when it calls a peer. Peers
//! verify each other against `--tls-peer-ca` in both directions (mutual TLS), on
//! top of the cluster secret. Clients may present certificates signed by
//! `--tls-client-ca`; the auth file maps their names to principals.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};

/// The PEM files TLS is configured from.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// This node's certificate chain, leaf first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CAs whose client certificates the client API accepts (optional: clients
    /// without one still use bearer tokens). `None`: clients are not asked.
    pub client_ca: Option<PathBuf>,
    /// CAs that sign the cluster's node certificates: a peer's certificate is
    /// checked against them whichever side called. Needed for more than one node.
    pub peer_ca: Option<PathBuf>,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds nothing usable.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The files do not make a usable configuration.
    #[error("TLS: {0}")]
    Config(String),
}

/// What the files held at the last (re)load.
struct Loaded {
    /// Every file's bytes, in order: a reload that reads the same changes nothing.
    contents: Vec<Vec<u8>>,
    key: Arc<CertifiedKey>,
    client_verifier: Option<Arc<dyn ClientCertVerifier>>,
    peer_client_verifier: Option<Arc<dyn ClientCertVerifier>>,
    peer_server_verifier: Option<Arc<WebPkiServerVerifier>>,
}

/// The node's TLS material, shared by every listener and client built from it.
pub struct Tls {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    loaded: RwLock<Arc<Loaded>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Reads and checks every file; any problem is an error (a node must not
    /// start without the TLS it was asked for).
    pub fn load(files: TlsFiles) -> Result<Arc<Tls>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let loaded = read_all(&files, &provider)?;
        Ok(Arc::new(Tls {
            files,
            provider,
            loaded: RwLock::new(Arc::new(loaded)),
        }))
    }

    /// The files this was loaded from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    fn current(&self) -> Arc<Loaded> {
        match self.loaded.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reads the files again: `Ok(true)` when they changed and the new material
    /// is in force for new connections; on error the old material stays.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let contents = read_contents(&self.files)?;
        if contents == self.current().contents {
            return Ok(false);
        }
        let loaded = read_all(&self.files, &self.provider)?;
        match self.loaded.write() {
            Ok(mut guard) => *guard = Arc::new(loaded),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(loaded),
        }
        Ok(true)
    }

    /// Reloads on SIGHUP and whenever a file changes (checked every `every`; a
    /// Kubernetes Secret volume swaps a symlink). Runs until the process ends.
    pub async fn reload_on_change(self: Arc<Self>, every: Duration) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = signal(SignalKind::hangup()).ok();
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {}
            }
            match self.reload() {
                Ok(true) => tracing::info!("TLS certificates reloaded"),
                Ok(false) => {}
                Err(error) => {
                    tracing::error!(%error, "TLS certificates not reloaded; the previous ones stay in force")
                }
            }
        }
    }

    /// The client API listener's configuration: the node certificate, and
    /// client certificates asked for (never required) when a client CA is set.
    pub fn api_server_config(self: &Arc<Self>) -> Result<ServerConfig, TlsError> {
        self.server_config(self.files.client_ca.is_some(), false)
    }

    /// The peer listener's configuration: the node certificate, and a peer
    /// certificate required when a peer CA is set.
    pub fn peer_server_config(self: &Arc<Self>) -> Result<ServerConfig, TlsError> {
        self.server_config(self.files.peer_ca.is_some(), true)
    }

    /// Checks a TLS 1.2 handshake signature with the provider's algorithms.
    fn tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    /// Checks a TLS 1.3 handshake signature with the provider's algorithms.
    fn tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    /// The signature schemes the provider verifies.
    fn signature_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }

    /// A listener's configuration serving the node certificate; with
    /// `client_certificates`, checked by the peer CA (`peer`) or the client CA.
    fn server_config(
        self: &Arc<Self>,
        client_certificates: bool,
        peer: bool,
    ) -> Result<ServerConfig, TlsError> {
        let builder = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let resolver = Arc::new(NodeCertificate(self.clone()));
        Ok(if client_certificates {
            builder
                .with_client_cert_verifier(Arc::new(ClientVerifier {
                    tls: self.clone(),
                    peer,
                }))
                .with_cert_resolver(resolver)
        } else {
            builder.with_no_client_auth().with_cert_resolver(resolver)
        })
    }

    /// The configuration for calls to peers (Raft RPCs, leader calls, the
    /// proxy's forwarding): servers checked against the peer CA, and the node
    /// certificate presented as a client certificate.
    pub fn peer_client_config(self: &Arc<Self>) -> Result<ClientConfig, TlsError> {
        if self.files.peer_ca.is_none() {
            return Err(TlsError::Config(
                "calling peers over https needs --tls-peer-ca (the CA of the node certificates)"
                    .into(),
            ));
        }
        Ok(ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PeerVerifier(self.clone())))
            .with_client_cert_resolver(Arc::new(NodeCertificate(self.clone()))))
    }
}

/// A client configuration that trusts the CAs in `ca_file` (for command-line
/// clients and tests); with `identity`, it presents that certificate and key.
pub fn client_config_trusting(
    ca_file: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = Arc::new(roots_from(ca_file, &read_file(ca_file)?)?);
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots);
    Ok(match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = certificates_of(cert, &read_file(cert)?)?;
            let private = private_key_of(key, &read_file(key)?)?;
            builder
                .with_client_auth_cert(chain, private)
                .map_err(|e| TlsError::Config(e.to_string()))?
        }
    })
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::File {
        path: path.to_owned(),
        reason: error.to_string(),
    })
}

fn read_contents(files: &TlsFiles) -> Result<Vec<Vec<u8>>, TlsError> {
    let mut contents = vec![read_file(&files.cert)?, read_file(&files.key)?];
    for ca in [&files.client_ca, &files.peer_ca].into_iter().flatten() {
        contents.push(read_file(ca)?);
    }
    Ok(contents)
}

fn certificates_of(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::File {
            path: path.to_owned(),
            reason: format!("not a PEM certificate file: {error}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::File {
            path: path.to_owned(),
            reason: "no certificate in the file".into(),
        });
    }
    Ok(certs)
}

fn private_key_of(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|error| TlsError::File {
        path: path.to_owned(),
        reason: format!("no usable private key: {error}"),
    })
}

fn certified_key(
    cert_path: &Path,
    cert_pem: &[u8],
    key_path: &Path,
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = certificates_of(cert_path, cert_pem)?;
    let key = private_key_of(key_path, key_pem)?;
    CertifiedKey::from_der(chain, key, provider).map_err(|error| TlsError::File {
        path: key_path.to_owned(),
        reason: format!("does not go with {}: {error}", cert_path.display()),
    })
}

fn roots_from(path: &Path, pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates_of(path, pem)? {
        roots.add(cert).map_err(|error| TlsError::File {
            path: path.to_owned(),
            reason: format!("not a usable CA certificate: {error}"),
        })?;
    }
    Ok(roots)
}

fn web_pki_client_verifier(
    path: &Path,
    pem: &[u8],
    provider: &Arc<CryptoProvider>,
    mandatory: bool,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let roots = Arc::new(roots_from(path, pem)?);
    let builder = WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
    let builder = if mandatory {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    builder
        .build()
        .map_err(|error| TlsError::Config(error.to_string()))
}

fn read_all(files: &TlsFiles, provider: &Arc<CryptoProvider>) -> Result<Loaded, TlsError> {
    let contents = read_contents(files)?;
    let key = certified_key(
        &files.cert,
        &contents[0],
        &files.key,
        &contents[1],
        provider,
    )?;
    let mut rest = contents[2..].iter();
    let client_verifier = match &files.client_ca {
        Some(path) => {
            let pem = rest.next().map(Vec::as_slice).unwrap_or_default();
            Some(web_pki_client_verifier(path, pem, provider, false)?)
        }
        None => None,
    };
    let (peer_client_verifier, peer_server_verifier) = match &files.peer_ca {
        Some(path) => {
            let pem = rest.next().map(Vec::as_slice).unwrap_or_default();
            let roots = Arc::new(roots_from(path, pem)?);
            let server = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|error| TlsError::Config(error.to_string()))?;
            (
                Some(web_pki_client_verifier(path, pem, provider, true)?),
                Some(server),
            )
        }
        None => (None, None),
    };
    Ok(Loaded {
        contents,
        key: Arc::new(key),
        client_verifier,
        peer_client_verifier,
        peer_server_verifier,
    })
}

/// Serves (and presents to peers) whatever node certificate is loaded now.
#[derive(Debug)]
struct NodeCertificate(Arc<Tls>);

impl ResolvesServerCert for NodeCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current().key.clone())
    }
}

impl ResolvesClientCert for NodeCertificate {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current().key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Checks client certificates against the CA loaded now: the client CA on the
/// API (optional), the peer CA on the peer listener (required).
#[derive(Debug)]
struct ClientVerifier {
    tls: Arc<Tls>,
    peer: bool,
}

impl ClientVerifier {
    fn verifier(&self) -> Result<Arc<dyn ClientCertVerifier>, rustls::Error> {
        let loaded = self.tls.current();
        let verifier = if self.peer {
            loaded.peer_client_verifier.clone()
        } else {
            loaded.client_verifier.clone()
        };
        verifier.ok_or_else(|| rustls::Error::General("no CA for client certificates".into()))
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn client_auth_mandatory(&self) -> bool {
        self.peer
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // The hints would have to outlive a reload; clients then offer any
        // certificate they have, which is what a single-identity client does.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.verifier()?
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls.tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls.tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.tls.signature_schemes()
    }
}

/// Checks a peer's server certificate against the peer CA loaded now.
#[derive(Debug)]
struct PeerVerifier(Arc<Tls>);

impl ServerCertVerifier for PeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verifier = self
            .0
            .current()
            .peer_server_verifier
            .clone()
            .ok_or_else(|| rustls::Error::General("no peer CA".into()))?;
        verifier.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_schemes()
    }
}
