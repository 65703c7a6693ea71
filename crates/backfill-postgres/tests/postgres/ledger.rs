//! The day ledger in Postgres: one row per day in the schema's
//! `backfill_days`, written by the apply's own transaction (so it commits
//! with the rows or not at all), failures in a transaction of their own,
//! readable by a read-only role.

use backfill_core::conformance::fixtures::{at, day, rec};
use backfill_core::{
    upsert, DayFailure, DayState, Error, Mode, Record, RunId, Store, WriteOptions, MAX_ERROR_BYTES,
};
use backfill_postgres::tokio_postgres::error::SqlState;
use backfill_postgres::PostgresStore;
use backfill_testkit as testkit;
use chrono::{Duration, Utc};

fn records(n: usize, value: &str) -> Vec<Record> {
    (0..n)
        .map(|i| rec(&format!("l/{i:03}"), day(0), value, at(0)))
        .collect()
}

/// A store of its own, sending at most two records per statement.
async fn store(url: &str) -> PostgresStore {
    PostgresStore::builder()
        .schema(testkit::unique_schema())
        .page_rows(2)
        .connect(url)
        .await
        .unwrap()
}

/// The day's ledger row as stored, column by column, as text.
async fn raw_row(store: &PostgresStore) -> Vec<Option<String>> {
    let client = store.pool().get().await.unwrap();
    let row = client
        .query_one(
            &format!(
                "SELECT (listing_watermark AT TIME ZONE 'UTC')::text, \
                        (synced_at AT TIME ZONE 'UTC')::text, run_id, mode, \
                        (as_of AT TIME ZONE 'UTC')::text, digest, \
                        inserted::text, updated::text, unchanged::text, stale::text, deleted::text, \
                        unlisted::text, collapsed::text, failed_at::text, failed_run_id, \
                        attempts::text, error \
                 FROM \"{}\".backfill_days WHERE records_table = $1 AND day = $2",
                store.schema()
            ),
            &[&store.table(), &day(0)],
        )
        .await
        .unwrap();
    (0..row.len()).map(|i| row.get(i)).collect()
}

/// A failure in a later statement of the apply (a record the table refuses
/// in its second chunk) leaves neither rows nor a ledger row; a failure of
/// the ledger write itself (the apply's last statement) leaves no rows.
#[tokio::test]
async fn the_ledger_row_and_the_rows_commit_together() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = store(&url).await;
    let admin = crate::admin(&url).await;
    let (schema, table) = (store.schema().to_owned(), store.table().to_owned());
    // Constraints of the test's own, NOT VALID so they bind new rows only.
    admin
        .batch_execute(&format!(
            "ALTER TABLE {schema}.{table} ADD CONSTRAINT no_boom CHECK (value <> 'boom') NOT VALID; \
             ALTER TABLE {schema}.backfill_days ADD CONSTRAINT few CHECK (inserted < 5) NOT VALID;"
        ))
        .await
        .unwrap();

    // The refused record is the fourth, in the second chunk.
    let mut refused = records(4, "ok");
    refused[3] = rec(refused[3].key(), day(0), "boom", refused[3].updated_at());
    let e = upsert(&store, day(0), refused, WriteOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Backend { .. }), "{e:?}");
    assert!(store.rows().await.unwrap().is_empty());
    assert!(
        store.ledger(day(0)..=day(0)).await.unwrap().is_empty(),
        "no ledger row without its rows"
    );

    // The ledger write refuses 5 inserts: the rows go with it.
    let e = upsert(&store, day(0), records(5, "ok"), WriteOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Backend { .. }), "{e:?}");
    assert!(
        store.rows().await.unwrap().is_empty(),
        "no rows without their ledger row"
    );
    assert!(store.ledger(day(0)..=day(0)).await.unwrap().is_empty());

    // A listing the guard refuses writes no ledger row either, and leaves
    // the last success as it was.
    let c = upsert(&store, day(0), records(4, "ok"), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.inserted, 4);
    let before = store.ledger(day(0)..=day(0)).await.unwrap();
    let empty = WriteOptions::default().mode(Mode::Replace);
    let e = upsert(&store, day(0), Vec::new(), empty).await.unwrap_err();
    assert!(matches!(e, Error::ReplaceRefused { .. }), "{e:?}");
    assert_eq!(store.ledger(day(0)..=day(0)).await.unwrap(), before);
    assert_eq!(store.rows().await.unwrap().len(), 4);
}

/// What an apply writes, column by column: a listing's mode, as_of and
/// raised watermark, the digest as 32 hex characters, every count; a later
/// merge keeps the watermark and writes NULL as_of.
#[tokio::test]
async fn the_ledger_row_says_what_the_apply_did() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = store(&url).await;
    let as_of = at(6 * 3600);
    let mut batch = records(5, "v");
    batch.push(batch[0].clone()); // collapsed
    upsert(&store, day(0), records(7, "v"), WriteOptions::default())
        .await
        .unwrap();
    let replace = WriteOptions::default().mode(Mode::Replace).as_of(as_of);
    let c = upsert(&store, day(0), batch, replace).await.unwrap();
    assert_eq!(
        (c.unchanged, c.deleted, c.unlisted, c.collapsed),
        (5, 2, 2, 1)
    );

    let row = raw_row(&store).await;
    let text = |i: usize| row[i].as_deref();
    assert_eq!(text(0), Some("2026-01-01 06:00:00"), "watermark raised");
    assert_eq!(text(2), None, "no run for a direct upsert");
    assert_eq!(text(3), Some("replace"));
    assert_eq!(text(4), Some("2026-01-01 06:00:00"));
    let digest = text(5).unwrap();
    assert!(
        digest.len() == 32
            && digest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert_eq!(
        row[6..13]
            .iter()
            .map(|c| c.as_deref().unwrap())
            .collect::<Vec<_>>(),
        ["0", "0", "5", "0", "2", "2", "1"]
    );
    assert!(row[13..].iter().all(Option::is_none), "no failure");

    let ledger = store.ledger(day(0)..=day(0)).await.unwrap();
    let synced = ledger[0].synced.as_ref().unwrap();
    assert_eq!(synced.mode, Mode::Replace);
    assert_eq!(synced.as_of, Some(as_of));
    assert_eq!(synced.digest.to_string(), digest);
    assert_eq!(synced.counts, c);

    // A merge: as_of NULL, the watermark kept.
    upsert(&store, day(0), records(1, "w"), WriteOptions::default())
        .await
        .unwrap();
    let row = raw_row(&store).await;
    assert_eq!(row[0].as_deref(), Some("2026-01-01 06:00:00"));
    assert_eq!(
        (row[3].as_deref(), row[4].as_deref()),
        (Some("merge"), None)
    );
    // An older listing does not lower it.
    let older = replace.as_of(as_of - Duration::hours(1));
    upsert(&store, day(0), records(5, "w"), older)
        .await
        .unwrap();
    let ledger = store.ledger(day(0)..=day(0)).await.unwrap();
    assert_eq!(ledger[0].listing_watermark, Some(as_of));
    assert_eq!(
        ledger[0].synced.as_ref().unwrap().as_of,
        Some(as_of - Duration::hours(1)),
        "the apply's own as_of"
    );
}

/// A failure keeps the last success and the watermark; a later failure
/// replaces it; a success clears it. Error text is kept as given (NUL,
/// which Postgres text cannot hold, aside).
#[tokio::test]
async fn a_failure_keeps_the_success_and_a_success_clears_it() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = store(&url).await;
    let failed_at = at(86_400);
    let run = RunId::new();
    // A failure of a day never synced.
    let other = day(1);
    let first = DayFailure::new(failed_at, Some(run.clone()), 3, "503 Service Unavailable");
    store.record_failure(other, &first).await.unwrap();
    let ledger = store.ledger(other..=other).await.unwrap();
    assert_eq!(ledger[0].state(), DayState::Failed);
    assert_eq!(ledger[0].failure.as_ref(), Some(&first));
    assert_eq!(ledger[0].synced, None);

    let as_of = at(6 * 3600);
    let replace = WriteOptions::default().mode(Mode::Replace).as_of(as_of);
    upsert(&store, day(0), records(3, "v"), replace)
        .await
        .unwrap();
    let synced = store.ledger(day(0)..=day(0)).await.unwrap()[0]
        .synced
        .clone();
    assert!(synced.is_some());

    let long = "é".repeat(MAX_ERROR_BYTES);
    for failure in [
        DayFailure::new(failed_at, Some(run.clone()), 1, "timeout"),
        DayFailure::new(failed_at + Duration::minutes(1), None, u32::MAX, &long),
    ] {
        store.record_failure(day(0), &failure).await.unwrap();
        let ledger = store.ledger(day(0)..=day(0)).await.unwrap();
        assert_eq!(ledger.len(), 1);
        assert_eq!(ledger[0].state(), DayState::Failed);
        assert_eq!(ledger[0].synced, synced, "the last success is kept");
        assert_eq!(
            ledger[0].listing_watermark,
            Some(as_of),
            "and the watermark"
        );
        let kept = ledger[0].failure.as_ref().unwrap();
        assert_eq!(kept.at, failure.at);
        assert_eq!(kept.run_id, failure.run_id);
        assert_eq!(kept.error, failure.error);
        assert_eq!(kept.attempts, failure.attempts.min(i32::MAX as u32));
    }
    let nul = DayFailure::new(failed_at, None, 1, "bad\0byte");
    store.record_failure(day(0), &nul).await.unwrap();
    let kept = store.ledger(day(0)..=day(0)).await.unwrap()[0]
        .failure
        .clone();
    assert_eq!(kept.unwrap().error, "bad\u{FFFD}byte");

    // A success clears the failure, keeps the watermark.
    let c = upsert(&store, day(0), records(3, "v"), WriteOptions::default())
        .await
        .unwrap();
    let ledger = store.ledger(day(0)..=other).await.unwrap();
    assert_eq!(ledger.len(), 2, "both days, in day order");
    assert_eq!(ledger[0].state(), DayState::Synced);
    assert_eq!(ledger[0].failure, None);
    assert_eq!(ledger[0].listing_watermark, Some(as_of));
    assert_eq!(ledger[0].synced.as_ref().unwrap().counts, c);
    assert_eq!(ledger[1].day, other);
    assert_eq!(ledger[1].state(), DayState::Failed, "another day untouched");
    assert!(row_failure_cleared(&raw_row(&store).await));
}

fn row_failure_cleared(row: &[Option<String>]) -> bool {
    row[13..].iter().all(Option::is_none)
}

/// A read-only role reads the ledger; recording a failure is the store's
/// error, not retried (the job ignores and logs it).
#[tokio::test]
async fn a_read_only_store_reads_its_ledger() {
    let Some(owner) = testkit::store().await else {
        return;
    };
    upsert(&owner, day(0), records(2, "v"), WriteOptions::default())
        .await
        .unwrap();
    let url = testkit::url().await.unwrap();
    let admin = crate::admin(&url).await;
    let role = testkit::unique_schema().replace("test_", "ledro_");
    let (schema, table) = (owner.schema(), owner.table());
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{role}'; \
             GRANT USAGE ON SCHEMA {schema} TO {role}; \
             GRANT SELECT ON {schema}.{table}, {schema}.backfill_tables, {schema}.backfill_days TO {role}; \
             ALTER ROLE {role} SET default_transaction_read_only = on;"
        ))
        .await
        .unwrap();
    let mut config: backfill_postgres::tokio_postgres::Config = url.parse().unwrap();
    config.user(&role).password(&role);
    let result = async {
        let store = PostgresStore::builder()
            .schema(schema)
            .table(table)
            .create_if_missing(false)
            .connect_with(config)
            .await?;
        let ledger = store.ledger(day(0)..=day(0)).await?;
        let failure = DayFailure::new(Utc::now(), None, 1, "503");
        Ok::<_, Error>((ledger, store.record_failure(day(0), &failure).await))
    }
    .await;
    admin
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await
        .unwrap();
    let (ledger, recorded) = result.expect("a read-only role reads the ledger");
    assert_eq!(ledger, owner.ledger(day(0)..=day(0)).await.unwrap());
    assert_eq!(ledger[0].state(), DayState::Synced);
    match recorded {
        Err(ref e @ Error::Backend { ref source, .. }) => {
            assert!(!e.is_retryable(), "{e}");
            let code = source
                .downcast_ref::<backfill_postgres::tokio_postgres::Error>()
                .and_then(|e| e.code());
            assert_eq!(code, Some(&SqlState::READ_ONLY_SQL_TRANSACTION), "{e}");
        }
        other => panic!("expected a Backend error, got {other:?}"),
    }
    assert_eq!(
        owner.ledger(day(0)..=day(0)).await.unwrap()[0].state(),
        DayState::Synced
    );
}

/// A day's timing (`backfill_timings`, made on open by the owner) is kept
/// by a store whose role may write it, and a role without rights on it
/// opens, reads and writes without timings: the day it applies then reads
/// as having none (its timing belonged to the owner's apply), never
/// another apply's.
#[tokio::test]
async fn timings_are_kept_where_the_role_may_and_never_mislead() {
    let Some(owner) = testkit::store().await else {
        return;
    };
    upsert(&owner, day(0), records(2, "v"), WriteOptions::default())
        .await
        .unwrap();
    let timing = |ledger: &[backfill_core::LedgerEntry]| ledger[0].synced.as_ref().unwrap().timing;
    let kept = owner.ledger(day(0)..=day(0)).await.unwrap();
    assert!(timing(&kept).is_some(), "{kept:?}");

    let url = testkit::url().await.unwrap();
    let admin = crate::admin(&url).await;
    let role = testkit::unique_schema().replace("test_", "ledrw_");
    let (schema, table) = (owner.schema(), owner.table());
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{role}'; \
             GRANT USAGE ON SCHEMA {schema} TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.{table}, {schema}.backfill_tables, \
             {schema}.backfill_days TO {role};"
        ))
        .await
        .unwrap();
    let mut config: backfill_postgres::tokio_postgres::Config = url.parse().unwrap();
    config.user(&role).password(&role);
    let result = async {
        let store = PostgresStore::builder()
            .schema(schema)
            .table(table)
            .connect_with(config)
            .await?;
        upsert(&store, day(0), records(3, "w"), WriteOptions::default()).await?;
        store.ledger(day(0)..=day(0)).await
    }
    .await;
    admin
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await
        .unwrap();
    let ledger = result.expect("a role without rights on the timings writes without them");
    assert_eq!(ledger[0].synced.as_ref().unwrap().counts.inserted, 1);
    assert_eq!(timing(&ledger), None);
    assert_eq!(timing(&owner.ledger(day(0)..=day(0)).await.unwrap()), None);

    // The owner's next apply has its timing again.
    upsert(&owner, day(0), records(3, "x"), WriteOptions::default())
        .await
        .unwrap();
    assert!(timing(&owner.ledger(day(0)..=day(0)).await.unwrap()).is_some());
}
