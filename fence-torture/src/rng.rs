//! The run's one source of random choices: splitmix64 from the seed, so a seed replays the same
//! choices (the interleaving a real server produces still varies with timing).

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
