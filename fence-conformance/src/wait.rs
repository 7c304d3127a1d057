//! Waiting in a test for a condition on a real server (a replica synced, a relay settled): poll
//! it every 20 ms, and fail the test, naming what was awaited, when it does not hold in time.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is checked again.
const POLL: Duration = Duration::from_millis(20);

/// Returns once `holds()` is true; panics (failing the test) with `what` after `within`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let mut checks = 0;
/// fence_conformance::wait::until("the third check", std::time::Duration::from_secs(1), || {
///     checks += 1;
///     checks == 3
/// })
/// .await;
/// assert_eq!(checks, 3);
/// # }
/// ```
pub async fn until(what: &str, within: Duration, mut holds: impl FnMut() -> bool) {
    until_async(what, within, || std::future::ready(holds())).await;
}

/// [`until`] for a condition that is itself asynchronous (a read through a client).
pub async fn until_async<F, Fut>(what: &str, within: Duration, mut holds: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !holds().await {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(POLL).await;
    }
}
