//! Test support for backfill's Postgres tests and its bench (not published).
//!
//! Finds the test Postgres, shared by every test of one test binary:
//!
//! - `BACKFILL_PG_URL` set: that server is used (each test in its own
//!   schema).
//! - Otherwise a container is started with testcontainers, one per test
//!   binary, removed by a watchdog process when the binary exits. The image
//!   is `backfill/postgres:15`, built from this machine's PostgreSQL by
//!   `scripts/postgres-image.sh` when missing or outdated; when that image
//!   cannot be built or run, the official `postgres:15-alpine` (pulled by
//!   testcontainers). `BACKFILL_PG_IMAGE` / `BACKFILL_PG_TAG` name another
//!   image, used alone.
//! - Neither possible: the tests print which images were tried and why each
//!   failed, and skip, unless `CI` is set, in which case they fail.
//!
//! The choice itself is [`plan()`], a pure function with unit tests.

#![forbid(unsafe_code)]

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use backfill_postgres::{tokio_postgres, PostgresStore};
use testcontainers_modules::postgres::Postgres;
use testcontainers_modules::testcontainers::core::Mount;
use testcontainers_modules::testcontainers::runners::AsyncRunner;
use testcontainers_modules::testcontainers::ImageExt;
use tokio::sync::OnceCell;

mod plan;

pub use plan::{
    image_version, plan, skip_message, Candidate, Failure, Image, Inputs, LocalImage, Origin, Plan,
    LOCAL_IMAGE, LOCAL_TAG, OFFICIAL_IMAGE, OFFICIAL_TAG,
};
pub use testcontainers_modules;

/// The shared server: its URL and, when it runs in a container, the image.
#[derive(Debug, Clone)]
struct Server {
    url: String,
    image: Option<Image>,
}

static SERVER: OnceCell<Option<Server>> = OnceCell::const_new();
static SCHEMAS: AtomicU64 = AtomicU64::new(0);

/// Set before the first [`url`] to start the container with Postgres'
/// default durability settings (for measurements) instead of the fast,
/// non-durable ones tests use.
pub static DURABLE: AtomicBool = AtomicBool::new(false);

/// Where the Debian `postgresql-15` server lives; the local image is built
/// from it.
const DEBIAN_POSTGRES: &str = "/usr/lib/postgresql/15/bin/postgres";

/// Whether `CI` is set (to anything but empty, `false` or `0`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Skips a test that cannot run here, saying why on stderr (past the test
/// harness's capture), or panics when `CI` is set: CI never skips silently.
pub fn skip(why: &str) {
    if in_ci() {
        panic!("CI is set, but this test cannot run: {why}");
    }
    let _ = writeln!(std::io::stderr().lock(), "SKIPPING: {why}");
}

/// The S3 bucket of the Delta tests on object storage, `s3://BUCKET`
/// (`BACKFILL_S3_URL`, with the AWS variables pointing at its server:
/// `scripts/s3-server.sh` starts a local one), without a trailing slash; or
/// `None` (after [`skip`]) when it is not set and `CI` is not.
pub fn s3_bucket() -> Option<String> {
    match std::env::var("BACKFILL_S3_URL") {
        Ok(url) if !url.is_empty() => Some(url.trim_end_matches('/').to_owned()),
        _ => {
            skip("BACKFILL_S3_URL is not set (scripts/s3-server.sh starts a local S3 server)");
            None
        }
    }
}

/// The connection string of the test server (a superuser), or `None`
/// (after printing why) when there is none and `CI` is not set.
pub async fn url() -> Option<String> {
    Some(SERVER.get_or_init(init).await.as_ref()?.url.clone())
}

/// The image the shared test container runs, once [`url`] found one;
/// `None` when the server comes from `BACKFILL_PG_URL` or there is none.
/// Tests that start containers of their own use the same image.
pub async fn server_image() -> Option<Image> {
    SERVER.get_or_init(init).await.as_ref()?.image.clone()
}

async fn init() -> Option<Server> {
    let inputs = probe();
    let plan = plan(&inputs);
    let mut failures = plan.ruled_out;
    for candidate in plan.candidates {
        match candidate {
            Candidate::Url(url) => return Some(Server { url, image: None }),
            Candidate::Container { image, build } => {
                let started = async {
                    if build {
                        build_local(&image)?;
                    }
                    start_container(&image).await
                };
                match started.await {
                    Ok(url) => {
                        return Some(Server {
                            url,
                            image: Some(image),
                        })
                    }
                    Err(why) => failures.push(Failure {
                        what: image.to_string(),
                        why,
                    }),
                }
            }
        }
    }
    let message = skip_message(&failures);
    if in_ci() {
        panic!("CI is set, but {message}");
    }
    // Straight to stderr: the test harness captures `eprintln!` of passing
    // tests, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr().lock(),
        "\n*** SKIPPING Postgres tests: {message}\n"
    );
    None
}

/// Looks at the environment and the machine: the inputs of [`plan()`].
fn probe() -> Inputs {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    let mut inputs = Inputs {
        url: var("BACKFILL_PG_URL"),
        image: var("BACKFILL_PG_IMAGE"),
        tag: var("BACKFILL_PG_TAG"),
        docker: Ok(()),
        local: LocalImage::Current,
    };
    if inputs.url.is_some() {
        return inputs;
    }
    inputs.docker = docker(&["info", "--format", "{{.ServerVersion}}"]).map(drop);
    if inputs.docker.is_err() {
        return inputs;
    }
    let reference = format!(
        "{}:{}",
        inputs.image.as_deref().unwrap_or(LOCAL_IMAGE),
        inputs.tag.as_deref().unwrap_or(LOCAL_TAG)
    );
    // The image of an older scripts/postgres-image.sh lacks what newer
    // tests use (TLS): its label says so, and it is rebuilt.
    let current = docker(&[
        "image",
        "inspect",
        "--format",
        "{{ index .Config.Labels \"backfill.image.version\" }}",
        &reference,
    ])
    .is_ok_and(|label| label.trim() == image_version());
    inputs.local = if current {
        LocalImage::Current
    } else if !std::path::Path::new(DEBIAN_POSTGRES).exists() {
        LocalImage::Unbuildable(format!(
            "it is built from Debian's postgresql-15 package, and {DEBIAN_POSTGRES} is missing"
        ))
    } else {
        LocalImage::Buildable
    };
    inputs
}

/// Builds the local image with the copy of `scripts/postgres-image.sh`
/// compiled into this crate (so the version checked and the version built
/// are the same text).
fn build_local(image: &Image) -> Result<(), String> {
    let mut script = tempfile::Builder::new()
        .suffix(".sh")
        .tempfile()
        .map_err(|e| format!("cannot write the build script: {e}"))?;
    script
        .write_all(plan::SCRIPT.as_bytes())
        .map_err(|e| format!("cannot write the build script: {e}"))?;
    let out = Command::new("bash")
        .arg(script.path())
        .arg(format!("{}:{}", image.name, image.tag))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("no message").trim();
        Err(format!(
            "scripts/postgres-image.sh failed ({}): {last}",
            out.status
        ))
    }
}

async fn start_container(image: &Image) -> Result<String, String> {
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
    let mut postgres = Postgres::default()
        .with_name(&image.name)
        .with_tag(&image.tag)
        .with_cmd(args);
    if !DURABLE.load(Ordering::SeqCst) {
        // The data directory in memory: the engine's own storage here is
        // fuse-overlayfs, slow enough to dominate the tests that move a
        // gigabyte (spilled sorts and CTEs write temporary files there).
        // A mount point of its own, mode 1777, so that the local image's
        // entrypoint (not root) can create the data directory inside; the
        // image's own /var/lib/postgresql would lend the mount its owner.
        postgres = postgres
            .with_mount(Mount::tmpfs_mount("/pgtmpfs").with_mode(0o1777))
            .with_env_var("PGDATA", "/pgtmpfs/data");
    }
    let container = postgres
        .start()
        .await
        .map_err(|e| format!("starting it failed: {e}"))?;
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

/// A store on the test server, in a fresh schema of its own; `None` when
/// there is no server (see [`url`]).
///
/// # Panics
///
/// When the server is there but the store cannot be opened.
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
///
/// # Panics
///
/// When the test container accepts a connection without a password.
pub async fn config_with_password(password: &str) -> Option<tokio_postgres::Config> {
    let mut config: tokio_postgres::Config = url().await?.parse().unwrap();
    let mut probe = config.clone();
    probe.password("");
    if probe.connect(tokio_postgres::NoTls).await.is_ok() {
        assert!(
            std::env::var_os("BACKFILL_PG_URL").is_some(),
            "the test container must check passwords"
        );
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

/// Runs `docker` with `args`: its standard output, or why it failed.
pub fn docker_cli(args: &[&str]) -> Result<String, String> {
    docker(args)
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
