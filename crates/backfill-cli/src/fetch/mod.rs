//! Fetching a day by running a command or reading a file.
//!
//! Both read the [JSON Lines format](crate::jsonl): [`CommandFetch`] from
//! a shell command's standard output, [`FileFetch`] from a file per day.
//! `{day}` in the template stands for the day, `YYYY-MM-DD`.
//!
//! A command's exit status says how a failed day is treated: 0 is success,
//! 75 (`EX_TEMPFAIL` from `sysexits.h`) a transient failure the job
//! retries, anything else (or death by a signal) a permanent one.
//!
//! Both stream: a day is parsed as it is read and handed to the job in
//! chunks ([`Fetched::stream`](backfill_core::Fetched::stream)), so a day
//! of any size is fetched in bounded memory. The output is read only as
//! fast as the job takes the chunks: a command that prints faster blocks
//! on its full pipe. The fetch reads ahead to the first record before it
//! returns, for the day's `as_of` line (which must come first, see
//! [`jsonl`](crate::jsonl)); an error further on — a malformed line, a
//! failed exit status — is the stream's last item, and the job then writes
//! nothing of the day.
//!
//! Both are a [`TemplateFetch`], which holds what they share (the
//! template, the longest line accepted, [`TemplateFetch::stream`] and
//! [`TemplateFetch::records`], the [`Fetch`](backfill_core::Fetch) impl);
//! its [`Source`], [`FromCommand`] or [`FromFile`], says how a day's input
//! is opened.

mod command;
mod error;
mod files;
mod group;
mod stderr;
mod stream;
mod template;
#[cfg(test)]
mod testing;
mod watchdog;

pub use command::{CommandFetch, FromCommand, EXIT_TEMPFAIL, STDOUT_GRACE};
pub use error::FetchError;
pub use files::{FileFetch, FromFile};
pub use group::{kill_running_commands, running_commands};
pub use stream::DayStream;
pub use template::{Source, TemplateFetch};
