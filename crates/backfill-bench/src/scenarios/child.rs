//! A streamed day measured in a child process of its own: a fresh
//! process, so its peak RSS is the day's alone and not memory an earlier
//! scenario left with the allocator.

use std::convert::Infallible;
use std::time::Instant;

use chrono::NaiveDate;

use super::measure::job_at;
use crate::dataset::{nth_day, streamed, Keys};
use crate::stores::{peak_rss, reset_peak_rss, Env, Target};

/// What a streamed day did in a child process of its own: its seconds,
/// its peak RSS (a fresh process, so the figure is the streamed day's
/// alone, not memory an earlier scenario left with the allocator), and its
/// counts (written, inserted).
pub(super) struct Child {
    pub(super) seconds: f64,
    pub(super) peak: u64,
    pub(super) inserted: u64,
    pub(super) written: u64,
}

/// Streams `n` records of day 0 with `keys`' keys into `target` from a
/// child process.
pub(super) async fn stream_in_child(
    env: &Env,
    target: &Target,
    n: u32,
    keys: Keys,
) -> Result<Child, String> {
    let located = env
        .locate(target)
        .ok_or("no child process for this store")?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let output = tokio::process::Command::new(exe)
        .arg("--stream-child")
        .arg(n.to_string())
        .arg(keys.name())
        .args(&located)
        .output()
        .await
        .map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(format!(
            "streamed day in a child process failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| e.to_string())?;
    Ok(Child {
        seconds: v["seconds"].as_f64().unwrap_or_default(),
        peak: v["peak_rss_bytes"].as_u64().unwrap_or_default(),
        inserted: v["inserted"].as_u64().unwrap_or_default(),
        written: v["written"].as_u64().unwrap_or_default(),
    })
}

/// The child's side of [`stream_in_child`]: `--stream-child N KEYS STORE…`.
pub(crate) async fn stream_child(args: &[String]) -> Result<(), String> {
    let [n, keys, located @ ..] = args else {
        return Err("--stream-child N KEYS STORE…".into());
    };
    let n: u32 = n.parse().map_err(|e| format!("{e}"))?;
    let keys = Keys::parse(keys).ok_or_else(|| format!("no keys {keys:?}"))?;
    let store = crate::stores::open_located(located).await?;
    let fetch = move |d: NaiveDate| async move { Ok::<_, Infallible>(streamed(keys, d, n)) };
    reset_peak_rss();
    let started = Instant::now();
    let report = job_at(1)
        .sync_day(&*store, &fetch, nth_day(0))
        .await
        .map_err(|e| e.to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "seconds": seconds,
            "peak_rss_bytes": peak_rss(),
            "inserted": report.counts.inserted,
            "written": report.counts.written(),
        })
    );
    Ok(())
}
