//! Typed columns: the dataset with a JSON value per record (six fields,
//! one nested) backfilled with five typed columns declared, against the
//! same backfill without them, in the same run; then its re-run, which
//! must still write nothing.

use std::time::Instant;

use backfill_core::columns::Column;
use backfill_core::Record;

use super::measure::{delta, job, ledger_rows, Run};
use crate::dataset::{fetch_from, first_day, nth_day, Feed};
use crate::stores::{peak_rss, reset_peak_rss, Target};
use crate::Measurement;

/// The five typed columns the scenario declares.
fn declared() -> Vec<Column> {
    [
        "status:text",
        "total_cents:integer",
        "customer:text=customer.id",
        "paid:boolean",
        "placed_at:timestamptz",
    ]
    .into_iter()
    .map(|d| Column::parse(d).expect("a valid declaration"))
    .collect()
}

/// Day `d`'s records: an order per record, its value a JSON object.
fn orders(s: &crate::settings::Settings, d: u32) -> Vec<Record> {
    let day = nth_day(d);
    (0..s.per_day)
        .map(|i| {
            let value = format!(
                r#"{{"status":"placed","total_cents":{},"customer":{{"id":"c{}","country":"FR"}},"paid":{},"placed_at":"{day}T09:{:02}:{:02}+01:00","lines":[1,2,3]}}"#,
                i * 7 + d,
                i % 1000,
                i % 3 != 0,
                (i / 60) % 60,
                i % 60
            );
            let at = day.and_hms_opt(0, 0, 0).unwrap().and_utc() + chrono::Duration::seconds(i64::from(i));
            Record::new(format!("order:{day}:{i}"), day, value, at).expect("a valid record")
        })
        .collect()
}

/// One backfill of the orders into `target`: its report's totals, seconds
/// and peak RSS.
async fn backfill_into(
    run: &Run<'_>,
    target: &Target,
) -> Result<(backfill_core::Counts, f64, u64), String> {
    let s = run.s;
    let feed = Feed::new((0..s.days).map(|d| (nth_day(d), orders(s, d))));
    reset_peak_rss();
    let started = Instant::now();
    let report = job(s)
        .backfill(
            target.store(),
            &|d| fetch_from(&feed, d),
            first_day()..=nth_day(s.days - 1),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok((report.totals(), started.elapsed().as_secs_f64(), peak_rss()))
}

/// [`backfill_into`] of orders the table does not hold: every one inserted.
async fn first_backfill(run: &Run<'_>, target: &Target) -> Result<(f64, u64), String> {
    let (totals, seconds, peak) = backfill_into(run, target).await?;
    if totals.inserted != run.s.rows() {
        return Err(format!("columns: inserted {}", totals.inserted));
    }
    Ok((seconds, peak))
}

/// `columns` and `columns_rerun`: the best of `s.repeat` backfills with
/// the five columns, each beside one without them (in turn, on fresh
/// tables, each timed run on a settled server: see `Env::settle`); then
/// the dataset again into the last table with columns.
pub(crate) async fn columns(run: &mut Run<'_>) -> Result<[Measurement; 2], String> {
    let s = run.s;
    let (mut plain, mut typed, mut peak) = (f64::MAX, f64::MAX, 0);
    // Each pair's time with columns over its time without.
    let mut pairs = Vec::new();
    let mut last = None;
    for _ in 0..s.repeat {
        run.env.settle(last.take()).await?;
        let without = run.env.fresh(s.concurrency).await?;
        let before = first_backfill(run, &without).await?.0;
        plain = plain.min(before);
        run.env.settle(Some(without)).await?;
        let with = run.env.fresh_with(s.concurrency, declared()).await?;
        let (seconds, p) = first_backfill(run, &with).await?;
        (typed, peak) = (typed.min(seconds), peak.max(p));
        pairs.push(seconds / before);
        last = Some(with);
    }
    let target = last.expect("at least one run");
    run.env.settle(None).await?;
    let w0 = target.rows_written().await?;
    let (again_totals, rerun, rerun_peak) = backfill_into(run, &target).await?;
    if again_totals.unchanged != s.rows() {
        return Err(format!(
            "columns_rerun: unchanged {}",
            again_totals.unchanged
        ));
    }
    let written = delta(w0, target.rows_written().await?)
        .map(|w| w.saturating_sub(ledger_rows(run.kind, s.days)))
        .unwrap_or_default();
    let first = Measurement {
        rows: s.rows(),
        seconds: typed,
        baseline: Some("no_columns"),
        baseline_seconds: Some(plain),
        rows_written: Some(s.rows()),
        peak_rss_bytes: peak,
        target: "measured: vs no columns".into(),
        detail: format!(
            "{} days x {} JSON orders with 5 typed columns (text, integer, nested text, boolean, \
             timestamptz), concurrency {}, against the same backfill without columns; \
             time with over time without, pair by pair: {}",
            s.days,
            s.per_day,
            s.concurrency,
            spread(&mut pairs)
        ),
        ..run.line("columns")
    };
    let again = Measurement {
        rows: s.rows(),
        seconds: rerun,
        baseline: Some("columns"),
        baseline_seconds: Some(typed),
        rows_written: Some(written),
        peak_rss_bytes: rerun_peak,
        target: "0 rows written".into(),
        pass: Some(written == 0),
        detail: "the same orders again into the table with columns".into(),
        ..run.line("columns_rerun")
    };
    Ok([first, again])
}

/// `ratios` as their median and range, `median 1.21 (1.15-1.30)`.
pub(crate) fn spread(ratios: &mut [f64]) -> String {
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let median = match n % 2 {
        1 => ratios[n / 2],
        _ => (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0,
    };
    format!("median {median:.2} ({:.2}-{:.2})", ratios[0], ratios[n - 1])
}
