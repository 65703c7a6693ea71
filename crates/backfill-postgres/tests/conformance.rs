//! The shared conformance suite against Postgres.

mod support;

backfill_core::conformance_tests!(optional: support::store());
