//! Seeded runs (fence-torture's, and the relay contract's run under chaos): the one source of
//! random choices, splitmix64 from the seed, so a seed replays the same choices (the
//! interleaving a real server produces still varies with timing); and what such a run reads
//! from the environment (`scripts/torture` sets it): the profile, the seed, and the file its
//! figures are appended to.

/// A seeded generator.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator that replays `seed`'s choices.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        fence_core::raw::splitmix64(self.0)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64().checked_rem(n).unwrap_or(0)
    }

    /// A duration between `low` and `high` (inclusive; `low` when `high` is below it).
    pub fn between(
        &mut self,
        low: std::time::Duration,
        high: std::time::Duration,
    ) -> std::time::Duration {
        let span = high.saturating_sub(low).as_micros() as u64;
        low + std::time::Duration::from_micros(self.below(span.saturating_add(1)))
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        unit < p
    }
}

/// `FENCE_TORTURE_PROFILE=full` (set by `scripts/torture`): the full profile, else the bounded
/// one the test command runs.
pub fn full_profile() -> bool {
    std::env::var("FENCE_TORTURE_PROFILE").is_ok_and(|p| p == "full")
}

/// `FENCE_TORTURE_SEED`, else `default` (a fixed seed per run, so a bounded run replays).
pub fn seed(default: u64) -> u64 {
    std::env::var("FENCE_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Prints a run's line of figures and appends it to `FENCE_TORTURE_REPORT` when set (the
/// figures RELIABILITY.md shows).
pub fn report(line: &str) {
    println!("{line}");
    crate::services::append_to_report("FENCE_TORTURE_REPORT", line);
}
