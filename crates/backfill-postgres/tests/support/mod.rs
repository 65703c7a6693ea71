//! The test Postgres, shared by every test of one test binary.
//!
//! - `BACKFILL_PG_URL` set: that server is used (each test in its own schema).
//! - Otherwise a container is started with testcontainers, image
//!   `BACKFILL_PG_IMAGE:BACKFILL_PG_TAG` (default `backfill/postgres:15`,
//!   built from this machine's PostgreSQL by `scripts/postgres-image.sh` when
//!   absent). One container per test binary; a watchdog process removes it
//!   when the binary exits.
//! - Neither possible: the tests print why and skip, unless `CI` is set,
//!   in which case they fail.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use backfill_postgres::{tokio_postgres, PostgresStore};
use testcontainers_modules::postgres::Postgres;
use testcontainers_modules::testcontainers::runners::AsyncRunner;
use testcontainers_modules::testcontainers::ImageExt;
use tokio::sync::OnceCell;

static SERVER: OnceCell<Option<String>> = OnceCell::const_new();
static SCHEMAS: AtomicU64 = AtomicU64::new(0);

/// Set before the first `url()` to start the container with Postgres'
/// default durability settings (for measurements) instead of the fast,
/// non-durable ones tests use.
pub static DURABLE: AtomicBool = AtomicBool::new(false);

const DEFAULT_IMAGE: &str = "backfill/postgres";
const DEFAULT_TAG: &str = "15";
/// `IMAGE_VERSION` of scripts/postgres-image.sh.
const IMAGE_VERSION: &str = "2";

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The connection string of the test server, or `None` (after printing why)
/// when there is none and `CI` is not set.
pub async fn url() -> Option<String> {
    SERVER.get_or_init(init).await.clone()
}

async fn init() -> Option<String> {
    if let Ok(url) = std::env::var("BACKFILL_PG_URL") {
        return Some(url);
    }
    match start_container().await {
        Ok(url) => Some(url),
        Err(why) if in_ci() => panic!("CI is set, but no test Postgres is available: {why}"),
        Err(why) => {
            // Straight to stderr: the test harness captures `eprintln!` of
            // passing tests, and a skip must be seen.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr().lock(),
                "\n*** SKIPPING Postgres tests: {why}.\n*** Start Docker or set BACKFILL_PG_URL to run them.\n"
            );
            None
        }
    }
}

/// A store on the test server, in a fresh schema of its own.
pub async fn store() -> Option<PostgresStore> {
    let url = url().await?;
    Some(
        PostgresStore::builder()
            .schema(unique_schema())
            .connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connecting to the test Postgres: {e}")),
    )
}

/// The test server's connection settings with `password` in place of the
/// right one; `None` (after saying why) when the server behind
/// `BACKFILL_PG_URL` trusts every connection, so no password can be wrong.
/// The test container always checks passwords.
pub async fn config_with_password(password: &str) -> Option<tokio_postgres::Config> {
    let mut config: tokio_postgres::Config = url().await?.parse().unwrap();
    let mut probe = config.clone();
    probe.password("");
    if probe.connect(tokio_postgres::NoTls).await.is_ok() {
        assert!(
            std::env::var_os("BACKFILL_PG_URL").is_some(),
            "the test container must check passwords"
        );
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPING: BACKFILL_PG_URL trusts every connection; no password to get wrong"
        );
        return None;
    }
    config.password(password);
    Some(config)
}

/// A schema name no other test uses.
pub fn unique_schema() -> String {
    format!(
        "test_{}_{}",
        std::process::id(),
        SCHEMAS.fetch_add(1, Ordering::Relaxed)
    )
}

fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`docker {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn image_script() -> Option<PathBuf> {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        let script = dir.join("scripts/postgres-image.sh");
        if script.exists() {
            return Some(script);
        }
        if !dir.pop() {
            return None;
        }
    }
}

/// The test image's name and tag.
pub fn image() -> (String, String) {
    (
        std::env::var("BACKFILL_PG_IMAGE").unwrap_or_else(|_| DEFAULT_IMAGE.into()),
        std::env::var("BACKFILL_PG_TAG").unwrap_or_else(|_| DEFAULT_TAG.into()),
    )
}

/// Runs `docker` with `args`; its standard output, or why it failed.
pub fn docker_cli(args: &[&str]) -> Result<String, String> {
    docker(args)
}

async fn start_container() -> Result<String, String> {
    docker(&["info", "--format", "{{.ServerVersion}}"])
        .map_err(|e| format!("Docker is not reachable ({e})"))?;
    let (image, tag) = image();
    let reference = format!("{image}:{tag}");
    // The image of an older scripts/postgres-image.sh lacks what newer
    // tests use (TLS): its label says so, and it is rebuilt.
    let current = docker(&[
        "image",
        "inspect",
        "--format",
        "{{ index .Config.Labels \"backfill.image.version\" }}",
        &reference,
    ])
    .is_ok_and(|label| label.trim() == IMAGE_VERSION);
    if !current && image == DEFAULT_IMAGE {
        let script = image_script().ok_or("scripts/postgres-image.sh not found")?;
        let status = Command::new("bash")
            .arg(&script)
            .arg(&reference)
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !status.success() {
            return Err(format!(
                "building {reference} with {} failed",
                script.display()
            ));
        }
    }
    let mut args = vec!["-c", "max_connections=300"];
    if !DURABLE.load(Ordering::SeqCst) {
        // Durability is not under test; speed is welcome.
        args.extend([
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
        ]);
    }
    let container = Postgres::default()
        .with_name(image)
        .with_tag(tag)
        .with_cmd(args)
        .start()
        .await
        .map_err(|e| format!("starting {reference}: {e}"))?;
    let host = container.get_host().await.map_err(|e| e.to_string())?;
    let port = container
        .get_host_port_ipv4(5432)
        .await
        .map_err(|e| e.to_string())?;
    // The container outlives the runtime of the test that started it, so it
    // is never dropped here; a watchdog removes it once this process exits.
    let id = container.id().to_owned();
    std::mem::forget(container);
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; docker rm -f -v {id} >/dev/null 2>&1",
            pid = std::process::id()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the container watchdog: {e}"))?;
    Ok(format!(
        "postgres://postgres:postgres@{host}:{port}/postgres"
    ))
}
