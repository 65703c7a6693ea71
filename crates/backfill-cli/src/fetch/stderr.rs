//! A command's standard error: drained all along, its end kept for the
//! error message.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

/// How much of a command's standard error is kept for its error message:
/// the last 4 KiB.
const STDERR_TAIL_BYTES: usize = 4096;

/// How long, after a command exited and its output ended, its standard
/// error may stay open before the message is made from what arrived. Only a
/// process that left the command's process group can hold it that long.
const STDERR_GRACE: Duration = Duration::from_secs(1);

/// A command's standard error, drained by a task of its own so the command
/// never blocks on a full pipe, whether or not its output is being read;
/// its last [`STDERR_TAIL_BYTES`] are kept for the error message. The task
/// is aborted when this is dropped.
pub(super) struct StderrTail {
    tail: Arc<Mutex<Vec<u8>>>,
    drain: Option<JoinHandle<()>>,
}

impl StderrTail {
    pub(super) fn drain(stderr: impl AsyncRead + Unpin + Send + 'static) -> Self {
        let tail = Arc::new(Mutex::new(Vec::new()));
        let drain = tokio::spawn(keep_tail(stderr, Arc::clone(&tail)));
        Self {
            tail,
            drain: Some(drain),
        }
    }

    /// The tail as one line of text, once standard error ended or, if a
    /// process that left the group holds it open, after [`STDERR_GRACE`].
    pub(super) async fn text(&mut self) -> String {
        if let Some(mut drain) = self.drain.take() {
            if tokio::time::timeout(STDERR_GRACE, &mut drain)
                .await
                .is_err()
            {
                drain.abort();
            }
        }
        tail_text(&self.tail.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for StderrTail {
    fn drop(&mut self) {
        if let Some(drain) = &self.drain {
            drain.abort();
        }
    }
}

/// Reads `stderr` to its end, keeping its last [`STDERR_TAIL_BYTES`]
/// (and at most twice that between trims) in `tail`.
async fn keep_tail(mut stderr: impl AsyncRead + Unpin, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * STDERR_TAIL_BYTES {
                    let cut = tail.len() - STDERR_TAIL_BYTES;
                    tail.drain(..cut);
                }
            }
        }
    }
}

/// The last [`STDERR_TAIL_BYTES`] of standard error as one line of text:
/// invalid UTF-8 replaced, surrounding space trimmed, blank lines dropped,
/// lines joined by ` | `.
fn tail_text(tail: &[u8]) -> String {
    let mut start = tail.len().saturating_sub(STDERR_TAIL_BYTES);
    // Do not start inside a character cut by the 4 KiB window.
    let mut skipped = 0;
    while skipped < 3 && start < tail.len() && tail[start] & 0xC0 == 0x80 {
        start += 1;
        skipped += 1;
    }
    String::from_utf8_lossy(&tail[start..])
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_tails_start_on_a_character() {
        let mut tail = vec![b'x'; 10];
        tail.extend("é".repeat(STDERR_TAIL_BYTES).as_bytes());
        let text = tail_text(&tail);
        assert!(
            text.starts_with('é') && !text.contains('\u{FFFD}'),
            "{}",
            &text[..10]
        );
        assert_eq!(tail_text(b"\n  a  \r\n\n b\xff \n"), "a | b\u{FFFD}");
    }
}
