//! The shared conformance suite against Postgres: what every store must
//! pass; once more with chunks of two records, so every streamed day of
//! the suite spans many pages (and many savepoints, COPYs and listing
//! ranges) and every batch many chunks.

use backfill_testkit as testkit;

backfill_core::conformance_tests!(optional: testkit::store());

mod in_chunks_of_two {
    use super::*;
    use backfill_postgres::PostgresStore;

    async fn store() -> Option<PostgresStore> {
        let url = testkit::url().await?;
        let store = PostgresStore::builder()
            .schema(testkit::unique_schema())
            .page_rows(2)
            .connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connecting to the test Postgres: {e}"));
        Some(store)
    }

    backfill_core::conformance_tests!(optional: store());
}
