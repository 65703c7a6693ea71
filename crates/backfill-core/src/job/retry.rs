//! [`Retry`]: how often, and how patiently, a failing day is tried again.

use std::time::Duration;

/// How often, and how patiently, a failing day is tried again.
///
/// Only errors that say so are retried
/// ([`Error::is_retryable`](crate::Error::is_retryable)): a store's lost
/// connection, deadlock or lock timeout, a fetch error marked
/// [`Transient`](crate::Transient) anywhere in its chain of causes, a
/// per-day timeout. A bad record or a fetch bug fails at once.
///
/// The delay before retry `n` is `initial · 2ⁿ⁻¹`, capped at `max`; with
/// jitter (the default) it is drawn uniformly from its upper half, so
/// concurrent days do not retry in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    max_attempts: u32,
    initial: Duration,
    max: Duration,
    jitter: bool,
}

impl Default for Retry {
    /// [`DEFAULT_RETRIES`](crate::settings::DEFAULT_RETRIES) retries (3
    /// attempts), backoff from
    /// [`DEFAULT_RETRY_DELAY`](crate::settings::DEFAULT_RETRY_DELAY) (2 s)
    /// up to [`DEFAULT_MAX_RETRY_DELAY`](crate::settings::DEFAULT_MAX_RETRY_DELAY)
    /// (5 min), with jitter: the one retry default of every entry point.
    fn default() -> Self {
        Self {
            max_attempts: crate::settings::DEFAULT_RETRIES + 1,
            initial: crate::settings::DEFAULT_RETRY_DELAY,
            max: crate::settings::DEFAULT_MAX_RETRY_DELAY,
            jitter: true,
        }
    }
}

impl Retry {
    /// One attempt: no retry at all.
    pub fn none() -> Self {
        Self::default().max_attempts(1)
    }

    /// Attempts in all, the first included (at least 1): `max_attempts(3)`
    /// is one try and up to two retries.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The first delay and the longest one.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial = initial;
        self.max = max.max(initial);
        self
    }

    /// Whether delays are randomised (default true).
    pub fn jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// The attempts allowed in all, as set by [`Retry::max_attempts`].
    pub fn attempt_limit(&self) -> u32 {
        self.max_attempts
    }

    /// The delay before retry number `retry` (1 for the first retry).
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        let full = self.initial.saturating_mul(factor).min(self.max);
        if self.jitter {
            full.mul_f64(0.5 + fastrand::f64() / 2.0)
        } else {
            full
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_are_capped() {
        let retry = Retry::default()
            .backoff(Duration::from_millis(100), Duration::from_millis(500))
            .jitter(false);
        let delays: Vec<_> = (1..=5).map(|n| retry.delay(n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 500, 500]);
        let jittered = retry.jitter(true);
        for n in 1..=5 {
            let d = jittered.delay(n);
            assert!(d >= retry.delay(n) / 2 && d <= retry.delay(n), "{d:?}");
        }
    }

    #[test]
    fn max_attempts_sets_what_attempt_limit_reads() {
        assert_eq!(Retry::default().attempt_limit(), 3);
        assert_eq!(Retry::none().attempt_limit(), 1);
        assert_eq!(Retry::default().max_attempts(5).attempt_limit(), 5);
        assert_eq!(Retry::default().max_attempts(0).attempt_limit(), 1);
    }
}
