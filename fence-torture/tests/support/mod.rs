//! What every backend's torture run shares: the profile (bounded inside the test command,
//! full under `scripts/torture`), the seed, and the verdict with its figures.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use fence_conformance::proxy::TcpProxy;
use fence_testkit::s3::WeedServer;
use fence_torture::{check, FaultKind, Profile, Run, ServerProcess, Verdict};

pub(crate) use fence_torture::env::{full_profile as is_full, seed};

/// The profile for a backend whose lease lasts `ttl`: bounded, 4 workers × 12 windows × 8
/// operations; full, 8 workers × 250 windows × 5 operations (10,000 operations, windows small
/// enough for the linearizability search).
pub(crate) fn profile(seed: u64, ttl: Duration, faults: bool) -> Profile {
    let profile = if is_full() {
        Profile::new(seed, 8, 250, 5)
    } else {
        Profile::new(seed, 4, 12, 8)
    }
    .lease_ttl(ttl)
    .pause_probability(0.04);
    if faults {
        profile.faults(
            (Duration::from_millis(50), Duration::from_millis(250)),
            (Duration::from_millis(20), Duration::from_millis(200)),
        )
    } else {
        profile
    }
}

/// The profile for a log (every append is a broker transaction): bounded,
/// 4 workers × 6 windows × 6 operations; full, 8 workers × 250 windows × 5 operations; the
/// server paused now and then.
pub(crate) fn log_profile(seed: u64, ttl: Duration) -> Profile {
    if is_full() {
        Profile::new(seed, 8, 250, 5)
    } else {
        Profile::new(seed, 4, 6, 6)
    }
    .lease_ttl(ttl)
    .pause_probability(0.04)
    .faults(
        (Duration::from_millis(400), Duration::from_millis(1500)),
        (Duration::from_millis(100), Duration::from_millis(2500)),
    )
}

/// Checks the run and fails the test with the seed and the windows that show any violation;
/// prints the figures (and appends them to `FENCE_TORTURE_REPORT` when set).
pub(crate) fn verify(backend: &str, run: &Run, expect_faults: bool) {
    let report = check(&run.history);
    let faults: Vec<String> = FaultKind::ALL
        .iter()
        .filter_map(|k| run.injected.faults.get(k).map(|n| format!("{k}: {n}")))
        .collect();
    let a = report.ambiguity;
    let line = format!(
        "torture {backend}: seed {} profile {} operations {} accepted {} fenced {} duplicates {} failed {} \
         ambiguous {} (applied {}, not applied {}, repeats {}, unresolved {}) pauses {} takeovers {} retries {} \
         faults [{}] windows checked {} skipped {} violations {} verdict {}",
        run.seed,
        if is_full() { "full" } else { "bounded" },
        report.operations,
        report.accepted,
        report.fenced,
        report.duplicates,
        report.failed,
        a.total,
        a.applied,
        a.not_applied,
        a.repeats,
        a.unresolved,
        run.injected.pauses,
        run.injected.acquisitions,
        run.injected.retries,
        faults.join(", "),
        report.windows_checked,
        report.windows_skipped,
        report.violations.len(),
        report.verdict(),
    );
    fence_torture::env::report(&line);
    let shown: String = report
        .violations
        .iter()
        .take(3)
        .map(ToString::to_string)
        .collect();
    assert_ne!(
        report.verdict(),
        Verdict::Violated,
        "{backend}: the invariant failed; replay with FENCE_TORTURE_SEED={}\n{shown}",
        run.seed
    );
    // A run that never overlapped owners, or injected nothing, proves little.
    assert!(
        run.history.final_state.is_some(),
        "{backend}: the final read failed: {}",
        run.final_read_error
            .as_deref()
            .unwrap_or("no error recorded")
    );
    assert!(
        report.fenced > 0,
        "{backend}: no stale write was ever refused: {line}"
    );
    assert!(
        report.accepted > 0,
        "{backend}: nothing was accepted: {line}"
    );
    // The bounded profile's windows are all searched: an inconclusive run fails. A full run
    // reports the windows the linearizability search gave up on (and any window after one
    // whose anchor read failed) as inconclusive instead of failing; the other properties are
    // checked over the whole history either way.
    if !is_full() {
        assert_eq!(
            report.verdict(),
            Verdict::Holds,
            "{backend}: inconclusive, windows left unsearched: {line}"
        );
    }
    if expect_faults {
        assert!(
            !run.injected.faults.is_empty(),
            "{backend}: no fault was injected: {line}"
        );
        assert!(
            a.total > 0,
            "{backend}: the faults made nothing ambiguous: {line}"
        );
    }
}

/// A SeaweedFS of the test's own, killed and paused by the fault injector.
pub(crate) struct Weed(pub(crate) WeedServer);

impl ServerProcess for Weed {
    fn kill_and_restart(&self) {
        // Called on a blocking thread: the restart's own waiting is async.
        tokio::runtime::Handle::current().block_on(self.0.kill_and_restart());
    }

    fn signal(&self, signal: &str) {
        self.0.signal(signal);
    }
}

/// A fault proxy in front of the `host:port` of an `http://host:port/…` endpoint.
pub(crate) async fn proxy_before(endpoint: &str) -> Arc<TcpProxy> {
    let authority = endpoint
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("an endpoint");
    let upstream = authority.parse().expect("a loopback host:port");
    Arc::new(TcpProxy::start(upstream).await.expect("the fault proxy"))
}
