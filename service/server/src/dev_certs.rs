//! `baton dev certs`: a throw-away CA with node and client certificates, for
//! trying TLS and mutual TLS on one machine (and for the tests that do).

use std::path::Path;

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::cli::DevCertsArgs;

fn names(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(String::from)
        .collect()
}

fn write(dir: &Path, file: &str, contents: &str) -> anyhow::Result<()> {
    let path = dir.join(file);
    std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))
}

/// Writes the CA, the node certificate and one certificate per client name.
pub fn run(args: &DevCertsArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "baton dev CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate()?;
    let ca = ca_params.self_signed(&ca_key)?;
    write(&args.out, "ca.crt", &ca.pem())?;
    write(&args.out, "ca.key", &ca_key.serialize_pem())?;

    // A node certificate serves both listeners and is a client certificate
    // towards peers: both purposes.
    let node_names = names(&args.node_names);
    let mut node = CertificateParams::new(node_names.clone())?;
    node.distinguished_name.push(
        DnType::CommonName,
        node_names.first().cloned().unwrap_or_default(),
    );
    node.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let node_key = KeyPair::generate()?;
    write(
        &args.out,
        "node.crt",
        &node.signed_by(&node_key, &ca, &ca_key)?.pem(),
    )?;
    write(&args.out, "node.key", &node_key.serialize_pem())?;

    for client in names(&args.clients) {
        let mut params = CertificateParams::new(vec![client.clone()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, client.clone());
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate()?;
        write(
            &args.out,
            &format!("{client}.crt"),
            &params.signed_by(&key, &ca, &ca_key)?.pem(),
        )?;
        write(&args.out, &format!("{client}.key"), &key.serialize_pem())?;
    }
    println!(
        "wrote the CA, node and client certificates to {}",
        args.out.display()
    );
    Ok(())
}
