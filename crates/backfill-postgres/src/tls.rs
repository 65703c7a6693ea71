//! TLS with rustls: the connector a pool's connections are made with,
//! verifying the server against the system's root certificates and any CA
//! added, and never falling back to plain text.

use std::sync::Arc;

use backfill_core::Result;
use deadpool_postgres::{Manager, ManagerConfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio_postgres::config::SslMode;
use tokio_postgres::Config;

use crate::error::open_error;

/// A pool manager whose connections to `config` use TLS, and only TLS,
/// trusting the system's roots and the certificates in `root_pems`.
pub(crate) fn manager(
    mut config: Config,
    root_pems: &[Vec<u8>],
    manager_config: ManagerConfig,
) -> Result<Manager> {
    if config.get_ssl_mode() == SslMode::Disable {
        return Err(open_error(
            "connect_tls requires TLS, but the connection string says sslmode=disable \
             (use connect for a plain-text connection)",
        ));
    }
    config.ssl_mode(SslMode::Require);
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    for pem in root_pems {
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert =
                cert.map_err(|e| open_error(format!("unreadable root certificate PEM: {e}")))?;
            roots.add(cert).map_err(open_error)?;
        }
    }
    if roots.is_empty() {
        return Err(open_error("no root certificate to verify the server with"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(open_error)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
    Ok(Manager::from_config(config, connector, manager_config))
}
