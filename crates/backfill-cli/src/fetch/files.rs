//! A day from a file per day.

use std::path::PathBuf;

use chrono::NaiveDate;
use futures_util::StreamExt;

use super::template::sealed::Open;
use super::{DayStream, FetchError, TemplateFetch};

/// Fetches a day by reading a file in the [JSON Lines format](crate::jsonl),
/// at a path template where `{day}` stands for the day (`YYYY-MM-DD`),
/// e.g. `exports/{day}.jsonl`. A missing file fails the day. The file is
/// parsed as it is read and handed over in chunks.
pub type FileFetch = TemplateFetch<FromFile>;

/// The [`Source`](super::Source) of a [`FileFetch`]: the template is a
/// path, and the day's input the file there.
#[derive(Debug, Clone, Copy, Default)]
pub struct FromFile;

impl FileFetch {
    /// The path read for `day`.
    pub fn path_for(&self, day: NaiveDate) -> PathBuf {
        PathBuf::from(self.for_day(day))
    }
}

impl Open for FromFile {
    /// Opens the file of `day` and reads it up to the first record. The
    /// rest is parsed as the stream is read; a malformed line there is the
    /// stream's last item.
    async fn open(&self, fetch: &FileFetch, day: NaiveDate) -> Result<DayStream, FetchError> {
        let path = fetch.path_for(day);
        let file = match tokio::fs::File::open(&path).await {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(FetchError::NoFile { path, day });
            }
            Err(error) => return Err(FetchError::Open { path, error }),
        };
        let mut reader = fetch.reader(file);
        let as_of = match reader.read_head().await {
            Ok(as_of) => as_of,
            Err(problem) => return Err(FetchError::File { path, problem }),
        };
        let chunks = reader.into_chunks().map(move |chunk| {
            chunk.map_err(|problem| FetchError::File {
                path: path.clone(),
                problem,
            })
        });
        Ok(DayStream::new(chunks, as_of))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use backfill_core::{Error, Fetch};

    use crate::fetch::testing::{day, line};
    use crate::jsonl::CHUNK_RECORDS;

    #[tokio::test]
    async fn files_are_read_per_day() {
        let dir = tempfile::tempdir().unwrap();
        let template = format!("{}/{{day}}.jsonl", dir.path().display());
        let fetch = FileFetch::new(&template);
        let path = dir.path().join("2026-01-03.jsonl");
        std::fs::write(
            &path,
            format!(
                "{}\r\n\n{}\n",
                line("a", "2026-01-03"),
                line("b", "2026-01-03")
            ),
        )
        .unwrap();
        let fetched = fetch.records(day()).await.unwrap();
        assert_eq!(fetched.records.len(), 2);

        let error = fetch.records(day().succ_opt().unwrap()).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "no file {}/2026-01-04.jsonl for 2026-01-04",
                dir.path().display()
            )
        );
        let boxed = fetch.fetch(day().succ_opt().unwrap()).await.unwrap_err();
        assert!(!Error::Fetch {
            day: day(),
            source: boxed
        }
        .is_retryable());

        std::fs::write(
            &path,
            format!("{}\n{{\"as_of\":1}}\n", line("a", "2026-01-03")),
        )
        .unwrap();
        let error = fetch.records(day()).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "file {}, line 2: invalid type: integer `1`, expected a string",
                path.display()
            )
        );

        // A large file streams, its as_of known before any record.
        let mut text = String::from("\n{\"as_of\":\"2026-01-04T00:00:00Z\"}\n");
        for i in 0..20_000 {
            text.push_str(&line(&format!("k{i}"), "2026-01-03"));
            text.push('\n');
        }
        std::fs::write(&path, text).unwrap();
        let fetched = fetch.fetch(day()).await.unwrap();
        assert!(fetched.is_stream() && fetched.listing_as_of().is_some());
        assert_eq!(fetched.collect().await.unwrap().0.len(), 20_000);
        let chunks: Vec<_> = fetch.stream(day()).await.unwrap().collect().await;
        assert_eq!(chunks.len(), 20_000_usize.div_ceil(CHUNK_RECORDS));
        assert!(chunks.iter().all(|chunk| chunk.is_ok()));

        let relative = FileFetch::new("exports/{day}.jsonl");
        let error = relative.records(day()).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "no file exports/2026-01-03.jsonl for 2026-01-03"
        );

        std::fs::create_dir(dir.path().join("2026-01-05.jsonl")).unwrap();
        let error = fetch
            .records(NaiveDate::from_ymd_opt(2026, 1, 5).unwrap())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("line 1: cannot read"), "{error}");
    }
}
