//! The shared conformance suite against Postgres: what every store must
//! pass.

use backfill_testkit as testkit;

backfill_core::conformance_tests!(optional: testkit::store());
