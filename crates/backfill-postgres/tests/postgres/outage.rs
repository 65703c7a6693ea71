//! Postgres goes away in the middle of a backfill. Each test runs its own
//! container (on a fixed host port, so the store's URL survives a restart),
//! kills it (`docker kill`: the server dies at once, as in a crash or a lost
//! host) and, in the first test, starts it again with the same data
//! directory, where Postgres recovers from its WAL.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backfill_core::conformance::fixtures::{at, day, rec};
use backfill_core::{Error, Event, Job, MemoryStore, Record, Retry, Store};
use backfill_postgres::PostgresStore;
use backfill_testkit as testkit;
use chrono::NaiveDate;
use testkit::testcontainers_modules::postgres::Postgres;
use testkit::testcontainers_modules::testcontainers::core::IntoContainerPort;
use testkit::testcontainers_modules::testcontainers::runners::AsyncRunner;
use testkit::testcontainers_modules::testcontainers::{ContainerAsync, ImageExt};

const DAYS: i64 = 30;
const PER_DAY: u32 = 500;

/// A slow upstream: 60 ms per day, so the backfill is in flight when the
/// server goes away.
async fn fetch(d: NaiveDate) -> Result<Vec<Record>, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(60)).await;
    Ok((0..PER_DAY)
        .map(|i| {
            rec(
                &format!("o:{d}:{i:04}"),
                d,
                &format!("{{\"i\":{i}}}"),
                at(0),
            )
        })
        .collect())
}

/// A Postgres of this test's own, or `None` (after saying why) when tests
/// use a server given by URL, or none at all.
async fn own_server() -> Option<(ContainerAsync<Postgres>, String)> {
    if std::env::var_os("BACKFILL_PG_URL").is_some() {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPING: the outage tests kill and restart a container of their own; BACKFILL_PG_URL is set"
        );
        return None;
    }
    // The image the shared server runs (built or pulled if needed; under CI
    // a missing one fails).
    let image = testkit::server_image().await?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let container = Postgres::default()
        .with_name(image.name)
        .with_tag(image.tag)
        .with_mapped_port(port, 5432.tcp())
        .start()
        .await
        .expect("starting a Postgres container");
    Some((
        container,
        format!("postgres://postgres:postgres@127.0.0.1:{port}/postgres"),
    ))
}

/// A job that keeps retrying through a short outage, and records every day
/// that finished and every retry.
fn observed_job(attempts: u32) -> (Job, Arc<Mutex<Vec<NaiveDate>>>, Arc<AtomicUsize>) {
    let finished = Arc::new(Mutex::new(Vec::new()));
    let retries = Arc::new(AtomicUsize::new(0));
    let (f, r) = (Arc::clone(&finished), Arc::clone(&retries));
    let job = Job::new()
        .concurrency(2)
        .retry(
            Retry::default()
                .max_attempts(attempts)
                .backoff(Duration::from_millis(200), Duration::from_secs(1)),
        )
        .observer(move |event| match event {
            Event::DayFinished { report } => f.lock().unwrap().push(report.day),
            Event::DayRetrying { .. } => {
                r.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        });
    (job, finished, retries)
}

/// A backfill hit by an outage: what `backfill_then_kill` hands back.
struct Outage {
    store: PostgresStore,
    run: tokio::task::JoinHandle<backfill_core::Result<backfill_core::RunReport>>,
    finished: Arc<Mutex<Vec<NaiveDate>>>,
    retries: Arc<AtomicUsize>,
    done_before_kill: usize,
}

/// Starts a backfill of every day (up to `attempts` tries a day) and kills
/// the server 300 ms into it.
async fn backfill_then_kill(
    container: &ContainerAsync<Postgres>,
    url: &str,
    attempts: u32,
) -> Outage {
    let store = PostgresStore::builder()
        .pool_size(4)
        .connect(url)
        .await
        .unwrap();
    let (job, finished, retries) = observed_job(attempts);
    let run = {
        let store = store.clone();
        tokio::spawn(async move { job.backfill(&store, &fetch, day(0)..=day(DAYS - 1)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let done_before_kill = finished.lock().unwrap().len();
    testkit::docker_cli(&["kill", container.id()]).unwrap();
    Outage {
        store,
        run,
        finished,
        retries,
        done_before_kill,
    }
}

async fn oracle() -> Vec<Record> {
    let memory = MemoryStore::new();
    Job::new()
        .backfill(&memory, &fetch, day(0)..=day(DAYS - 1))
        .await
        .unwrap();
    memory.rows().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_completes_across_a_postgres_restart() {
    let Some((container, url)) = own_server().await else {
        return;
    };
    let outage = backfill_then_kill(&container, &url, 40).await;
    let (store, run, retries) = (outage.store, outage.run, outage.retries);
    let before_outage = outage.done_before_kill;
    tokio::time::sleep(Duration::from_secs(3)).await;
    testkit::docker_cli(&["start", container.id()]).unwrap();

    let report = run
        .await
        .unwrap()
        .expect("the backfill must complete after the restart");
    println!(
        "{before_outage} days done before the outage; {} retries; {} days in all",
        retries.load(Ordering::SeqCst),
        report.days.len()
    );
    assert!(
        before_outage < DAYS as usize,
        "the outage must hit a running backfill"
    );
    assert!(
        retries.load(Ordering::SeqCst) > 0,
        "days in flight must have been retried"
    );
    assert_eq!(report.days.len(), DAYS as usize);
    assert_eq!(store.rows().await.unwrap(), oracle().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_that_never_returns_fails_the_remaining_days_only() {
    let Some((container, url)) = own_server().await else {
        return;
    };
    let outage = backfill_then_kill(&container, &url, 3).await;
    let (run, finished) = (outage.run, outage.finished);

    let failed: BTreeSet<NaiveDate> = match run.await.unwrap() {
        Err(Error::Backfill(e)) => {
            for (d, error) in &e.failed {
                assert!(error.is_retryable(), "{d}: an outage is retryable: {error}");
            }
            e.failed.iter().map(|(d, _)| *d).collect()
        }
        other => panic!("expected a failed backfill, got {other:?}"),
    };
    let done: BTreeSet<NaiveDate> = finished.lock().unwrap().iter().copied().collect();
    assert!(
        !done.is_empty() && !failed.is_empty(),
        "done {done:?}, failed {failed:?}"
    );
    assert!(done.is_disjoint(&failed));
    assert_eq!(
        done.len() + failed.len(),
        DAYS as usize,
        "every day was attempted"
    );

    // Bring the server back to look: every day committed before the outage
    // is intact, and no failed day is partly there.
    testkit::docker_cli(&["start", container.id()]).unwrap();
    let reader = loop {
        match PostgresStore::connect(&url).await {
            Ok(store) => break store,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    for n in 0..DAYS {
        let rows = reader.day_rows(day(n)).await.unwrap().len();
        if done.contains(&day(n)) {
            assert_eq!(rows, PER_DAY as usize, "{} was reported done", day(n));
        } else {
            assert!(
                rows == 0 || rows == PER_DAY as usize,
                "{} is partly written",
                day(n)
            );
        }
    }
}

/// A server that accepts connections and never answers (a hung host, a
/// proxy with nothing behind it): opening fails as timed out once the
/// connect timeout has passed — the builder's, else the connection
/// string's `connect_timeout` — instead of hanging.
#[tokio::test]
async fn a_server_that_never_answers_fails_opening_in_time() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    let url = format!("postgres://app@127.0.0.1:{port}/db");
    let with_timeout = format!("{url}?connect_timeout=1");
    let opened = [
        PostgresStore::builder()
            .connect_timeout(Duration::from_millis(500))
            .connect(&url),
        PostgresStore::builder().connect(&with_timeout),
    ];
    for open in opened {
        let started = std::time::Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(15), open)
            .await
            .expect("opening hung past its connect timeout");
        assert!(started.elapsed() < Duration::from_secs(10));
        match result {
            Err(e @ Error::Open { .. }) => {
                let text = e.to_string();
                assert!(text.contains("did not answer"), "{text}");
                let timed_out =
                    std::iter::successors(Some(&e as &(dyn std::error::Error + 'static)), |e| {
                        e.source()
                    })
                    .any(|e| {
                        e.downcast_ref::<std::io::Error>()
                            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
                    });
                assert!(timed_out, "{e:?}");
            }
            other => panic!("expected Open, got {other:?}"),
        }
    }
}
