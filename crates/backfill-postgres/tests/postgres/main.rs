//! The Postgres test binary: every test that can share the one test server
//! (see `backfill-testkit`), as modules of one binary, so the server is
//! started once and the crate is linked once.
//!
//! - `conformance`: the shared suite every store must pass.
//! - `behaviour`: what this store promises beyond the suite (typed errors,
//!   no tuple written on a re-run of merges, listings or tombstones,
//!   chunking, concurrent writers, listings locking their day, a listing
//!   and a merge moving its keys never deadlocking, purge).
//! - `pages`: streamed days applied page by page in one transaction: the
//!   same rows, counts and ledger as one batch, listings judged range by
//!   range, a store error in a late page leaving nothing, a concurrent
//!   writer racing a later page's COPY.
//! - `first_pass`: the COPY of a chunk found absent raced by another
//!   writer (counts exact, the apply's writes undone and merged), writers
//!   with different chunks never deadlocking.
//! - `in_place`: a re-fetched day compared with its stored rows: only its
//!   changed rows written, where they lie; a key the day lacks, or a row
//!   another writer changed between the read and the update, merged.
//! - `same_batch`: a batch applied again compared as one digest.
//! - `history`: a re-run writes no history tuple, writers cut into
//!   different pages never deadlock on it, turning it on, its objects
//!   checked on open, and the analyst's SQL against its view.
//! - `open`: opening checks an existing table and the metadata tables,
//!   upgrades version-1 tables and version-2 schemas in place, needs no DDL rights when
//!   everything exists, and names indexes that cannot collide.
//! - `ledger`: the day ledger commits with the rows, failures keep the last
//!   success, a read-only role reads it.
//! - `large_values`: days and values past Postgres' message limit.
//! - `retry`: which server errors a job retries.
//! - `tls`: TLS is required when asked for, and works with a private CA.
//! - `outage`: the server dies during a backfill (containers of their own).

mod behaviour;
mod columns;
mod conformance;
mod first_pass;
mod history;
mod in_place;
mod large_values;
mod ledger;
mod open;
mod outage;
mod pages;
mod retry;
mod same_batch;
#[cfg(feature = "tls")]
mod tls;

use backfill_core::Record;
use backfill_postgres::tokio_postgres::{Client, Config, NoTls};
use backfill_postgres::PostgresStore;

/// A connection of its own to the test server (a superuser), for setting up
/// what a test needs behind the store's back.
async fn admin(url: &str) -> Client {
    let (client, connection) = url
        .parse::<Config>()
        .unwrap()
        .connect(NoTls)
        .await
        .expect("connecting to the test Postgres");
    tokio::spawn(connection);
    client
}

/// Waits until a session of the server waits for `other`'s session
/// (`depth` 1), or for a session that itself waits for it (`depth` 2), as
/// `pg_blocking_pids` says: the store really is blocked behind the other
/// writer before a test lets that writer go on, however loaded the machine.
/// Asked on a connection of its own, one statement at a time (a session's
/// view of `pg_stat_activity` is fixed for the rest of its transaction, and
/// `other` has one open). Panics after 60 s.
async fn blocked_behind(url: &str, other: &Client, depth: u32) {
    let pid: i32 = other
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let sql = match depth {
        1 => {
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
             WHERE $1 = ANY(pg_blocking_pids(pid)))"
        }
        _ => {
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity a \
             JOIN pg_stat_activity b ON b.pid = ANY(pg_blocking_pids(a.pid)) \
             WHERE $1 = ANY(pg_blocking_pids(b.pid)))"
        }
    };
    let watcher = admin(url).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let blocked: bool = watcher.query_one(sql, &[&pid]).await.unwrap().get(0);
        if blocked {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no session blocked behind the other writer (depth {depth}) within 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Inserts `records` into the store's table from `client`, inside whatever
/// transaction it has open: another writer, racing the store.
async fn insert_behind_the_store(client: &Client, store: &PostgresStore, records: &[Record]) {
    let sql = format!(
        "INSERT INTO \"{}\".\"{}\" (key, event_date, value, updated_at, deleted) \
         VALUES ($1, $2, $3, $4, $5)",
        store.schema(),
        store.table()
    );
    for r in records {
        let (date, at, deleted) = (r.event_date(), r.updated_at(), r.is_deleted());
        client
            .execute(&sql, &[&r.key(), &date, &r.value(), &at, &deleted])
            .await
            .unwrap();
    }
}

/// Every row of the store's table, tombstones and all: a key stored twice
/// would show here.
async fn physical_rows(store: &PostgresStore) -> i64 {
    let client = store.pool().get().await.unwrap();
    let sql = format!(
        "SELECT count(*) FROM \"{}\".\"{}\"",
        store.schema(),
        store.table()
    );
    client.query_one(&sql, &[]).await.unwrap().get(0)
}
