//! A streamed day ([`DayPages`]) through the one write,
//! [`apply_day`](crate::write::apply_day).
//!
//! `apply_day` runs on tokio's blocking pool, as every SQLite call of the
//! store does, but the pages are behind the caller's `&mut DayPages`,
//! which cannot move there (it is borrowed, not `'static`). So the two
//! halves talk over channels: the caller's task reads one page at a time
//! and sends it; the blocking task receives it as its
//! [`DaySource::next_page`], writes it, and asks back for the guard's
//! verdict and the ledger row, which only the `DayPages` can give. At most
//! three pages exist at once (one being read, one in the channel, one being
//! written), and reading the next page overlaps writing this one.
//!
//! This works on every runtime flavour: nothing blocks the caller's task
//! but reading a page (memory, or the temporary files the job wrote, as
//! `DayPages` documents), whereas `tokio::task::block_in_place`, which
//! would let the whole write run on the caller's thread with the pages
//! borrowed, panics on a current-thread runtime. If the caller's future is dropped mid-day, the
//! channels close, the blocking task's next receive fails, and its
//! transaction rolls back: nothing of the day is written.

use std::borrow::Cow;

use backfill_core::{Counts, DayPages, Error, Record, Result, SyncedDay};
use chrono::{DateTime, NaiveDate, Utc};
use tokio::sync::{mpsc, oneshot};

use crate::builder::PageSize;
use crate::write::DaySource;
use crate::BACKEND;

/// From the reading task to the writing one.
enum Feed {
    Page(Vec<Record>),
    /// The last page was sent. A channel closed without it means the
    /// reader gave up: the writer rolls back.
    End,
}

/// From the writing task to the reading one, each with its reply.
enum Ask {
    CheckReplace {
        would_delete: u64,
        live: u64,
        reply: oneshot::Sender<Result<()>>,
    },
    Synced {
        counts: Counts,
        reply: oneshot::Sender<SyncedDay>,
    },
}

/// The writing side's view of the day: pages and answers from the channels.
struct Fed {
    day: NaiveDate,
    as_of: Option<DateTime<Utc>>,
    days: Vec<NaiveDate>,
    pages: mpsc::Receiver<Feed>,
    asks: mpsc::UnboundedSender<Ask>,
    ended: bool,
}

/// The reader is gone (its future dropped, or it failed and reports its
/// own error): the writer stops and rolls back.
fn reader_gone() -> Error {
    Error::backend(
        BACKEND,
        false,
        "the streamed day's reader stopped before its end; nothing was written",
    )
}

impl Fed {
    fn ask<T>(&self, ask: impl FnOnce(oneshot::Sender<T>) -> Ask) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        self.asks.send(ask(reply)).map_err(|_| reader_gone())?;
        answer.blocking_recv().map_err(|_| reader_gone())
    }
}

impl DaySource for Fed {
    fn day(&self) -> NaiveDate {
        self.day
    }

    fn as_of(&self) -> Option<DateTime<Utc>> {
        self.as_of
    }

    fn days(&self) -> Vec<NaiveDate> {
        self.days.clone()
    }

    fn next_page(&mut self) -> Result<Option<Cow<'_, [Record]>>> {
        if self.ended {
            return Ok(None);
        }
        match self.pages.blocking_recv() {
            Some(Feed::Page(page)) => Ok(Some(Cow::Owned(page))),
            Some(Feed::End) => {
                self.ended = true;
                Ok(None)
            }
            None => Err(reader_gone()),
        }
    }

    fn check_replace(&mut self, would_delete: u64, live: u64) -> Result<()> {
        self.ask(|reply| Ask::CheckReplace {
            would_delete,
            live,
            reply,
        })?
    }

    fn synced(&mut self, counts: Counts) -> Result<SyncedDay> {
        self.ask(|reply| Ask::Synced { counts, reply })
    }
}

/// Applies `pages` with `write`, which runs
/// [`apply_day`](crate::write::apply_day) on the
/// connection on the blocking pool (started at once) and returns its
/// result.
pub(crate) async fn apply_pages<W>(pages: &mut DayPages, size: PageSize, write: W) -> Result<Counts>
where
    W: FnOnce(Box<dyn DaySource + Send>) -> tokio::task::JoinHandle<Result<Counts>>,
{
    let (feed, fed) = mpsc::channel(1);
    let (asks_to, mut asks) = mpsc::unbounded_channel();
    let writer = write(Box::new(Fed {
        day: pages.day(),
        as_of: pages.as_of(),
        days: pages.days().to_vec(),
        pages: fed,
        asks: asks_to,
        ended: false,
    }));

    // Send every page; a send fails only once the writer stopped, and its
    // own result says why.
    let read = loop {
        match pages.next_page(size.rows, size.bytes) {
            Ok(Some(page)) => {
                if feed.send(Feed::Page(page)).await.is_err() {
                    break Ok(());
                }
            }
            Ok(None) => {
                let _ = feed.send(Feed::End).await;
                break Ok(());
            }
            Err(error) => break Err(error),
        }
    };
    drop(feed);
    if let Err(error) = read {
        // The writer sees the channel close without its end and rolls
        // back; wait for it, so the connection is free again on return.
        drop(asks);
        let _ = crate::store::joined(writer).await;
        return Err(error);
    }
    // Answer the writer until it is done (it drops its sender then).
    while let Some(ask) = asks.recv().await {
        match ask {
            Ask::CheckReplace {
                would_delete,
                live,
                reply,
            } => {
                let _ = reply.send(pages.check_replace(would_delete, live));
            }
            Ask::Synced { counts, reply } => {
                let _ = reply.send(pages.synced(counts));
            }
        }
    }
    crate::store::joined(writer).await?
}
