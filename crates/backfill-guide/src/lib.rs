//! The guide (`docs/guide/*.md`) and the front page (`README.md`), each
//! page the docs of one module, so that `cargo test` compiles and runs
//! every Rust block in them and `cargo doc` reads them; `tests/links.rs`
//! checks every relative link. A block that cannot run as it stands (a
//! fragment, a live server) is `ignore` or `no_run`, with its reason in an
//! HTML comment on the line above it.
//!
//! Not published: read the pages on GitHub, or under `docs/guide`.
#![forbid(unsafe_code)]
// A guide's block may name a value it does not go on to use; every other
// warning fails the block.
#![doc(test(attr(deny(warnings), allow(unused))))]

#[doc = include_str!("../../../README.md")]
pub mod front_page {}

#[doc = include_str!("../../../docs/guide/README.md")]
pub mod contents {}

#[doc = include_str!("../../../docs/guide/concepts.md")]
pub mod concepts {}

#[doc = include_str!("../../../docs/guide/engine.md")]
pub mod engine {}

#[doc = include_str!("../../../docs/guide/cli.md")]
pub mod cli {}

#[doc = include_str!("../../../docs/guide/python.md")]
pub mod python {}

#[doc = include_str!("../../../docs/guide/orchestrators.md")]
pub mod orchestrators {}

#[doc = include_str!("../../../docs/guide/operations.md")]
pub mod operations {}

#[doc = include_str!("../../../docs/guide/sqlite.md")]
pub mod sqlite {}

#[doc = include_str!("../../../docs/guide/postgres.md")]
pub mod postgres {}

#[doc = include_str!("../../../docs/guide/delta.md")]
pub mod delta {}

#[doc = include_str!("../../../docs/guide/typed-columns.md")]
pub mod typed_columns {}

#[doc = include_str!("../../../docs/guide/history.md")]
pub mod history {}

#[doc = include_str!("../../../docs/guide/own-store.md")]
pub mod own_store {}

#[doc = include_str!("../../../docs/guide/performance.md")]
pub mod performance {}

#[doc = include_str!("../../../docs/guide/development.md")]
pub mod development {}
