//! Exponential backoff with equal jitter (half the ceiling fixed, half random) and a bounded
//! number of attempts.

use std::time::Duration;

/// How the relay retries an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts before the entry is dead-lettered (at least 1).
    pub max_attempts: u32,
    /// The first backoff ceiling.
    pub initial_backoff: Duration,
    /// The greatest backoff ceiling.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// A policy with `max_attempts` attempts and backoff ceilings from `initial` up to `max`.
    pub fn new(max_attempts: u32, initial: Duration, max: Duration) -> Self {
        RetryPolicy {
            max_attempts,
            initial_backoff: initial,
            max_backoff: max,
        }
    }

    /// The wait after failed attempt number `attempt` (1-based): uniformly random in
    /// `[ceiling / 2, ceiling]` with `ceiling = min(max, initial * 2^(attempt-1))`, raised to the
    /// receiver's `Retry-After` when it asked for longer. Half the ceiling is kept so retries
    /// never collapse to zero.
    pub fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        fence_core::Backoff::new(self.initial_backoff, self.max_backoff)
            .delay(attempt.saturating_sub(1))
            .max(retry_after.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_jittered_and_capped() {
        let policy = RetryPolicy::new(5, Duration::from_millis(100), Duration::from_secs(1));
        for _ in 0..200 {
            let first = policy.backoff(1, None);
            assert!((Duration::from_millis(50)..=Duration::from_millis(100)).contains(&first));
            let fourth = policy.backoff(4, None);
            assert!((Duration::from_millis(400)..=Duration::from_millis(800)).contains(&fourth));
            let late = policy.backoff(40, None);
            assert!((Duration::from_millis(500)..=Duration::from_secs(1)).contains(&late));
        }
        let samples: std::collections::HashSet<_> =
            (0..50).map(|_| policy.backoff(3, None)).collect();
        assert!(samples.len() > 10, "jitter spreads retries: {samples:?}");
        assert_eq!(
            policy.backoff(1, Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
    }
}
