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

use backfill_postgres::tokio_postgres::{Client, Config, NoTls};

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
