//! [`Tls`]: TLS with rustls for the connections a
//! [`PostgresStoreBuilder`](crate::PostgresStoreBuilder) makes, verifying
//! the server against the system's root certificates and any CA added, and
//! never falling back to plain text.

use std::fmt;
use std::sync::Arc;

use backfill_core::Result;
use deadpool_postgres::{Manager, ManagerConfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio_postgres::config::SslMode;
use tokio_postgres::Config;

use crate::error::open_error;

/// TLS for a store's connections, set with
/// [`PostgresStoreBuilder::tls`](crate::PostgresStoreBuilder::tls): rustls,
/// verifying the server's certificate and host name against the system's
/// root certificates and any added with [`Tls::root_certificates_pem`].
///
/// With it, [`connect`](crate::PostgresStoreBuilder::connect) and
/// [`connect_with`](crate::PostgresStoreBuilder::connect_with) connect
/// over TLS and only over TLS. The connection string's `sslmode` cannot
/// weaken that: `prefer` (the default when it says nothing) is taken as
/// `require`, so a server without TLS is refused rather than spoken to in
/// plain text, and `disable` contradicts it and is refused before
/// connecting. For client certificates or another TLS policy, build your
/// own pool and pass it to
/// [`connect_pool`](crate::PostgresStoreBuilder::connect_pool).
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use backfill_postgres::{PostgresStore, Tls};
///
/// let store = PostgresStore::builder()
///     .tls(Tls::new().root_certificates_pem(std::fs::read("rds-global-bundle.pem")?))
///     .connect("postgres://app@mydb.abc.eu-west-1.rds.amazonaws.com/warehouse")
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Tls {
    root_pems: Vec<Vec<u8>>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("added_root_pems", &self.root_pems.len())
            .finish()
    }
}

impl Tls {
    /// TLS verified against the system's root certificates.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also trusts the CA certificates in `pem` (PEM text, one or more
    /// certificates): the CA bundle of a managed Postgres (Amazon RDS,
    /// Cloud SQL, Azure) or your own CA. May be called more than once.
    pub fn root_certificates_pem(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.root_pems.push(pem.as_ref().to_vec());
        self
    }

    /// A pool manager whose connections to `config` use TLS, and only TLS.
    pub(crate) fn manager(&self, mut config: Config, manager: ManagerConfig) -> Result<Manager> {
        if config.get_ssl_mode() == SslMode::Disable {
            return Err(open_error(
                "tls requires TLS, but the connection string says sslmode=disable \
                 (leave tls unset for a plain-text connection)",
            ));
        }
        config.ssl_mode(SslMode::Require);
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(found.certs);
        for pem in &self.root_pems {
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
        Ok(Manager::from_config(config, connector, manager))
    }
}
