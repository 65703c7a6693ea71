//! Opening a store: an existing table must be the one the store would have
//! created, a role without DDL rights (or a read-only database) can still
//! open an existing table, and the `event_date` index can never be lost to
//! a name collision.

use backfill_core::columns::Column;
use backfill_core::conformance::fixtures::{at, day, jan, kv, rec, tomb};
use backfill_core::{upsert, Error, Store, WriteOptions};
use backfill_postgres::tokio_postgres::{error::SqlState, Client, Config};
use backfill_postgres::{PostgresStore, TableMismatch};
use backfill_testkit as testkit;

/// The columns of the table as the store creates it, one per line, so a
/// test can swap one line for a flawed one.
const KEY: &str = r#"key text COLLATE "C" PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 512)"#;
const EVENT_DATE: &str =
    "event_date date NOT NULL CHECK (event_date BETWEEN '0001-01-01' AND '9999-12-31')";
const VALUE: &str = r#"value text COLLATE "C" NOT NULL"#;
const UPDATED_AT: &str = "updated_at timestamptz NOT NULL \
    CHECK (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00')";
/// Schema version 2 appends `deleted`, with its CHECK.
const DELETED: &str = "deleted boolean NOT NULL DEFAULT false CHECK (NOT deleted OR value = '')";

/// The schema's metadata tables of schema version 2, as a migration tool
/// would create them, and the version row of `records`.
fn metadata_ddl_v2(schema: &str) -> String {
    format!(
        r#"CREATE TABLE {schema}.backfill_tables (records_table text COLLATE "C" PRIMARY KEY, schema_version integer NOT NULL);
           CREATE TABLE {schema}.backfill_days (records_table text COLLATE "C" NOT NULL, day date NOT NULL,
               listing_watermark timestamptz NULL, PRIMARY KEY (records_table, day));
           INSERT INTO {schema}.backfill_tables VALUES ('records', 2);"#
    )
}

/// The columns schema version 3 appends to `backfill_days` (the day
/// ledger), as the crate docs give them to a migration tool.
const LEDGER_COLUMNS: &str = r#"
    synced_at         timestamptz NULL,
    run_id            text COLLATE "C" NULL,
    mode              text NULL CHECK (mode IN ('merge', 'replace')),
    as_of             timestamptz NULL,
    digest            text NULL CHECK (digest ~ '^[0-9a-f]{32}$'),
    inserted          bigint NULL CHECK (inserted >= 0),
    updated           bigint NULL CHECK (updated >= 0),
    unchanged         bigint NULL CHECK (unchanged >= 0),
    stale             bigint NULL CHECK (stale >= 0),
    deleted           bigint NULL CHECK (deleted >= 0),
    unlisted          bigint NULL CHECK (unlisted >= 0),
    collapsed         bigint NULL CHECK (collapsed >= 0),
    failed_at         timestamptz NULL,
    failed_run_id     text NULL,
    attempts          integer NULL CHECK (attempts >= 1),
    error             text NULL"#;

/// A migration tool's step of `schema` from version 2 to 3: the ledger
/// columns on `backfill_days`, the version row of `records`.
fn migrate_2_to_3(schema: &str) -> String {
    let add: Vec<String> = LEDGER_COLUMNS
        .split(",\n")
        .map(|c| format!("ADD COLUMN {}", c.trim()))
        .collect();
    format!(
        "ALTER TABLE {schema}.backfill_days {}; \
         UPDATE {schema}.backfill_tables SET schema_version = 3 WHERE records_table = 'records';",
        add.join(", ")
    )
}

/// The columns of `backfill_days` at schema version 3, in order.
const DAYS_COLUMNS: [&str; 19] = [
    "records_table",
    "day",
    "listing_watermark",
    "synced_at",
    "run_id",
    "mode",
    "as_of",
    "digest",
    "inserted",
    "updated",
    "unchanged",
    "stale",
    "deleted",
    "unlisted",
    "collapsed",
    "failed_at",
    "failed_run_id",
    "attempts",
    "error",
];

/// A collation that does not compare by bytes: ICU's root collation when
/// the server has ICU, else the libc `en_US` or `POSIX`… one that exists.
async fn other_collation(admin: &Client) -> String {
    admin
        .query_one(
            "SELECT collname FROM pg_collation WHERE collname IN ('und-x-icu', 'en_US', 'POSIX') \
             ORDER BY collname = 'und-x-icu' DESC, collname = 'en_US' DESC LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Creates `schema.records` from `columns`, then opens a store on it.
async fn open_existing(
    url: &str,
    admin: &Client,
    columns: &[&str],
) -> Result<PostgresStore, Error> {
    let schema = testkit::unique_schema();
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.records ({}); \
             CREATE INDEX ON {schema}.records (event_date);",
            columns.join(", ")
        ))
        .await
        .unwrap();
    PostgresStore::builder()
        .schema(schema)
        .table("records")
        .connect(url)
        .await
}

#[tokio::test]
async fn an_existing_table_of_another_shape_is_refused() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let other = other_collation(&admin).await;
    let key_collated = KEY.replace(r#"COLLATE "C""#, &format!(r#"COLLATE "{other}""#));
    let value_collated = VALUE.replace(r#"COLLATE "C""#, &format!(r#"COLLATE "{other}""#));
    let key_without_pk = KEY.replace("PRIMARY KEY", "NOT NULL");
    let key_without_check = r#"key text COLLATE "C" PRIMARY KEY"#;
    let value_nullable = VALUE.replace(" NOT NULL", "");
    let updated_at_millis = UPDATED_AT.replace("timestamptz", "timestamptz(3)");
    // (what is wrong, the columns, the column the error must name, a word
    // the error must use for what differs)
    let cases: Vec<(&str, Vec<&str>, &str, &str)> = vec![
        (
            "ICU or other collation on value",
            vec![KEY, EVENT_DATE, &value_collated, UPDATED_AT],
            "value",
            "collation",
        ),
        (
            "ICU or other collation on key",
            vec![&key_collated, EVENT_DATE, VALUE, UPDATED_AT],
            "key",
            "collation",
        ),
        (
            "updated_at without time zone",
            vec![
                KEY,
                EVENT_DATE,
                VALUE,
                "updated_at timestamp NOT NULL CHECK (updated_at >= '0001-01-01' AND updated_at < '10000-01-01')",
            ],
            "updated_at",
            "timestamp without time zone",
        ),
        (
            "updated_at in milliseconds",
            vec![KEY, EVENT_DATE, VALUE, &updated_at_millis],
            "updated_at",
            "timestamp(3) with time zone",
        ),
        (
            "value as jsonb",
            vec![KEY, EVENT_DATE, "value jsonb NOT NULL", UPDATED_AT],
            "value",
            "jsonb",
        ),
        (
            "event_date as text",
            vec![
                KEY,
                r#"event_date text COLLATE "C" NOT NULL"#,
                VALUE,
                UPDATED_AT,
            ],
            "event_date",
            "text",
        ),
        (
            "key as varchar",
            vec![
                r#"key varchar(600) COLLATE "C" PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 512)"#,
                EVENT_DATE,
                VALUE,
                UPDATED_AT,
            ],
            "key",
            "character varying",
        ),
        (
            "no primary key",
            vec![&key_without_pk, EVENT_DATE, VALUE, UPDATED_AT],
            "key",
            "primary key",
        ),
        (
            "value may be NULL",
            vec![KEY, EVENT_DATE, &value_nullable, UPDATED_AT],
            "value",
            "NOT NULL",
        ),
        (
            "no CHECK on key",
            vec![key_without_check, EVENT_DATE, VALUE, UPDATED_AT],
            "key",
            "CHECK",
        ),
        (
            "a CHECK of its own",
            vec![KEY, EVENT_DATE, VALUE, UPDATED_AT, "CHECK (value <> '')"],
            "value",
            "CHECK",
        ),
        (
            "a missing column",
            vec![KEY, EVENT_DATE, VALUE],
            "updated_at",
            "missing",
        ),
        (
            "a column of its own",
            vec![KEY, EVENT_DATE, VALUE, UPDATED_AT, "source text"],
            "source",
            "unexpected",
        ),
    ];
    for (what, columns, column, differs) in cases {
        match open_existing(&url, &admin, &columns).await {
            Err(
                e @ Error::Open {
                    backend: "postgres",
                    ..
                },
            ) => {
                let message = e.to_string();
                assert!(
                    message.contains(column) && message.contains(differs),
                    "{what}: the error must name {column:?} and {differs:?}: {message}"
                );
                let Error::Open { source, .. } = &e else {
                    unreachable!()
                };
                let mismatch = source
                    .downcast_ref::<TableMismatch>()
                    .unwrap_or_else(|| panic!("{what}: the source is a TableMismatch: {e}"));
                assert!(
                    mismatch
                        .differences()
                        .iter()
                        .any(|d| d.column() == Some(column) && d.problem().contains(differs)),
                    "{what}: {mismatch:?}"
                );
            }
            Err(e) => panic!("{what}: expected Open, got {e:?}"),
            Ok(store) => panic!("{what}: a table of another shape was accepted: {store:?}"),
        }
    }
}

/// A table created by an earlier version of this store (same columns and
/// checks, index named `<table>_event_date`) opens, and so does one the
/// store created itself, again and again.
#[tokio::test]
async fn tables_the_store_made_are_accepted() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let store = open_existing(&url, &admin, &[KEY, EVENT_DATE, VALUE, UPDATED_AT])
        .await
        .expect("the table the store would create");
    upsert(&store, day(0), vec![kv("a", "1")], WriteOptions::default())
        .await
        .unwrap();
    let fresh = testkit::store().await.unwrap();
    for _ in 0..2 {
        let again = PostgresStore::builder()
            .schema(fresh.schema())
            .table(fresh.table())
            .connect(&url)
            .await
            .expect("a table the store created itself");
        assert!(again.rows().await.unwrap().is_empty());
    }
}

/// The number of valid, non-partial indexes of `schema.table` whose only
/// key column is `event_date`.
async fn event_date_indexes(admin: &Client, schema: &str, table: &str) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pg_index i \
             JOIN pg_class t ON t.oid = i.indrelid \
             JOIN pg_namespace n ON n.oid = t.relnamespace \
             JOIN pg_attribute a ON a.attrelid = t.oid AND a.attname = 'event_date' \
             WHERE n.nspname = $1 AND t.relname = $2 AND i.indnkeyatts = 1 \
               AND i.indkey[0] = a.attnum AND i.indpred IS NULL AND i.indisvalid",
            &[&schema, &table],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn index_names_cannot_collide() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let open = |schema: String, table: String| {
        let url = url.clone();
        async move {
            PostgresStore::builder()
                .schema(schema)
                .table(table)
                .connect(&url)
                .await
                .unwrap()
        }
    };
    // A 63-byte name: `<table>_event_date` truncated to 63 bytes is the
    // table's own name.
    let schema = testkit::unique_schema();
    let long = "t".repeat(63);
    let (a, b, c) = tokio::join!(
        open(schema.clone(), long.clone()),
        open(schema.clone(), long.clone()),
        open(schema.clone(), long.clone())
    );
    drop((a, b, c));
    assert_eq!(
        event_date_indexes(&admin, &schema, &long).await,
        1,
        "a 63-byte table name gets exactly one event_date index, however many open it"
    );
    // `c` after `c_event_date`: the name `c_event_date` is taken by a table.
    let schema = testkit::unique_schema();
    open(schema.clone(), "c_event_date".into()).await;
    open(schema.clone(), "c".into()).await;
    open(schema.clone(), "c".into()).await;
    assert_eq!(event_date_indexes(&admin, &schema, "c_event_date").await, 1);
    assert_eq!(
        event_date_indexes(&admin, &schema, "c").await,
        1,
        "table c opened after table c_event_date gets its index"
    );
}

/// The column names of `schema.table`, in order.
async fn columns(admin: &Client, schema: &str, table: &str) -> Vec<String> {
    admin
        .query(
            "SELECT attname::text FROM pg_attribute \
             WHERE attrelid = format('%I.%I', $1::text, $2::text)::regclass \
               AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            &[&schema, &table],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// A role (`name`, password `name`) for the test, dropped by
/// [`drop_role`].
async fn create_role(admin: &Client, name: &str) {
    admin
        .batch_execute(&format!("CREATE ROLE {name} LOGIN PASSWORD '{name}'"))
        .await
        .unwrap();
}

async fn drop_role(admin: &Client, name: &str) {
    admin
        .batch_execute(&format!("DROP OWNED BY {name}; DROP ROLE {name}"))
        .await
        .unwrap();
}

fn config_as(url: &str, role: &str) -> Config {
    let mut config: Config = url.parse().unwrap();
    config.user(role).password(role);
    config
}

fn role_name(what: &str) -> String {
    testkit::unique_schema().replace("test_", what)
}

/// Gives `role` SELECT, INSERT, UPDATE and DELETE on `table` and the
/// schema's two metadata tables, and nothing else.
async fn grant_dml(admin: &Client, schema: &str, table: &str, role: &str) {
    admin
        .batch_execute(&format!(
            "GRANT USAGE ON SCHEMA {schema} TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.{table} TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.backfill_tables, {schema}.backfill_days TO {role};"
        ))
        .await
        .unwrap();
}

/// A role with only SELECT, INSERT, UPDATE and DELETE on an existing table
/// and the schema's two metadata tables (no CREATE on the database or the
/// schema) opens it, reads and writes.
#[tokio::test]
async fn a_least_privilege_role_opens_an_existing_table() {
    let Some(owner) = testkit::store().await else {
        return;
    };
    let url = testkit::url().await.unwrap();
    let admin = crate::admin(&url).await;
    let role = role_name("dml_");
    create_role(&admin, &role).await;
    let (schema, table) = (owner.schema(), owner.table());
    grant_dml(&admin, schema, table, &role).await;
    let opened = PostgresStore::builder()
        .schema(schema)
        .table(table)
        .connect_with(config_as(&url, &role))
        .await;
    let result = async {
        let store = opened?;
        upsert(&store, day(0), vec![kv("a", "1")], WriteOptions::default()).await?;
        store.rows().await
    }
    .await;
    drop_role(&admin, &role).await;
    assert_eq!(
        result.expect("a role with DML rights only must open an existing table"),
        [kv("a", "1")]
    );
}

/// The same role on a table with typed columns (one indexed): it opens it
/// with the table's declaration and writes the columns; a declaration that
/// would add a column, which takes DDL, is refused and changes nothing.
#[tokio::test]
async fn a_least_privilege_role_writes_an_existing_tables_typed_columns() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let declared = || {
        vec![
            Column::parse("status:text").unwrap().indexed(true),
            Column::parse("total_cents:integer").unwrap(),
        ]
    };
    let schema = testkit::unique_schema();
    let owner = PostgresStore::builder()
        .schema(&schema)
        .columns(declared())
        .connect(&url)
        .await
        .unwrap();
    let admin = crate::admin(&url).await;
    let role = role_name("typed_");
    create_role(&admin, &role).await;
    let table = owner.table();
    grant_dml(&admin, &schema, table, &role).await;
    let open_as = |columns: Vec<Column>| {
        PostgresStore::builder()
            .schema(&schema)
            .columns(columns)
            .connect_with(config_as(&url, &role))
    };
    let written = async {
        let store = open_as(declared()).await?;
        let value = r#"{"status": "paid", "total_cents": 1250}"#;
        upsert(
            &store,
            day(0),
            vec![rec("o1", day(0), value, at(1))],
            WriteOptions::default(),
        )
        .await
    }
    .await;
    let mut more = declared();
    more.push(Column::parse("paid:boolean?").unwrap());
    let widened = open_as(more).await.map(|_| ());
    drop_role(&admin, &role).await;
    let counts = written.expect("a role with DML rights only writes the typed columns");
    assert_eq!(counts.inserted, 1);
    let row = admin
        .query_one(
            &format!("SELECT status, total_cents FROM {schema}.{table}"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, i64>(1)),
        ("paid".to_owned(), 1250)
    );
    let err = widened.expect_err("adding a column takes DDL rights");
    assert!(err.to_string().contains("paid"), "{err}");
    let columns: i64 = admin
        .query_one(
            "SELECT count(*) FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = $2 AND column_name = 'paid'",
            &[&schema, &table],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(columns, 0, "nothing was added");
}

/// A role whose transactions are read-only (as on a replica) opens an
/// existing table and reads it; a write is a clear, non-retryable error.
#[tokio::test]
async fn a_read_only_role_reads_and_cannot_write() {
    let Some(owner) = testkit::store().await else {
        return;
    };
    upsert(&owner, day(0), vec![kv("a", "1")], WriteOptions::default())
        .await
        .unwrap();
    let url = testkit::url().await.unwrap();
    let admin = crate::admin(&url).await;
    let role = role_name("ro_");
    create_role(&admin, &role).await;
    let (schema, table) = (owner.schema(), owner.table());
    admin
        .batch_execute(&format!(
            "GRANT ALL ON SCHEMA {schema} TO {role}; \
             GRANT ALL ON {schema}.{table} TO {role}; \
             GRANT ALL ON {schema}.backfill_tables, {schema}.backfill_days TO {role}; \
             ALTER ROLE {role} SET default_transaction_read_only = on;"
        ))
        .await
        .unwrap();
    let opened = PostgresStore::builder()
        .schema(schema)
        .table(table)
        .connect_with(config_as(&url, &role))
        .await;
    let result = async {
        let store = opened?;
        let rows = store.rows().await?;
        let write = upsert(&store, day(0), vec![kv("b", "2")], WriteOptions::default()).await;
        Ok::<_, Error>((rows, write))
    }
    .await;
    drop_role(&admin, &role).await;
    let (rows, write) = result.expect("a read-only role must open an existing table and read it");
    assert_eq!(rows, [kv("a", "1")]);
    match write {
        Err(ref e @ Error::Backend { ref source, .. }) => {
            assert!(
                !e.is_retryable(),
                "a read-only database is not transient: {e}"
            );
            let code = source
                .downcast_ref::<backfill_postgres::tokio_postgres::Error>()
                .and_then(|e| e.code());
            assert_eq!(code, Some(&SqlState::READ_ONLY_SQL_TRANSACTION), "{e}");
        }
        other => panic!("expected a Backend error, got {other:?}"),
    }
    assert_eq!(owner.rows().await.unwrap(), [kv("a", "1")]);
}

/// With `create_if_missing(false)` nothing is ever created: a missing
/// schema, table or index, or a table of schema version 1, is an Open error
/// saying what is missing, and the catalog is unchanged; an existing table
/// of the current version opens as usual.
#[tokio::test]
async fn a_store_told_not_to_create_runs_no_ddl() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let schema = testkit::unique_schema();
    let open = |table: &str| {
        PostgresStore::builder()
            .schema(schema.clone())
            .table(table)
            .create_if_missing(false)
            .connect(&url)
    };
    let refused = |result: Result<PostgresStore, Error>, what: &str| match result {
        Err(
            e @ Error::Open {
                backend: "postgres",
                ..
            },
        ) => {
            assert!(e.to_string().contains(what), "{e}");
        }
        other => panic!("expected Open naming {what:?}, got {other:?}"),
    };
    refused(open("records").await, "schema");
    let exists: bool = admin
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!exists, "the schema must not have been created");

    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.records ({KEY}, {EVENT_DATE}, {VALUE}, {UPDATED_AT});"
        ))
        .await
        .unwrap();
    refused(open("missing").await, "does not exist");
    // A table of schema version 1 needs one open with DDL rights.
    refused(open("records").await, "schema version 1");
    assert!(
        !columns(&admin, &schema, "records")
            .await
            .contains(&"deleted".to_owned()),
        "the table must not have been upgraded"
    );

    // What a migration tool creates for version 2: the table with
    // `deleted`, the metadata tables and the version row. Version 2 needs
    // one open with DDL rights too.
    admin
        .batch_execute(&format!(
            "DROP TABLE {schema}.records; \
             CREATE TABLE {schema}.records ({KEY}, {EVENT_DATE}, {VALUE}, {UPDATED_AT}, {DELETED}); {}",
            metadata_ddl_v2(&schema)
        ))
        .await
        .unwrap();
    refused(open("records").await, "schema version 2");
    // A version row saying 3 on a `backfill_days` without the ledger: the
    // open names the columns to add.
    admin
        .batch_execute(&format!(
            "UPDATE {schema}.backfill_tables SET schema_version = 3"
        ))
        .await
        .unwrap();
    refused(open("records").await, "day ledger");
    assert_eq!(
        columns(&admin, &schema, "backfill_days").await,
        DAYS_COLUMNS[..3],
        "backfill_days must not have been upgraded"
    );
    // The migration tool's step to version 3.
    admin.batch_execute(&migrate_2_to_3(&schema)).await.unwrap();
    refused(open("records").await, "index on (event_date)");
    assert_eq!(event_date_indexes(&admin, &schema, "records").await, 0);

    admin
        .batch_execute(&format!("CREATE INDEX ON {schema}.records (event_date)"))
        .await
        .unwrap();
    let store = open("records").await.expect("everything exists");
    upsert(&store, day(0), vec![kv("a", "1")], WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(store.rows().await.unwrap(), [kv("a", "1")]);
}

/// `xmin` of the catalog row of `schema.table` and of its version row:
/// both change if an open runs DDL on the table or rewrites its version.
async fn catalog_versions(admin: &Client, schema: &str, table: &str) -> (String, String) {
    let row = admin
        .query_one(
            &format!(
                "SELECT (SELECT xmin::text FROM pg_class \
                         WHERE oid = format('%I.%I', $1::text, $2::text)::regclass), \
                        (SELECT xmin::text FROM {schema}.backfill_tables WHERE records_table = $2)"
            ),
            &[&schema, &table],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// The DDL of schema version 1 (commit d5cb5de), verbatim, with three
/// rows.
fn v1_ddl(schema: &str) -> String {
    format!(
        r#"CREATE SCHEMA {schema};
CREATE TABLE IF NOT EXISTS "{schema}"."records" (
    key        text COLLATE "C" PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 512),
    event_date date NOT NULL CHECK (event_date BETWEEN '0001-01-01' AND '9999-12-31'),
    value      text COLLATE "C" NOT NULL,
    updated_at timestamptz NOT NULL CHECK (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00')
);
CREATE INDEX ON "{schema}"."records" (event_date);
INSERT INTO {schema}.records VALUES
    ('a', '2026-01-01', '1', '2026-01-01 00:00:00+00'),
    ('b', '2026-01-01', '', '2026-01-01 00:00:00+00'),
    ('c', '2026-01-02', '3', '2026-01-02 00:00:00+00');"#
    )
}

/// A table of schema version 1 (what the release before tombstones
/// created, rows and all) is upgraded in place by the first open, even by
/// several at once: every row kept, live; writes then work; opening again
/// changes nothing.
#[tokio::test]
async fn a_version_1_table_is_upgraded_in_place() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let schema = testkit::unique_schema();
    admin.batch_execute(&v1_ddl(&schema)).await.unwrap();
    let open = || {
        PostgresStore::builder()
            .schema(schema.clone())
            .table("records")
            .connect(&url)
    };
    let (a, b, c) = tokio::join!(open(), open(), open());
    let (store, _b, _c) = (a.unwrap(), b.unwrap(), c.unwrap());
    let kept = vec![
        rec("a", jan(1), "1", at(0)),
        rec("b", jan(1), "", at(0)),
        rec("c", jan(2), "3", at(86_400)),
    ];
    assert_eq!(store.rows().await.unwrap(), kept, "every row kept, live");
    assert_eq!(store.rows_with_tombstones().await.unwrap(), kept);
    assert_eq!(
        columns(&admin, &schema, "records").await,
        ["key", "event_date", "value", "updated_at", "deleted"]
    );
    assert_eq!(
        columns(&admin, &schema, "backfill_days").await,
        DAYS_COLUMNS
    );
    let version: i32 = admin
        .query_one(
            &format!("SELECT schema_version FROM {schema}.backfill_tables WHERE records_table = 'records'"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // Version 1 goes to 2 and on to the current 3 in one open.
    assert_eq!(version, 3);
    assert!(
        store.ledger(jan(1)..=jan(2)).await.unwrap().is_empty(),
        "no day was synced through the ledger yet"
    );

    // Writes work: a listing of January 1st without `b` makes its tombstone.
    let listing = WriteOptions::default()
        .mode(backfill_core::Mode::Replace)
        .as_of(at(3600));
    let counts = upsert(&store, jan(1), vec![kept[0].clone()], listing)
        .await
        .unwrap();
    assert_eq!(
        (counts.unchanged, counts.deleted, counts.unlisted),
        (1, 1, 1)
    );
    assert_eq!(
        store.rows().await.unwrap(),
        [kept[0].clone(), kept[2].clone()]
    );
    let ledger = store.ledger(jan(1)..=jan(2)).await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].state(), backfill_core::DayState::Synced);
    assert_eq!(ledger[0].synced.as_ref().unwrap().counts.unlisted, 1);

    // Opening again is a no-op: no DDL, no new version row.
    let before = catalog_versions(&admin, &schema, "records").await;
    for create in [true, false] {
        let again = PostgresStore::builder()
            .schema(schema.clone())
            .table("records")
            .create_if_missing(create)
            .connect(&url)
            .await
            .unwrap();
        assert_eq!(again.rows().await.unwrap().len(), 2);
    }
    assert_eq!(catalog_versions(&admin, &schema, "records").await, before);
}

/// Opens racing an upgrade, round after round, each open the upgraded
/// table: a catalog read taken while another open's upgrade commits is
/// taken again under the schema's lock, not refused or failed.
#[tokio::test]
async fn opens_racing_an_upgrade_all_open_it() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    for _ in 0..8 {
        let schema = testkit::unique_schema();
        admin.batch_execute(&v1_ddl(&schema)).await.unwrap();
        let opens = (0..6).map(|_| {
            PostgresStore::builder()
                .schema(schema.clone())
                .table("records")
                .connect(&url)
        });
        for (i, opened) in futures_util::future::join_all(opens)
            .await
            .into_iter()
            .enumerate()
        {
            let store = opened.unwrap_or_else(|e| panic!("open {i} of {schema}: {e}"));
            assert_eq!(store.rows().await.unwrap().len(), 3);
        }
        assert_eq!(version_of(&admin, &schema, "records").await, 3);
    }
}

/// A role that may not run DDL on a version-1 table (a least-privilege
/// role, a read-only server) cannot upgrade it: a clear Open error, and the
/// table is left as it was.
#[tokio::test]
async fn a_version_1_table_needs_ddl_rights_to_upgrade() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let schema = testkit::unique_schema();
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.records ({KEY}, {EVENT_DATE}, {VALUE}, {UPDATED_AT}); \
             CREATE INDEX ON {schema}.records (event_date); \
             INSERT INTO {schema}.records VALUES ('a', '2026-01-01', '1', '2026-01-01 00:00:00+00');"
        ))
        .await
        .unwrap();
    let role = role_name("v1_");
    create_role(&admin, &role).await;
    admin
        .batch_execute(&format!(
            "GRANT USAGE ON SCHEMA {schema} TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.records TO {role};"
        ))
        .await
        .unwrap();
    let least = PostgresStore::builder()
        .schema(schema.clone())
        .table("records")
        .connect_with(config_as(&url, &role))
        .await;
    admin
        .batch_execute(&format!(
            "ALTER ROLE {role} SET default_transaction_read_only = on; \
             GRANT ALL ON SCHEMA {schema} TO {role}; GRANT ALL ON {schema}.records TO {role};"
        ))
        .await
        .unwrap();
    let read_only = PostgresStore::builder()
        .schema(schema.clone())
        .table("records")
        .connect_with(config_as(&url, &role))
        .await;
    drop_role(&admin, &role).await;
    for (what, result) in [("least privilege", least), ("read-only", read_only)] {
        match result {
            Err(ref e @ Error::Open { .. }) => {
                let message = e.to_string();
                assert!(
                    message.contains("schema version 1") && message.contains("DDL"),
                    "{what}: {message}"
                );
            }
            other => panic!("{what}: expected Open, got {other:?}"),
        }
    }
    assert_eq!(
        columns(&admin, &schema, "records").await,
        ["key", "event_date", "value", "updated_at"],
        "left as it was"
    );
    let metadata: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname LIKE 'backfill_%'",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(metadata, 0);
}

/// A table recorded at a schema version newer than this release's is
/// refused, and so is any table of a schema where another one is.
#[tokio::test]
async fn a_newer_schema_version_is_refused() {
    let Some(store) = testkit::store().await else {
        return;
    };
    let url = testkit::url().await.unwrap();
    let admin = crate::admin(&url).await;
    let schema = store.schema();
    admin
        .batch_execute(&format!(
            "UPDATE {schema}.backfill_tables SET schema_version = 4 WHERE records_table = '{}'",
            store.table()
        ))
        .await
        .unwrap();
    for table in [store.table(), "other"] {
        let result = PostgresStore::builder()
            .schema(schema)
            .table(table)
            .connect(&url)
            .await;
        match result {
            Err(ref e @ Error::Open { .. }) => {
                assert!(e.to_string().contains("schema version 4"), "{e}");
            }
            other => panic!("{table}: expected Open, got {other:?}"),
        }
    }
}

/// The schema's metadata tables are checked like the records table: one of
/// another shape is refused with a TableMismatch naming it.
#[tokio::test]
async fn metadata_tables_of_another_shape_are_refused() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let cases = [
        (
            "backfill_tables",
            "CREATE TABLE {s}.backfill_tables (records_table text PRIMARY KEY, schema_version integer NOT NULL)",
            "collation",
        ),
        (
            "backfill_tables",
            r#"CREATE TABLE {s}.backfill_tables (records_table text COLLATE "C" PRIMARY KEY, schema_version text NOT NULL)"#,
            "type text",
        ),
        (
            "backfill_days",
            r#"CREATE TABLE {s}.backfill_days (records_table text COLLATE "C" NOT NULL, day date NOT NULL,
                 listing_watermark timestamptz NULL)"#,
            "primary key",
        ),
        (
            "backfill_days",
            r#"CREATE TABLE {s}.backfill_days (records_table text COLLATE "C" NOT NULL, day date NOT NULL,
                 listing_watermark timestamp NULL, PRIMARY KEY (records_table, day))"#,
            "timestamp without time zone",
        ),
        (
            "backfill_days",
            "CREATE VIEW {s}.backfill_days AS SELECT 1 AS x",
            "view",
        ),
        // Half the ledger: neither version 2 nor 3.
        (
            "backfill_days",
            r#"CREATE TABLE {s}.backfill_days (records_table text COLLATE "C" NOT NULL, day date NOT NULL,
                 listing_watermark timestamptz NULL, synced_at timestamptz NULL, error text NULL,
                 PRIMARY KEY (records_table, day))"#,
            r#"column "digest": missing"#,
        ),
        // A ledger count of another type.
        (
            "backfill_days",
            r#"CREATE TABLE {s}.backfill_days (records_table text COLLATE "C" NOT NULL, day date NOT NULL,
                 listing_watermark timestamptz NULL, {ledger}, PRIMARY KEY (records_table, day))"#,
            r#"column "inserted": type integer, expected bigint"#,
        ),
    ];
    for (relation, ddl, differs) in cases {
        let schema = testkit::unique_schema();
        admin
            .batch_execute(&format!(
                "CREATE SCHEMA {schema}; {}",
                ddl.replace("{s}", &schema).replace(
                    "{ledger}",
                    &LEDGER_COLUMNS.replace("inserted          bigint", "inserted integer")
                )
            ))
            .await
            .unwrap();
        let result = PostgresStore::builder()
            .schema(schema.clone())
            .connect(&url)
            .await;
        match result {
            Err(ref e @ Error::Open { ref source, .. }) => {
                let mismatch = source
                    .downcast_ref::<TableMismatch>()
                    .unwrap_or_else(|| panic!("{relation}: the source is a TableMismatch: {e}"));
                assert_eq!(mismatch.table(), format!("\"{schema}\".\"{relation}\""));
                assert!(e.to_string().contains(differs), "{relation}: {e}");
            }
            other => panic!("{relation}: expected Open, got {other:?}"),
        }
        let records: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = 'backfill_records'",
                &[&schema],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(records, 0, "{relation}: nothing is created beside it");
    }
}

/// A table created where a dropped table of the same name kept listing
/// watermarks starts without them: they would otherwise turn the new
/// table's first rows into tombstones.
#[tokio::test]
async fn a_new_table_forgets_a_dropped_tables_watermarks() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let schema = testkit::unique_schema();
    let open = || {
        PostgresStore::builder()
            .schema(schema.clone())
            .table("records")
            .connect(&url)
    };
    let store = open().await.unwrap();
    let listing = WriteOptions::default()
        .mode(backfill_core::Mode::Replace)
        .as_of(at(86_400));
    upsert(&store, day(0), vec![kv("a", "1")], listing)
        .await
        .unwrap();
    drop(store);
    admin
        .batch_execute(&format!("DROP TABLE {schema}.records"))
        .await
        .unwrap();
    let store = open().await.unwrap();
    let counts = upsert(&store, day(0), vec![kv("b", "1")], WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        counts.inserted, 1,
        "the old table's watermark applied: {counts:?}"
    );
    assert_eq!(store.rows().await.unwrap(), [kv("b", "1")]);
}

/// `xmin` of the catalog row of `schema.relation`: it changes with any DDL
/// on it.
async fn catalog_xmin(admin: &Client, schema: &str, relation: &str) -> String {
    admin
        .query_one(
            "SELECT xmin::text FROM pg_class WHERE oid = format('%I.%I', $1::text, $2::text)::regclass",
            &[&schema, &relation],
        )
        .await
        .unwrap()
        .get(0)
}

/// A schema of version 2 (what the release before the day ledger created:
/// two records tables with rows and tombstones, listing watermarks in
/// `backfill_days`).
async fn create_v2_schema(admin: &Client, schema: &str) {
    let table = |name: &str| {
        format!(
            r#"CREATE TABLE "{schema}"."{name}" (
    key        text COLLATE "C" PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 512),
    event_date date NOT NULL CHECK (event_date BETWEEN '0001-01-01' AND '9999-12-31'),
    value      text COLLATE "C" NOT NULL,
    updated_at timestamptz NOT NULL CHECK (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00'),
    deleted    boolean NOT NULL DEFAULT false,
    CHECK (NOT deleted OR value = '')
);
CREATE INDEX ON "{schema}"."{name}" (event_date);"#
        )
    };
    admin
        .batch_execute(&format!(
            r#"CREATE SCHEMA {schema};
{records}
{others}
CREATE TABLE IF NOT EXISTS "{schema}"."backfill_tables" (
    records_table  text COLLATE "C" PRIMARY KEY,
    schema_version integer NOT NULL
);
CREATE TABLE IF NOT EXISTS "{schema}"."backfill_days" (
    records_table     text COLLATE "C" NOT NULL,
    day               date NOT NULL,
    listing_watermark timestamptz NULL,
    PRIMARY KEY (records_table, day)
);
INSERT INTO {schema}.backfill_tables VALUES ('records', 2), ('others', 2);
INSERT INTO {schema}.records VALUES
    ('a', '2026-01-01', '1', '2026-01-01 00:00:00+00', false),
    ('b', '2026-01-01', '', '2026-01-01 00:00:00+00', true),
    ('c', '2026-01-02', '3', '2026-01-02 00:00:00+00', false);
INSERT INTO {schema}.others VALUES ('x', '2026-01-01', 'x', '2026-01-01 00:00:00+00', false);
INSERT INTO {schema}.backfill_days VALUES
    ('records', '2026-01-01', '2026-01-01 01:00:00+00'),
    ('others', '2026-01-01', '2026-01-01 02:00:00+00');"#,
            records = table("records"),
            others = table("others"),
        ))
        .await
        .unwrap();
}

/// The schema version recorded for `schema.table`.
async fn version_of(admin: &Client, schema: &str, table: &str) -> i32 {
    admin
        .query_one(
            &format!(
                "SELECT schema_version FROM {schema}.backfill_tables WHERE records_table = $1"
            ),
            &[&table],
        )
        .await
        .unwrap()
        .get(0)
}

/// A schema of version 2 is upgraded in place by the first opens, even
/// several at once on two records tables: `backfill_days` gets the ledger
/// columns once, every row, tombstone and watermark is kept, the days
/// synced before read as missing; writes then work and fill the ledger;
/// opening again changes nothing.
#[tokio::test]
async fn a_version_2_schema_is_upgraded_in_place() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let schema = testkit::unique_schema();
    create_v2_schema(&admin, &schema).await;
    let open = |table: &'static str| {
        PostgresStore::builder()
            .schema(schema.clone())
            .table(table)
            .connect(&url)
    };
    let (a, b, c) = tokio::join!(open("records"), open("others"), open("records"));
    let (store, others, _c) = (a.unwrap(), b.unwrap(), c.unwrap());
    assert_eq!(
        columns(&admin, &schema, "backfill_days").await,
        DAYS_COLUMNS
    );
    assert_eq!(version_of(&admin, &schema, "records").await, 3);
    assert_eq!(version_of(&admin, &schema, "others").await, 3);

    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        [
            rec("a", jan(1), "1", at(0)),
            tomb("b", jan(1), at(0)),
            rec("c", jan(2), "3", at(86_400)),
        ],
        "every row and tombstone kept"
    );
    assert_eq!(others.rows().await.unwrap(), [rec("x", jan(1), "x", at(0))]);
    for (store, watermark) in [(&store, at(3600)), (&others, at(7200))] {
        let ledger = store.ledger(jan(1)..=jan(2)).await.unwrap();
        assert_eq!(ledger.len(), 1, "{store:?}");
        assert_eq!(ledger[0].day, jan(1));
        assert_eq!(ledger[0].listing_watermark, Some(watermark), "kept");
        assert_eq!(
            ledger[0].state(),
            backfill_core::DayState::Missing,
            "a day synced before the upgrade reads as missing"
        );
    }

    // The watermark still rules: a version at or before it arrives deleted.
    // And the day is now in the ledger, its watermark kept.
    let late = rec("d", jan(1), "4", at(0));
    let counts = upsert(&store, jan(1), vec![late], WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(counts.deleted, 1);
    let ledger = store.ledger(jan(1)..=jan(1)).await.unwrap();
    assert_eq!(ledger[0].state(), backfill_core::DayState::Synced);
    assert_eq!(ledger[0].listing_watermark, Some(at(3600)));
    assert_eq!(ledger[0].synced.as_ref().unwrap().counts.deleted, 1);
    // The other table's day is untouched.
    let theirs = others.ledger(jan(1)..=jan(1)).await.unwrap();
    assert_eq!(theirs[0].state(), backfill_core::DayState::Missing);

    // Opening again is a no-op: no DDL on any table, no version row
    // rewritten.
    let catalog = || async {
        (
            catalog_versions(&admin, &schema, "records").await,
            catalog_versions(&admin, &schema, "others").await,
            catalog_xmin(&admin, &schema, "backfill_days").await,
        )
    };
    let before = catalog().await;
    for create in [true, false] {
        for table in ["records", "others"] {
            PostgresStore::builder()
                .schema(schema.clone())
                .table(table)
                .create_if_missing(create)
                .connect(&url)
                .await
                .unwrap();
        }
    }
    assert_eq!(catalog().await, before);
}

/// A role that may not run DDL (least privilege, read-only) cannot add the
/// ledger's columns to a version-2 schema: a clear Open error, and nothing
/// is changed. Once an owner's open has added them, raising a table's
/// version row is all that is left: DML a least-privilege role may do, and
/// a read-only one may not.
#[tokio::test]
async fn a_version_2_schema_needs_ddl_rights_to_upgrade() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let schema = testkit::unique_schema();
    create_v2_schema(&admin, &schema).await;
    let (least, read_only) = (role_name("v2dml_"), role_name("v2ro_"));
    for role in [&least, &read_only] {
        create_role(&admin, role).await;
        admin
            .batch_execute(&format!(
                "GRANT USAGE ON SCHEMA {schema} TO {role}; \
                 GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.records, {schema}.others, \
                     {schema}.backfill_tables, {schema}.backfill_days TO {role};"
            ))
            .await
            .unwrap();
    }
    admin
        .batch_execute(&format!(
            "ALTER ROLE {read_only} SET default_transaction_read_only = on"
        ))
        .await
        .unwrap();
    let open_as = |role: &str, table: &'static str| {
        PostgresStore::builder()
            .schema(schema.clone())
            .table(table)
            .connect_with(config_as(&url, role))
    };
    let first = [
        ("least privilege", open_as(&least, "records").await),
        ("read-only", open_as(&read_only, "records").await),
    ];
    let unchanged = columns(&admin, &schema, "backfill_days").await;
    let version = version_of(&admin, &schema, "records").await;
    // The owner upgrades the schema through the other table.
    PostgresStore::builder()
        .schema(schema.clone())
        .table("others")
        .connect(&url)
        .await
        .unwrap();
    let read_only_after = open_as(&read_only, "records").await;
    let least_after = match open_as(&least, "records").await {
        Ok(store) => store.rows().await.map(|rows| rows.len()),
        Err(e) => Err(e),
    };
    drop_role(&admin, &least).await;
    drop_role(&admin, &read_only).await;

    for (what, result) in first {
        match result {
            Err(ref e @ Error::Open { .. }) => {
                let message = e.to_string();
                assert!(
                    message.contains("schema version 2") && message.contains("DDL"),
                    "{what}: {message}"
                );
            }
            other => panic!("{what}: expected Open, got {other:?}"),
        }
    }
    assert_eq!(unchanged, DAYS_COLUMNS[..3], "left as it was");
    assert_eq!(version, 2);
    match read_only_after {
        Err(ref e @ Error::Open { .. }) => {
            assert!(e.to_string().contains("schema version 2"), "{e}");
        }
        other => panic!("read-only: expected Open, got {other:?}"),
    }
    let rows = least_after.expect("only the version row was left to raise");
    assert_eq!(rows, 2);
    assert_eq!(version_of(&admin, &schema, "records").await, 3);
}
