//! Bad input, one case per test, against SQLite and Postgres: each gives a
//! typed error (asserted by variant, never by message) and leaves the store
//! exactly as it was.

use std::time::Duration;

use backfill::conformance::fixtures::{at, day, rec};
use backfill::postgres::PostgresStore;
use backfill::sqlite::SqliteStore;
use backfill::{Error, Field, Job, Problem, Record, Retry, Store};
use backfill_testkit as testkit;
use chrono::{NaiveDate, TimeZone, Utc};

fn good(i: u32, value: &str) -> Record {
    rec(&format!("order:{i}"), day(0), value, at(0))
}

/// The stores under test, each already holding a few rows; `_dir` keeps the
/// SQLite file alive.
struct Stores {
    list: Vec<(&'static str, Box<dyn Store>)>,
    _dir: tempfile::TempDir,
}

async fn stores() -> Stores {
    let dir = tempfile::tempdir().unwrap();
    let mut list: Vec<(&'static str, Box<dyn Store>)> = vec![(
        "sqlite",
        Box::new(
            SqliteStore::open(dir.path().join("db.sqlite"))
                .await
                .unwrap(),
        ),
    )];
    if let Some(store) = testkit::store().await {
        list.push(("postgres", Box::new(store)));
    }
    for (_, store) in &list {
        let seed: Vec<_> = (0..3).map(|i| good(i, "v1")).collect();
        backfill::upsert(store, day(0), seed, Default::default())
            .await
            .unwrap();
    }
    Stores { list, _dir: dir }
}

fn job() -> Job {
    Job::new().retry(Retry::none())
}

/// Runs `case` against every store, and checks that none of them changed.
async fn each_store(case: impl AsyncFn(&'static str, &dyn Store)) {
    let stores = stores().await;
    for (name, store) in &stores.list {
        let before = store.rows().await.unwrap();
        case(name, store.as_ref()).await;
        assert_eq!(store.rows().await.unwrap(), before, "{name}: store changed");
    }
}

/// Syncs `day(0)` with a fetch that builds two good records (one updating a
/// stored row) and then `bad`, the way a fetch does with `?`; asserts the
/// sync fails with `expected` and that every store is unchanged.
async fn rejects(bad: fn() -> Result<Record, Error>, field: Field, problem: Problem) {
    match bad() {
        Err(Error::InvalidRecord {
            field: f,
            problem: p,
            ..
        }) => assert_eq!((f, p), (field, problem)),
        other => panic!("Record::new: expected InvalidRecord, got {other:?}"),
    }
    let fetch = move |_: NaiveDate| async move {
        Ok::<_, Error>(vec![good(0, "v2"), good(9, "new"), bad()?])
    };
    each_store(
        async |name, store| match job().sync_day(store, &fetch, day(0)).await {
            Err(Error::InvalidRecord {
                field: f,
                problem: p,
                ..
            }) => assert_eq!((f, p), (field, problem), "{name}"),
            other => panic!("{name}: expected InvalidRecord, got {other:?}"),
        },
    )
    .await;
}

#[tokio::test]
async fn empty_key() {
    rejects(
        || Record::new("", day(0), "v", at(0)),
        Field::Key,
        Problem::Empty,
    )
    .await;
}

#[tokio::test]
async fn key_one_byte_over_512() {
    assert!(Record::new("k".repeat(512), day(0), "v", at(0)).is_ok());
    rejects(
        || Record::new("k".repeat(513), day(0), "v", at(0)),
        Field::Key,
        Problem::TooLong { len: 513, max: 512 },
    )
    .await;
}

#[tokio::test]
async fn key_with_nul() {
    rejects(
        || Record::new("a\0b", day(0), "v", at(0)),
        Field::Key,
        Problem::ContainsNul,
    )
    .await;
}

#[tokio::test]
async fn value_with_nul() {
    rejects(
        || Record::new("k", day(0), "{\"a\":\"\0\"}", at(0)),
        Field::Value,
        Problem::ContainsNul,
    )
    .await;
}

#[tokio::test]
async fn event_date_before_year_1() {
    assert!(Record::new("k", NaiveDate::from_ymd_opt(1, 1, 1).unwrap(), "v", at(0)).is_ok());
    rejects(
        || Record::new("k", NaiveDate::from_ymd_opt(0, 12, 31).unwrap(), "v", at(0)),
        Field::EventDate,
        Problem::OutOfRange,
    )
    .await;
}

#[tokio::test]
async fn event_date_after_year_9999() {
    assert!(Record::new(
        "k",
        NaiveDate::from_ymd_opt(9999, 12, 31).unwrap(),
        "v",
        at(0)
    )
    .is_ok());
    rejects(
        || {
            Record::new(
                "k",
                NaiveDate::from_ymd_opt(10_000, 1, 1).unwrap(),
                "v",
                at(0),
            )
        },
        Field::EventDate,
        Problem::OutOfRange,
    )
    .await;
}

#[tokio::test]
async fn updated_at_after_year_9999() {
    let last = Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap();
    assert!(Record::new("k", day(0), "v", last).is_ok());
    rejects(
        || {
            Record::new(
                "k",
                day(0),
                "v",
                Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap(),
            )
        },
        Field::UpdatedAt,
        Problem::OutOfRange,
    )
    .await;
}

#[tokio::test]
async fn updated_at_before_year_1() {
    rejects(
        || {
            Record::new(
                "k",
                day(0),
                "v",
                Utc.with_ymd_and_hms(0, 12, 31, 23, 59, 59).unwrap(),
            )
        },
        Field::UpdatedAt,
        Problem::OutOfRange,
    )
    .await;
}

#[tokio::test]
async fn updated_at_on_a_leap_second() {
    rejects(
        || {
            let leap = NaiveDate::from_ymd_opt(2016, 12, 31)
                .unwrap()
                .and_hms_milli_opt(23, 59, 59, 1_500)
                .unwrap()
                .and_utc();
            Record::new("k", day(0), "v", leap)
        },
        Field::UpdatedAt,
        Problem::LeapSecond,
    )
    .await;
}

#[tokio::test]
async fn record_of_another_day_in_strict_mode() {
    let fetch = |_: NaiveDate| async move {
        let other = day(0).succ_opt().unwrap();
        Ok::<_, Error>(vec![good(0, "v2"), Record::new("late", other, "v", at(0))?])
    };
    each_store(
        async |name, store| match job().sync_day(store, &fetch, day(0)).await {
            Err(Error::WrongDay {
                expected, found, ..
            }) => {
                assert_eq!(
                    (expected, found),
                    (day(0), day(0).succ_opt().unwrap()),
                    "{name}"
                )
            }
            other => panic!("{name}: expected WrongDay, got {other:?}"),
        },
    )
    .await;
}

#[tokio::test]
async fn inverted_range() {
    let fetch = |_: NaiveDate| async { Ok::<_, Error>(vec![good(0, "v2")]) };
    each_store(async |name, store| {
        let end = day(0).pred_opt().unwrap();
        match job().backfill(store, &fetch, day(0)..=end).await {
            Err(Error::InvalidRange { start, end: e }) => assert_eq!((start, e), (day(0), end)),
            other => panic!("{name}: expected InvalidRange, got {other:?}"),
        }
    })
    .await;
}

const HOSTILE_NAMES: [&str; 8] = [
    "",
    "1records",
    "records; DROP TABLE users",
    "\"records\"",
    "re cords",
    "public.records",
    "récords",
    "records--",
];

#[tokio::test]
async fn invalid_and_hostile_sqlite_table_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let store = SqliteStore::open(&path).await.unwrap();
    backfill::upsert(&store, day(0), vec![good(0, "v1")], Default::default())
        .await
        .unwrap();
    let before = store.rows().await.unwrap();
    for name in HOSTILE_NAMES {
        match SqliteStore::builder(&path).table(name).open().await {
            Err(Error::InvalidName { what: "table", .. }) => {}
            other => panic!("{name:?}: expected InvalidName, got {other:?}"),
        }
    }
    assert_eq!(store.rows().await.unwrap(), before);
}

#[tokio::test]
async fn invalid_and_hostile_postgres_names() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = testkit::store().await.unwrap();
    backfill::upsert(&store, day(0), vec![good(0, "v1")], Default::default())
        .await
        .unwrap();
    let before = store.rows().await.unwrap();
    for name in HOSTILE_NAMES {
        let schema = PostgresStore::builder().schema(name).connect(&url).await;
        assert!(
            matches!(schema, Err(Error::InvalidName { what: "schema", .. })),
            "{name:?}: {schema:?}"
        );
        let table = PostgresStore::builder()
            .schema(store.schema())
            .table(name)
            .connect(&url)
            .await;
        assert!(
            matches!(table, Err(Error::InvalidName { what: "table", .. })),
            "{name:?}: {table:?}"
        );
    }
    assert_eq!(store.rows().await.unwrap(), before);
}

#[tokio::test]
async fn unreachable_postgres_server() {
    // Port 1 on loopback: nothing listens there.
    let url = "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2";
    match PostgresStore::connect(url).await {
        Err(Error::Open {
            backend: "postgres",
            ..
        }) => {}
        other => panic!("expected Open, got {other:?}"),
    }
}

#[tokio::test]
async fn wrong_postgres_password() {
    let Some(config) = testkit::config_with_password("wrong").await else {
        return;
    };
    let store = testkit::store().await.unwrap();
    backfill::upsert(&store, day(0), vec![good(0, "v1")], Default::default())
        .await
        .unwrap();
    let before = store.rows().await.unwrap();
    match PostgresStore::builder()
        .schema(store.schema())
        .connect_with(config)
        .await
    {
        Err(Error::Open {
            backend: "postgres",
            ..
        }) => {}
        other => panic!("expected Open, got {other:?}"),
    }
    assert_eq!(store.rows().await.unwrap(), before);
}

#[tokio::test]
async fn sqlite_path_in_a_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("db.sqlite");
    match SqliteStore::open(&path).await {
        Err(Error::Open {
            backend: "sqlite", ..
        }) => {}
        other => panic!("expected Open, got {other:?}"),
    }
    assert!(!path.parent().unwrap().exists());
}

#[tokio::test]
async fn sqlite_read_only_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        backfill::upsert(&store, day(0), vec![good(0, "v1")], Default::default())
            .await
            .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    // SQLite's own read-only mode: file permissions do not bind root.
    let read_only = format!("file:{}?mode=ro", path.display());
    match SqliteStore::open(&read_only).await {
        Err(Error::Open {
            backend: "sqlite", ..
        }) => {}
        Ok(store) => {
            let fetch =
                |_: NaiveDate| async { Ok::<_, Error>(vec![good(0, "v2"), good(5, "new")]) };
            match job().sync_day(&store, &fetch, day(0)).await {
                Err(
                    e @ Error::Backend {
                        backend: "sqlite", ..
                    },
                ) => assert!(!e.is_retryable()),
                other => panic!("expected a Backend error, got {other:?}"),
            }
        }
        Err(other) => panic!("expected Open, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the file must be untouched"
    );
}

#[tokio::test]
async fn sqlite_file_that_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("export.csv");
    let text = "key,value\n".repeat(500);
    std::fs::write(&path, &text).unwrap();
    match SqliteStore::open(&path).await {
        Err(Error::Open {
            backend: "sqlite", ..
        }) => {}
        other => panic!("expected Open, got {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

#[tokio::test]
async fn fetch_returns_an_error() {
    let fetch = |_: NaiveDate| async { Err::<Vec<Record>, _>(std::io::Error::other("HTTP 500")) };
    each_store(
        async |name, store| match job().sync_day(store, &fetch, day(0)).await {
            Err(Error::Fetch { day: d, source }) => {
                assert_eq!(d, day(0));
                assert!(
                    source.is::<std::io::Error>(),
                    "{name}: the fetch's own error is kept"
                );
            }
            other => panic!("{name}: expected Fetch, got {other:?}"),
        },
    )
    .await;
}

#[tokio::test]
async fn fetch_panics() {
    let fetch = |d: NaiveDate| async move {
        if d == day(0) {
            panic!("index out of bounds in the API client");
        }
        Ok::<_, Error>(vec![good(0, "v2")])
    };
    let stores = stores().await;
    for (name, store) in &stores.list {
        let before = store.rows().await.unwrap();
        match job().sync_day(store, &fetch, day(0)).await {
            Err(Error::Panicked { day: d, .. }) => assert_eq!(d, day(0)),
            other => panic!("{name}: expected Panicked, got {other:?}"),
        }
        assert_eq!(store.rows().await.unwrap(), before, "{name}: store changed");
        // The store is still usable afterwards.
        let c = backfill::upsert(store, day(0), vec![good(0, "v1")], Default::default())
            .await
            .unwrap();
        assert_eq!(c.unchanged, 1, "{name}");
    }
}

#[tokio::test]
async fn fetch_never_returns() {
    let fetch = |_: NaiveDate| std::future::pending::<Result<Vec<Record>, Error>>();
    each_store(async |name, store| {
        let job = job().day_timeout(Duration::from_millis(200));
        match job.sync_day(store, &fetch, day(0)).await {
            Err(e @ Error::Timeout { .. }) => assert!(e.is_retryable()),
            other => panic!("{name}: expected Timeout, got {other:?}"),
        }
    })
    .await;
}

/// The process' peak resident set size, from /proc (Linux).
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::test]
async fn a_million_records_in_one_batch() {
    const N: u32 = 1_000_000;
    let fetch = |d: NaiveDate| async move {
        (0..N)
            .map(|i| Record::new(format!("m:{i:07}"), d, format!("{{\"i\":{i}}}"), at(0)))
            .collect::<Result<Vec<_>, _>>()
    };
    let stores = stores().await;
    for (name, store) in &stores.list {
        let started = std::time::Instant::now();
        let report = job().sync_day(store, &fetch, day(0)).await.unwrap();
        assert_eq!(report.counts.inserted, u64::from(N), "{name}");
        assert_eq!(
            store.day_rows(day(0)).await.unwrap().len(),
            N as usize + 3,
            "{name}"
        );
        println!(
            "{name}: 1 000 000 records in one batch in {:.1} s; peak RSS of the test process so far {:.0} MiB",
            started.elapsed().as_secs_f64(),
            peak_rss_mib()
        );
    }
    // The records themselves are ~100 MiB in memory; the write path must
    // not multiply them (a copy per chunk, a copy per store call).
    assert!(
        peak_rss_mib() < 1024.0,
        "peak RSS {:.0} MiB",
        peak_rss_mib()
    );
}
