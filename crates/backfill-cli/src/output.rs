//! What a run shows while it goes and when it ends: a progress bar on a
//! terminal, one log line per event otherwise (both on stderr), and the run
//! report on stdout, as a table or as JSON.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use backfill_core::{Error, Event, Refusal, RunReport};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The run's output.
#[derive(Debug)]
pub(crate) struct Output {
    json: bool,
    bar: Option<ProgressBar>,
    tally: Mutex<Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    rows: u64,
    written: u64,
    failed: u64,
}

impl Output {
    /// A progress bar when stderr is a terminal, log lines otherwise;
    /// `json` prints the final report as JSON.
    pub(crate) fn new(json: bool) -> Self {
        // Drawn from the run's start, once its length is known.
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::hidden();
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{bar:30}] {pos}/{len} days  {msg}  {elapsed_precise} (ETA {eta})",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar
        });
        Self {
            json,
            bar,
            tally: Mutex::new(Tally::default()),
        }
    }

    /// A line for the person watching (stderr), above the bar if there is
    /// one.
    pub(crate) fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => {
                let mut stderr = std::io::stderr().lock();
                let _ = writeln!(stderr, "{line}");
            }
        }
    }

    /// Takes one of the job's events.
    pub(crate) fn event(&self, event: &Event<'_>) {
        match event {
            Event::RunStarted { run_id, days, .. } => {
                if let Some(bar) = &self.bar {
                    bar.set_length(days.len() as u64);
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                    bar.enable_steady_tick(Duration::from_millis(200));
                    bar.reset_eta();
                }
                let n = days.len();
                self.note(&format!(
                    "run {run_id}: {n} day{}",
                    if n == 1 { "" } else { "s" }
                ));
            }
            Event::DayStarted { .. } => {}
            Event::DayRetrying { .. } => self.day_line(event),
            Event::DayFinished { report } => {
                let c = report.counts;
                {
                    let mut tally = self.tally.lock().expect("tally");
                    tally.rows += c.applied();
                    tally.written += c.written();
                }
                if self.bar.is_none() {
                    self.day_line(event);
                }
                self.advance();
            }
            Event::DayFailed { .. } => {
                self.tally.lock().expect("tally").failed += 1;
                self.day_line(event);
                self.advance();
            }
            Event::RunFinished { .. } => {}
            _ => {}
        }
    }

    /// A day's line, as the library words it (errors as this command
    /// does, [`error_text`]).
    fn day_line(&self, event: &Event<'_>) {
        if let Some(line) = event.day_line(error_text) {
            self.note(&line);
        }
    }

    fn advance(&self) {
        if let Some(bar) = &self.bar {
            let tally = self.tally.lock().expect("tally");
            let failed = if tally.failed > 0 {
                format!("  {} failed", tally.failed)
            } else {
                String::new()
            };
            bar.set_message(format!(
                "{} rows, {} written{failed}",
                tally.rows, tally.written
            ));
            bar.inc(1);
        }
    }

    /// Removes the bar for good: nothing redraws it after this, so the
    /// lines that follow are the last on the screen.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// Removes the bar and prints `line` under whatever the run printed: a
    /// last message, before the process exits.
    pub(crate) fn last_note(&self, line: &str) {
        self.finish();
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "{line}");
    }

    /// Prints the run report on stdout.
    pub(crate) fn report(&self, report: &RunReport) {
        let mut stdout = std::io::stdout().lock();
        let _ = if self.json {
            match serde_json::to_string(report) {
                Ok(json) => writeln!(stdout, "{json}"),
                Err(error) => {
                    writeln!(std::io::stderr(), "error: cannot print the report: {error}")
                }
            }
        } else if report.dry_run {
            writeln!(
                stdout,
                "dry run: would sync {} days, nothing fetched or written",
                report.planned.len()
            )
            .and_then(|()| {
                report
                    .planned
                    .iter()
                    .try_for_each(|day| writeln!(stdout, "  {day}"))
            })
            .and_then(|()| {
                report
                    .not_selected
                    .iter()
                    .try_for_each(|left| writeln!(stdout, "{left}"))
            })
        } else {
            writeln!(stdout, "{report}")
        };
        let _ = stdout.flush();
    }
}

/// An error as this command words it. The library's replace refusal says
/// "allow it with the job's replace guard"; here the guard is two flags,
/// and the message names the one to pass.
pub(crate) fn error_text(error: &Error) -> String {
    match error {
        Error::ReplaceRefused {
            day,
            would_delete,
            live,
            reason: Refusal::EmptyListing,
            ..
        } => format!(
            "replace of {day} refused: the listing is empty, and would delete all {would_delete} \
             of the day's {live} live rows; pass --allow-empty-replace if the day really is \
             empty upstream"
        ),
        Error::ReplaceRefused {
            day,
            would_delete,
            live,
            reason: Refusal::TooLarge { max_fraction },
            ..
        } => {
            let share = *would_delete as f64 / (*live).max(1) as f64;
            // The smallest percentage that lets this listing through, by
            // the guard's own floating-point test.
            let (delete, live_rows) = (*would_delete as f64, *live as f64);
            let mut percent = (share * 100.0).floor() as u32;
            while percent < 100 && delete > f64::from(percent) / 100.0 * live_rows {
                percent += 1;
            }
            let needed = f64::from(percent) / 100.0;
            format!(
                "replace of {day} refused: it would delete {would_delete} of the day's {live} \
                 live rows ({:.0}%), more than --max-delete-fraction {max_fraction} allows; if \
                 the listing is complete, pass --max-delete-fraction {needed} (or 1 for no limit)",
                share * 100.0
            )
        }
        _ => error.to_string(),
    }
}
