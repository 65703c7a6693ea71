//! The Postgres test binary: every test that can share the one test server
//! (see `backfill-testkit`), as modules of one binary, so the server is
//! started once and the crate is linked once.
//!
//! - `conformance`: the shared suite every store must pass.
//! - `behaviour`: what this store promises beyond the suite (typed errors,
//!   no tuple written on a re-run of merges, listings or tombstones,
//!   chunking, concurrent writers, listings locking their day, purge).
//! - `pages`: streamed days applied page by page in one transaction: the
//!   same rows, counts and ledger as one batch, listings judged range by
//!   range, a store error in a late page leaving nothing, a concurrent
//!   writer racing a later page's COPY.
//! - `first_pass`: the COPY of a chunk found absent raced by another
//!   writer (counts exact, the apply's writes undone and merged), writers
//!   with different chunks never deadlocking.
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
mod conformance;
mod first_pass;
mod large_values;
mod ledger;
mod open;
mod outage;
mod pages;
mod retry;
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
