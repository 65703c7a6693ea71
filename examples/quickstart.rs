//! Quickstart: backfill five days into SQLite, re-run the same backfill, then
//! run the daily sync (yesterday and today).
//!
//! ```text
//! cargo run --example quickstart [PATH.db]
//! ```
//!
//! Without a path the database is a temporary file, removed at the end.

#[path = "support/demo.rs"]
mod demo;

use std::path::PathBuf;

use backfill::sqlite::SqliteStore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (path, temporary) = match std::env::args_os().nth(1) {
        Some(path) => (PathBuf::from(path), false),
        None => (
            std::env::temp_dir().join(format!("backfill-quickstart-{}.db", std::process::id())),
            true,
        ),
    };
    let store = SqliteStore::open(&path).await?;
    println!("store: SQLite file {}\n", path.display());
    let result = demo::run(&store).await;

    drop(store);
    if temporary {
        for suffix in ["", "-wal", "-shm"] {
            let mut file = path.clone().into_os_string();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
    }
    result
}
