//! A day read line by line and handed over in chunks of records.

use backfill_core::{Fetched, Record};
use chrono::{DateTime, Utc};
use futures_util::Stream;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use super::error::{LineError, ReadError};
use super::line::{parse_line, Line};

/// The longest line the fetchers accept by default: 256 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 256 * 1024 * 1024;

/// A day as read: its records in the order of their lines, and the instant
/// of its `as_of` line, if it had one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Day {
    /// The records, in line order.
    pub records: Vec<Record>,
    /// The `as_of` line's instant.
    pub as_of: Option<DateTime<Utc>>,
}

impl From<Day> for Fetched {
    fn from(day: Day) -> Self {
        let fetched = Fetched::new(day.records);
        match day.as_of {
            Some(at) => fetched.as_of(at),
            None => fetched,
        }
    }
}

/// Streams a day from `reader` as a [`Fetched`]: the lines before the
/// first record are read at once (so the `as_of` line, if any, is known and
/// set), the records then come as chunks of at most [`CHUNK_RECORDS`]
/// records and about [`CHUNK_BYTES`] bytes, parsed as the job asks for
/// them. A malformed line further on is the stream's last item, an error.
///
/// # Errors
///
/// [`ReadError`] for a malformed line before the first record, or a read
/// that failed there.
pub async fn read_day<R>(reader: R, max_line_bytes: usize) -> Result<Fetched, ReadError>
where
    R: AsyncBufRead + Unpin + Send + 'static,
{
    let mut reader = ChunkReader::new(reader, max_line_bytes);
    let as_of = reader.read_head().await?;
    let fetched = Fetched::stream(reader.into_chunks());
    Ok(match as_of {
        Some(at) => fetched.as_of(at),
        None => fetched,
    })
}

/// Reads a whole day from `reader` into memory, parsing each line as it
/// arrives (a malformed line fails the day before the rest is read). For
/// tests and programs that want a `Vec`; a fetch streams with
/// [`read_day`] or a [`ChunkReader`] instead.
///
/// A line longer than `max_line_bytes` (not counting its `\n`) is an error
/// as soon as the limit is passed, without the line being held in memory.
///
/// # Errors
///
/// [`ReadError`] naming the 1-based line: a malformed line, a record rule
/// broken, a misplaced or second `as_of` line, a line too long, or an I/O
/// error.
pub async fn read_records<R>(reader: R, max_line_bytes: usize) -> Result<Day, ReadError>
where
    R: AsyncBufRead + Unpin,
{
    let mut reader = ChunkReader::new(reader, max_line_bytes);
    let mut records = Vec::new();
    while let Some(chunk) = reader.next_chunk().await? {
        if records.is_empty() {
            records = chunk;
        } else {
            records.extend(chunk);
        }
    }
    Ok(Day {
        records,
        as_of: reader.as_of(),
    })
}

/// The most records in one chunk of a streamed day.
pub const CHUNK_RECORDS: usize = 8192;

/// The size at which a chunk of a streamed day is closed: 8 MiB of records
/// (keys and values plus a fixed overhead per record, as the job weighs
/// them against its memory budget). A chunk passes it by at most its last
/// record.
pub const CHUNK_BYTES: usize = 8 << 20;

/// What a record weighs in a chunk.
fn weight(record: &Record) -> usize {
    record.key().len() + record.value().len() + std::mem::size_of::<Record>()
}

/// Reads a day in chunks from an [`AsyncBufRead`], parsing each line as it
/// arrives and reading no further than the chunk asked for needs, so what
/// it holds is bounded by one chunk and the reader's buffer whatever the
/// day's size.
///
/// Each line is parsed in place in the reader's buffer; only a line split
/// across two reads is copied (and one longer than the limit is refused
/// as soon as the limit is passed, without being held). After an error the
/// reader is done: every further call returns `Ok(None)`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), backfill_cli::jsonl::ReadError> {
/// use backfill_cli::jsonl::{ChunkReader, DEFAULT_MAX_LINE_BYTES};
///
/// let text = concat!(
///     r#"{"as_of": "2026-01-06T00:00:00Z"}"#, "\n",
///     r#"{"key": "order:1", "event_date": "2026-01-05", "value": 1, "updated_at": "2026-01-05T10:00:00Z"}"#, "\n",
/// );
/// let mut reader = ChunkReader::new(text.as_bytes(), DEFAULT_MAX_LINE_BYTES);
/// assert!(reader.read_head().await?.is_some(), "the as_of line comes first");
/// let chunk = reader.next_chunk().await?.expect("a chunk");
/// assert_eq!(chunk[0].key(), "order:1");
/// assert!(reader.next_chunk().await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ChunkReader<R> {
    reader: R,
    max_line_bytes: usize,
    /// A line split across reads, gathered; a line wholly inside the
    /// reader's buffer (the common case) is parsed in place.
    partial: Vec<u8>,
    /// The 1-based number of the next line.
    line: u64,
    as_of: Option<(u64, DateTime<Utc>)>,
    first_record: Option<u64>,
    chunk: Vec<Record>,
    chunk_bytes: usize,
    done: bool,
}

/// How far [`ChunkReader::fill`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    FirstRecord,
    FullChunk,
}

impl<R: AsyncBufRead + Unpin> ChunkReader<R> {
    /// A reader of the day in `reader`, refusing lines longer than
    /// `max_line_bytes` (not counting the `\n`).
    pub fn new(reader: R, max_line_bytes: usize) -> Self {
        Self {
            reader,
            max_line_bytes,
            partial: Vec::new(),
            line: 1,
            as_of: None,
            first_record: None,
            chunk: Vec::new(),
            chunk_bytes: 0,
            done: false,
        }
    }

    /// Reads up to the first record line (kept for the first chunk) or the
    /// end, and returns the `as_of` line's instant: since an `as_of` line
    /// must come before the first record, it is then known for good.
    ///
    /// # Errors
    ///
    /// As [`next_chunk`](Self::next_chunk), for the lines read.
    pub async fn read_head(&mut self) -> Result<Option<DateTime<Utc>>, ReadError> {
        self.fill(Until::FirstRecord).await?;
        Ok(self.as_of())
    }

    /// The next chunk: at most [`CHUNK_RECORDS`] records, closed once past
    /// [`CHUNK_BYTES`]; `None` at the end of the day.
    ///
    /// # Errors
    ///
    /// [`ReadError`] naming the 1-based line: a malformed line, a record
    /// rule broken, a misplaced or second `as_of` line, a line too long, or
    /// an I/O error.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<Record>>, ReadError> {
        self.fill(Until::FullChunk).await?;
        if self.chunk.is_empty() {
            return Ok(None);
        }
        self.chunk_bytes = 0;
        Ok(Some(std::mem::take(&mut self.chunk)))
    }

    /// The `as_of` line's instant, if one was read.
    pub fn as_of(&self) -> Option<DateTime<Utc>> {
        self.as_of.map(|(_, at)| at)
    }

    /// The chunks, as a stream that ends after the end of the day or its
    /// first error.
    pub fn into_chunks(self) -> impl Stream<Item = Result<Vec<Record>, ReadError>> + Send + 'static
    where
        R: Send + 'static,
    {
        futures_util::stream::unfold(self, |mut reader| async move {
            match reader.next_chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk), reader)),
                Ok(None) => None,
                // The reader is done after an error: the next call ends
                // the stream.
                Err(error) => Some((Err(error), reader)),
            }
        })
    }

    async fn fill(&mut self, until: Until) -> Result<(), ReadError> {
        let filled = self.fill_lines(until).await;
        if filled.is_err() {
            self.done = true;
            self.chunk = Vec::new();
            self.partial = Vec::new();
        }
        filled
    }

    async fn fill_lines(&mut self, until: Until) -> Result<(), ReadError> {
        while !self.done {
            let full = match until {
                Until::FirstRecord => self.first_record.is_some(),
                Until::FullChunk => {
                    self.chunk.len() >= CHUNK_RECORDS || self.chunk_bytes >= CHUNK_BYTES
                }
            };
            if full {
                break;
            }
            let line = self.line;
            let available = self
                .reader
                .fill_buf()
                .await
                .map_err(|error| ReadError::Io { line, error })?;
            let parsed;
            if available.is_empty() {
                self.done = true;
                if self.partial.is_empty() {
                    break;
                }
                parsed = parse_numbered(line, &self.partial);
                self.partial.clear();
            } else if let Some(end) = find_newline(available) {
                if self.partial.len() + end > self.max_line_bytes {
                    return Err(too_long(line, self.max_line_bytes));
                }
                if self.partial.is_empty() {
                    parsed = parse_numbered(line, &available[..end]);
                } else {
                    self.partial.extend_from_slice(&available[..end]);
                    parsed = parse_numbered(line, &self.partial);
                    self.partial.clear();
                }
                self.reader.consume(end + 1);
            } else {
                let n = available.len();
                if self.partial.len() + n > self.max_line_bytes {
                    return Err(too_long(line, self.max_line_bytes));
                }
                self.partial.extend_from_slice(available);
                self.reader.consume(n);
                continue;
            }
            self.take(parsed.map_err(|problem| ReadError::Line { line, problem })?)?;
            self.line += 1;
        }
        Ok(())
    }

    /// Keeps a parsed line.
    fn take(&mut self, parsed: Line) -> Result<(), ReadError> {
        match parsed {
            Line::Record(record) => {
                if self.first_record.is_none() {
                    self.first_record = Some(self.line);
                }
                self.chunk_bytes += weight(&record);
                self.chunk.push(record);
            }
            Line::AsOf(at) => {
                let problem = if let Some((first_line, _)) = self.as_of {
                    LineError::SecondAsOf { first_line }
                } else if let Some(first_record) = self.first_record {
                    LineError::AsOfAfterRecord { first_record }
                } else {
                    self.as_of = Some((self.line, at));
                    return Ok(());
                };
                return Err(ReadError::Line {
                    line: self.line,
                    problem,
                });
            }
            Line::Blank => {}
        }
        Ok(())
    }
}

/// The UTF-8 byte-order mark, which editors on Windows put at the start of
/// a file.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Parses line number `line`, whole: the first line without a leading
/// byte-order mark, so a file saved with one reads the same. (The line is
/// whole here however the reads split it, mark included.)
fn parse_numbered(line: u64, bytes: &[u8]) -> Result<Line, LineError> {
    let bytes = match line {
        1 => bytes.strip_prefix(BOM).unwrap_or(bytes),
        _ => bytes,
    };
    parse_line(bytes)
}

/// The first `\n` in `bytes`, eight bytes at a time: a byte-by-byte
/// search is a noticeable part of reading a day.
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const NEWLINES: u64 = u64::from_ne_bytes([b'\n'; 8]);
    let mut words = bytes.chunks_exact(8);
    let mut start = 0;
    for word in &mut words {
        let word = u64::from_ne_bytes(word.try_into().unwrap_or([0; 8])) ^ NEWLINES;
        // Non-zero exactly when some byte of `word` is zero, i.e. was `\n`.
        if word.wrapping_sub(ONES) & !word & HIGHS != 0 {
            break;
        }
        start += 8;
    }
    bytes[start..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| start + i)
}

fn too_long(line: u64, max: usize) -> ReadError {
    ReadError::Line {
        line,
        problem: LineError::TooLong { max },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonl::testing::with_value;
    use chrono::TimeZone;

    async fn read(text: &[u8]) -> Result<Day, ReadError> {
        read_records(text, DEFAULT_MAX_LINE_BYTES).await
    }

    #[test]
    fn newlines_are_found_anywhere() {
        for len in 0..40 {
            let mut bytes = vec![b'x'; len];
            assert_eq!(find_newline(&bytes), None);
            for at in 0..len {
                bytes[at] = b'\n';
                assert_eq!(find_newline(&bytes), Some(at), "{len} {at}");
                bytes[len - 1] = b'\n';
                assert_eq!(find_newline(&bytes), Some(at), "{len} {at}");
                bytes.fill(0x8a);
            }
        }
    }

    #[tokio::test]
    async fn a_day_is_read_with_right_line_numbers() {
        let text = format!(
            "\n  \r\n{}\r\n{}\n{}\n{}",
            r#"{"as_of":"2026-01-04T00:00:00Z"}"#,
            with_value(r#""a""#),
            with_value(r#"{"n":1}"#).replace("\"k\"", "\"k2\""),
            with_value("2").replace("\"k\"", "\"k3\""),
        );
        let fetched = read(text.as_bytes()).await.unwrap();
        let values: Vec<_> = fetched
            .records
            .iter()
            .map(|r| (r.key(), r.value()))
            .collect();
        assert_eq!(values, [("k", "a"), ("k2", r#"{"n":1}"#), ("k3", "2")]);
        assert_eq!(
            fetched.as_of,
            Some(Utc.with_ymd_and_hms(2026, 1, 4, 0, 0, 0).unwrap())
        );
        let fetched = read(b"").await.unwrap();
        assert_eq!(fetched, Day::default());
        assert_eq!(read(b"\n\n \n").await.unwrap(), Day::default());

        let bad = format!(
            "{}\n\n{}\n",
            with_value(r#""a""#),
            with_value(r#""b""#).replace("\"updated_at\"", "\"updated\"")
        );
        let e = read(bad.as_bytes()).await.unwrap_err();
        assert_eq!(e.line(), 3);
        assert!(
            e.to_string().starts_with("line 3: unknown field `updated`"),
            "{e}"
        );

        let missing = format!(
            "{}\n{}",
            with_value(r#""a""#),
            r#"{"key":"k","event_date":"2026-01-03","value":"v"}"#
        );
        let e = read(missing.as_bytes()).await.unwrap_err();
        assert_eq!(e.to_string(), "line 2: missing field `updated_at`");

        let two = "{\"as_of\":\"2026-01-04T00:00:00Z\"}\n\n{\"as_of\":\"2026-01-05T00:00:00Z\"}\n";
        let e = read(two.as_bytes()).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 3: a second as_of line (the first is line 1); a day has at most one"
        );

        let e = read(b"\n\xc3\x28\n").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2: not UTF-8 (invalid byte at offset 0)"
        );
    }

    #[tokio::test]
    async fn a_byte_order_mark_starting_the_day_is_skipped() {
        let text = format!(
            "\u{FEFF}{}\r\n{}\r\n",
            with_value(r#""a""#),
            with_value("2").replace("\"k\"", "\"k2\"")
        );
        let day = read(text.as_bytes()).await.unwrap();
        let keys: Vec<_> = day.records.iter().map(Record::key).collect();
        assert_eq!(keys, ["k", "k2"]);
        // Split across reads, the mark itself too.
        for capacity in [1, 2, 4] {
            let reader = tokio::io::BufReader::with_capacity(capacity, text.as_bytes());
            let day = read_records(reader, 1024).await.unwrap();
            assert_eq!(day.records.len(), 2, "{capacity}");
        }
        // Before an as_of line, or alone on its line.
        let as_of = format!(
            "\u{FEFF}{}\n{}\n",
            r#"{"as_of":"2026-01-04T00:00:00Z"}"#,
            with_value("1")
        );
        assert!(read(as_of.as_bytes()).await.unwrap().as_of.is_some());
        let alone = format!("\u{FEFF}\n{}\n", with_value("1"));
        assert_eq!(read(alone.as_bytes()).await.unwrap().records.len(), 1);
        // Only at the very start: anywhere else it is what it is.
        let later = format!("{}\n\u{FEFF}{}\n", with_value("1"), with_value("2"));
        let e = read(later.as_bytes()).await.unwrap_err();
        assert_eq!(e.line(), 2, "{e}");
        let twice = format!("\u{FEFF}\u{FEFF}{}\n", with_value("1"));
        assert_eq!(read(twice.as_bytes()).await.unwrap_err().line(), 1);
    }

    #[tokio::test]
    async fn lines_split_across_reads_are_joined() {
        let text = format!(
            "{}\n{}\r\n\n",
            with_value(r#""first""#),
            with_value(r#"{"b":1,"a":2}"#)
        );
        // A 7-byte buffer splits every line over many reads.
        let reader = tokio::io::BufReader::with_capacity(7, text.as_bytes());
        let fetched = read_records(reader, 1024).await.unwrap();
        let values: Vec<_> = fetched.records.iter().map(Record::value).collect();
        assert_eq!(values, ["first", r#"{"a":2,"b":1}"#]);
    }

    /// `lines` record lines, `value` as each one's value, keys `k0`, `k1`, …
    fn lines(lines: usize, value: &str) -> String {
        let mut text = String::new();
        for i in 0..lines {
            text.push_str(&with_value(value).replace("\"k\"", &format!("\"k{i}\"")));
            text.push('\n');
        }
        text
    }

    /// Reads every chunk, checking each is within the bounds.
    async fn read_chunks(text: &[u8]) -> Vec<Vec<Record>> {
        let mut reader = ChunkReader::new(text, DEFAULT_MAX_LINE_BYTES);
        let mut chunks = Vec::new();
        while let Some(chunk) = reader.next_chunk().await.unwrap() {
            assert!(
                !chunk.is_empty() && chunk.len() <= CHUNK_RECORDS,
                "{}",
                chunk.len()
            );
            let bytes: usize = chunk.iter().map(weight).sum();
            let last = weight(chunk.last().unwrap());
            assert!(
                bytes - last < CHUNK_BYTES,
                "closed once past the bytes: {bytes}"
            );
            chunks.push(chunk);
        }
        chunks
    }

    #[tokio::test]
    async fn a_large_day_comes_in_bounded_chunks_in_line_order() {
        let text = lines(50_000, r#"{"n":1}"#);
        let chunks = read_chunks(text.as_bytes()).await;
        assert_eq!(chunks.len(), 50_000_usize.div_ceil(CHUNK_RECORDS));
        assert!(chunks[..chunks.len() - 1]
            .iter()
            .all(|chunk| chunk.len() == CHUNK_RECORDS));
        let keys: Vec<_> = chunks.iter().flatten().map(Record::key).collect();
        let expected: Vec<_> = (0..50_000).map(|i| format!("k{i}")).collect();
        assert_eq!(keys, expected);

        // Large values: the bytes close a chunk long before the count does.
        let big = format!("\"{}\"", "v".repeat(64 * 1024));
        let text = lines(400, &big);
        let chunks = read_chunks(text.as_bytes()).await;
        assert!(chunks.len() >= 3, "{}", chunks.len());
        assert_eq!(chunks.iter().map(Vec::len).sum::<usize>(), 400);

        // The collecting reader agrees.
        let day = read(text.as_bytes()).await.unwrap();
        assert_eq!(day.records, chunks.concat());
    }

    #[tokio::test]
    async fn as_of_must_come_before_the_first_record() {
        let as_of = r#"{"as_of":"2026-01-04T00:00:00Z"}"#;
        let after = format!("\n{}\n\n{as_of}\n", with_value(r#""a""#));
        let e = read(after.as_bytes()).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 4: as_of must come before the first record (line 2)"
        );
        // Streamed, the error comes after the records before it.
        let mut reader = ChunkReader::new(after.as_bytes(), DEFAULT_MAX_LINE_BYTES);
        assert_eq!(reader.read_head().await.unwrap(), None);
        assert_eq!(reader.next_chunk().await.unwrap_err().line(), 4);
        assert!(
            reader.next_chunk().await.unwrap().is_none(),
            "done after an error"
        );

        let two = format!("{as_of}\n{}\n{as_of}\n", with_value(r#""a""#));
        let e = read(two.as_bytes()).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 3: a second as_of line (the first is line 1); a day has at most one"
        );

        // Only the as_of is known when the Fetched is returned, so nothing
        // past the first record is read before then: here reading further
        // fails.
        let head = format!("\n{as_of}\n\n{}\n{}", with_value(r#""a""#), with_value("2"));
        let failing = tokio::io::AsyncReadExt::chain(head.as_bytes(), tokio_test_failing_reader());
        let mut reader = ChunkReader::new(tokio::io::BufReader::new(failing), 1024);
        assert_eq!(
            reader.read_head().await.unwrap(),
            Some(Utc.with_ymd_and_hms(2026, 1, 4, 0, 0, 0).unwrap())
        );
        let e = reader.next_chunk().await.unwrap_err();
        assert_eq!(e.to_string(), "line 5: cannot read: disk on fire");
    }

    #[tokio::test]
    async fn read_day_streams_with_its_as_of() {
        let text = format!(
            "{}\n{}",
            r#"{"as_of":"2026-01-04T00:00:00Z"}"#,
            lines(20_000, "1")
        );
        let fetched = read_day(std::io::Cursor::new(text.into_bytes()), 1024)
            .await
            .unwrap();
        assert!(fetched.is_stream());
        assert_eq!(
            fetched.listing_as_of(),
            Some(Utc.with_ymd_and_hms(2026, 1, 4, 0, 0, 0).unwrap())
        );
        let (records, _) = fetched.collect().await.unwrap();
        assert_eq!(records.len(), 20_000);

        let bad = format!("{}{{\"as_of\":\"2026-01-04T00:00:00Z\"}}\n", lines(3, "1"));
        let fetched = read_day(std::io::Cursor::new(bad.into_bytes()), 1024)
            .await
            .unwrap();
        let e = fetched.collect().await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 4: as_of must come before the first record (line 1)"
        );
        let e = read_day(&b"{}\n"[..], 1024).await.unwrap_err();
        assert_eq!(e.to_string(), "line 1: missing field `key`");
    }

    /// An endless reader of `x`s with no newline: proof a long line is
    /// refused without being held, since it never ends.
    struct Endless {
        served: usize,
        chunk: Vec<u8>,
    }

    impl tokio::io::AsyncRead for Endless {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let this = self.get_mut();
            let n = buf.remaining().min(this.chunk.len());
            buf.put_slice(&this.chunk[..n]);
            this.served += n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn long_lines_are_refused_without_buffering_them() {
        let short = with_value(r#""a""#);
        let text = format!("{short}\n\n{short}\n{}\n", "x".repeat(10 * 1024 * 1024));
        let e = read_records(text.as_bytes(), 1024).await.unwrap_err();
        assert_eq!(e.to_string(), "line 4: longer than 1024 bytes");

        let mut endless = Endless {
            served: 0,
            chunk: vec![b'x'; 64 * 1024],
        };
        let reader = tokio::io::BufReader::with_capacity(8 * 1024, &mut endless);
        let e = read_records(reader, 1024 * 1024).await.unwrap_err();
        assert_eq!(e.to_string(), "line 1: longer than 1048576 bytes");
        assert!(
            endless.served < 2 * 1024 * 1024,
            "stopped soon after the limit"
        );

        // Exactly at the limit is fine, with or without a final newline.
        let fits = with_value(r#""a""#);
        let fetched = read_records(fits.as_bytes(), fits.len()).await.unwrap();
        assert_eq!(fetched.records.len(), 1);
        let e = read_records(fits.as_bytes(), fits.len() - 1)
            .await
            .unwrap_err();
        assert_eq!(e.line(), 1);
    }

    #[tokio::test]
    async fn io_errors_name_the_line() {
        let text = format!("{}\n{{\"key\"", with_value(r#""a""#));
        let failing = tokio::io::AsyncReadExt::chain(text.as_bytes(), tokio_test_failing_reader());
        let e = read_records(tokio::io::BufReader::new(failing), 1024)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "line 2: cannot read: disk on fire");
    }

    fn tokio_test_failing_reader() -> impl tokio::io::AsyncRead + Unpin {
        struct Failing;
        impl tokio::io::AsyncRead for Failing {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                _: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::task::Poll::Ready(Err(std::io::Error::other("disk on fire")))
            }
        }
        Failing
    }

    /// 300 000 typical lines; run with
    /// `cargo test --release -p backfill-cli -- --ignored --nocapture parse_speed`.
    #[tokio::test]
    #[ignore = "a timing check, meaningful in release builds"]
    async fn parse_speed() {
        let mut text = String::new();
        for i in 0..300_000 {
            text.push_str(&format!(
                r#"{{"key":"order:{i}","event_date":"2026-01-03","value":{{"total_cents":{i},"currency":"EUR"}},"updated_at":"2026-01-03T09:30:00.123456Z"}}"#
            ));
            text.push('\n');
        }
        let started = std::time::Instant::now();
        let fetched = read(text.as_bytes()).await.unwrap();
        let took = started.elapsed();
        println!(
            "{} lines, {} bytes: {took:?}",
            fetched.records.len(),
            text.len()
        );
        assert_eq!(fetched.records.len(), 300_000);
    }
}
