//! The one backoff every adapter and the outbox relay use between retries, and the one source
//! of randomness for its jitter (and for nonces): exponential, capped, with equal jitter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Exponential backoff with equal jitter: before retry `attempt` (0 for the first), wait half of
/// `min(max, base · 2^attempt)` plus a random part of up to the other half, so that retries never
/// collapse to zero and racing holders spread out.
///
/// ```
/// use std::time::Duration;
/// use fence_core::Backoff;
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
/// let first = backoff.delay(0);
/// assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
/// assert!(backoff.delay(40) <= Duration::from_secs(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backoff {
    /// The first ceiling.
    pub base: Duration,
    /// The greatest ceiling.
    pub max: Duration,
}

impl Backoff {
    /// Ceilings from `base`, doubling, up to `max`.
    pub const fn new(base: Duration, max: Duration) -> Self {
        Backoff { base, max }
    }

    /// The wait before retry `attempt` (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << attempt.min(30))
            .min(self.max);
        let half = ceiling / 2;
        let span = (ceiling - half).as_nanos().min(u128::from(u64::MAX)) as u64;
        half + Duration::from_nanos(random_u64() % span.saturating_add(1))
    }
}

/// A fast, non-cryptographic random number (splitmix64 over time, process id and a counter):
/// for jitter and nonces, never for secrets.
pub fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed = nanos
        ^ (u64::from(std::process::id()) << 40)
        ^ COUNTER.fetch_add(1, Ordering::Relaxed).rotate_left(17);
    splitmix64(mixed.wrapping_add(0x9E37_79B9_7F4A_7C15))
}

/// The splitmix64 finaliser: spreads the bits so that nearby inputs give unrelated numbers.
/// A seeded generator that steps its state by `0x9E37_79B9_7F4A_7C15` and returns this of it
/// replays the same numbers from the same seed (fence-torture's runs).
///
/// ```
/// assert_eq!(fence_core::raw::splitmix64(1), fence_core::raw::splitmix64(1));
/// assert_ne!(fence_core::raw::splitmix64(1), fence_core::raw::splitmix64(2));
/// ```
pub fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_are_jittered_and_capped() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        for _ in 0..200 {
            let first = backoff.delay(0);
            assert!((Duration::from_millis(50)..=Duration::from_millis(100)).contains(&first));
            let fourth = backoff.delay(3);
            assert!((Duration::from_millis(400)..=Duration::from_millis(800)).contains(&fourth));
            let late = backoff.delay(40);
            assert!((Duration::from_millis(500)..=Duration::from_secs(1)).contains(&late));
        }
        let samples: std::collections::HashSet<_> = (0..50).map(|_| backoff.delay(3)).collect();
        assert!(samples.len() > 10, "jitter spreads retries: {samples:?}");
        let zero = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(zero.delay(5), Duration::ZERO);
    }
}
