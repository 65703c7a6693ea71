//! The quickstart against Postgres: backfill five days, re-run the same
//! backfill, then run the daily sync (yesterday and today).
//!
//! ```text
//! BACKFILL_PG_URL=postgres://user:password@localhost/db \
//!     cargo run --example postgres --features postgres
//! ```
//!
//! Rows go to the table `backfill_quickstart.orders`, created if missing.

#[path = "support/demo.rs"]
mod demo;

use backfill::postgres::PostgresStore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("BACKFILL_PG_URL")
        .map_err(|_| "set BACKFILL_PG_URL to a Postgres connection string")?;
    let store = PostgresStore::builder()
        .schema("backfill_quickstart")
        .table("orders")
        .connect(&url)
        .await?;
    println!("store: {store:?}\n");
    demo::run(&store).await
}
