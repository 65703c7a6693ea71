//! TLS against a server whose certificate comes from a private CA, the way
//! managed Postgres services work: refused until the CA is trusted, then
//! encrypted. Certificates are made with the `openssl` command.

use std::path::Path;
use std::process::Command;

use backfill_core::conformance::fixtures::{day, kv};
use backfill_core::{upsert, Error, Store, WriteOptions};
use backfill_postgres::{PostgresStore, Tls};
use backfill_testkit as testkit;
use testkit::testcontainers_modules::postgres::Postgres;
use testkit::testcontainers_modules::testcontainers::core::IntoContainerPort;
use testkit::testcontainers_modules::testcontainers::runners::AsyncRunner;
use testkit::testcontainers_modules::testcontainers::ImageExt;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, and a certificate it signed for `localhost`: (ca.crt, server.crt,
/// server.key), as PEM text.
fn certificates(dir: &Path) -> (String, String, String) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=backfill test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "server.crt",
            "-extfile",
            "server.ext",
        ],
    );
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    (read("ca.crt"), read("server.crt"), read("server.key"))
}

#[tokio::test]
async fn tls_with_a_private_ca() {
    if std::env::var_os("BACKFILL_PG_URL").is_some() {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPING: the TLS test runs a container of its own; BACKFILL_PG_URL is set"
        );
        return;
    }
    // The image the shared server runs (built or pulled if needed; under CI
    // a missing one fails).
    let Some(image) = testkit::server_image().await else {
        return;
    };
    if image.origin != testkit::Origin::Local {
        // The official image takes its certificate from files, not from
        // the environment variables the local image reads.
        testkit::skip(&format!(
            "the TLS test needs the image scripts/postgres-image.sh builds, not {image}"
        ));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _container = Postgres::default()
        .with_name(image.name)
        .with_tag(image.tag)
        .with_env_var("POSTGRES_SSL_CERT", cert)
        .with_env_var("POSTGRES_SSL_KEY", key)
        .with_mapped_port(port, 5432.tcp())
        .start()
        .await
        .expect("starting a TLS Postgres");
    let url = format!("postgres://postgres:postgres@localhost:{port}/postgres?sslmode=require");

    // The system's roots do not vouch for a private CA.
    match PostgresStore::builder().tls(Tls::new()).connect(&url).await {
        Err(Error::Open {
            backend: "postgres",
            ..
        }) => {}
        other => panic!("an unknown CA must be refused, got {other:?}"),
    }
    // Not every PEM is a certificate.
    match PostgresStore::builder()
        .tls(Tls::new().root_certificates_pem(
            "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
        ))
        .connect(&url)
        .await
    {
        Err(Error::Open {
            backend: "postgres",
            ..
        }) => {}
        other => panic!("a broken PEM must be refused, got {other:?}"),
    }

    let store = PostgresStore::builder()
        .tls(Tls::new().root_certificates_pem(&ca))
        .connect(&url)
        .await
        .expect("the private CA is trusted now");
    let client = store.pool().get().await.unwrap();
    let encrypted: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(encrypted, "the connection must use TLS");
    drop(client);
    let records = vec![kv("tls:1", "{}")];
    let c = upsert(&store, day(0), records.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.inserted, 1);
    assert_eq!(store.rows().await.unwrap(), records);
}

/// `tls` means TLS. The test server speaks none, so every `sslmode` is
/// refused: `require`; `prefer`, written or left to the default, which
/// would otherwise fall back to plain text; and `disable`, which
/// contradicts the setting.
#[tokio::test]
async fn tls_never_falls_back_to_plain_text() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let ssl: String = crate::admin(&url)
        .await
        .query_one("SHOW ssl", &[])
        .await
        .unwrap()
        .get(0);
    if ssl == "on" {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPING: the server behind BACKFILL_PG_URL speaks TLS; this test needs one that does not"
        );
        return;
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    for sslmode in ["", "require", "prefer", "disable"] {
        let url = match sslmode {
            "" => url.clone(),
            mode => format!("{url}{separator}sslmode={mode}"),
        };
        match PostgresStore::builder()
            .schema(testkit::unique_schema())
            .tls(Tls::new())
            .connect(&url)
            .await
        {
            Err(Error::Open {
                backend: "postgres",
                ..
            }) => {}
            other => panic!(
                "tls, sslmode {sslmode:?}, against a plain server: expected Open, got {other:?}"
            ),
        }
    }
}
