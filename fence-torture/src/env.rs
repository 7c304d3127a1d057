//! What a torture run reads from the environment (`scripts/torture` sets it): the profile, the
//! seed, and the file its figures are appended to.

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
    fence_conformance::services::append_to_report("FENCE_TORTURE_REPORT", line);
}
