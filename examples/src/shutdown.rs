//! Graceful shutdown for the examples: ctrl-c (SIGINT) or SIGTERM stops an example's work at
//! its next await point, and the example then cleans up what its run created before it exits.
//! A second signal during the cleanup ends the process at once (exit status 1).
//!
//! A service built on tokio would wait on `tokio::signal` (tokio's `signal` feature); these
//! examples poll a flag that `signal-hook` sets, which keeps their build small.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use signal_hook::consts::{SIGINT, SIGTERM};

use crate::ExampleError;

/// How often the flag is looked at: the delay between a signal and the work's end.
const POLL: Duration = Duration::from_millis(50);

/// The work was stopped by a signal (its cleanup still ran).
#[derive(Debug, thiserror::Error)]
#[error("interrupted by a signal (ctrl-c or SIGTERM): the run stopped and was cleaned up")]
pub struct Interrupted;

/// Set once SIGINT or SIGTERM arrived. The first such signal only sets it; the next one
/// ends the process (exit status 1), in case the cleanup hangs.
fn signalled() -> Result<Arc<AtomicBool>, ExampleError> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        // The exit is registered first, so that it sees the flag as the previous signal left it.
        signal_hook::flag::register_conditional_shutdown(signal, 1, flag.clone())?;
        signal_hook::flag::register(signal, flag.clone())?;
    }
    Ok(flag)
}

/// Runs `work` until it ends or until ctrl-c or SIGTERM arrives: then `work` is dropped and
/// [`Interrupted`] returned. The caller cleans up in both cases:
///
/// ```no_run
/// # async fn run() -> Result<(), fence_examples::ExampleError> {
/// # let (work, clean_up) = (async { Ok(()) }, async { Ok::<(), fence_examples::ExampleError>(()) });
/// let outcome = fence_examples::until_shutdown(work).await;
/// clean_up.await?; // after success, an error or a signal alike
/// outcome
/// # }
/// ```
pub async fn until_shutdown<T>(
    work: impl Future<Output = Result<T, ExampleError>>,
) -> Result<T, ExampleError> {
    let flag = signalled()?;
    until_set(work, &flag).await
}

/// Runs `work` until it ends or `flag` is set.
async fn until_set<T>(
    work: impl Future<Output = Result<T, ExampleError>>,
    flag: &AtomicBool,
) -> Result<T, ExampleError> {
    let signal = async {
        while !flag.load(Ordering::SeqCst) {
            tokio::time::sleep(POLL).await;
        }
    };
    tokio::select! {
        outcome = work => outcome,
        () = signal => Err(Interrupted.into()),
    }
}

/// The outcome of an example's work once its cleanup ran: the work's error first (the
/// cleanup's is added to it), else the cleanup's.
pub fn after_cleanup<T>(
    outcome: Result<T, ExampleError>,
    cleanup: Result<(), ExampleError>,
) -> Result<T, ExampleError> {
    match (outcome, cleanup) {
        (outcome, Ok(())) => outcome,
        (Ok(_), Err(cleanup)) => Err(format!("the cleanup failed: {cleanup}").into()),
        (Err(work), Err(cleanup)) => {
            Err(format!("{work}; then the cleanup failed: {cleanup}").into())
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_signal_stops_the_work_and_says_so() {
        let flag = AtomicBool::new(false);
        let work = async {
            flag.store(true, Ordering::SeqCst); // a signal arrives while the work waits
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok("finished")
        };
        let outcome = tokio::time::timeout(Duration::from_secs(5), until_set(work, &flag))
            .await
            .expect("the signal ended the work within 5 s");
        let error = outcome.expect_err("an interrupted work is not a success");
        assert!(error.is::<Interrupted>(), "{error}");
    }

    #[tokio::test]
    async fn work_that_ends_first_gives_its_own_outcome() {
        let flag = AtomicBool::new(false);
        let outcome = until_set(async { Ok(7) }, &flag).await;
        assert_eq!(outcome.expect("the work's own success"), 7);
        let failed = until_set(async { Err::<(), _>("refused".into()) }, &flag).await;
        assert_eq!(
            failed.expect_err("the work's own error").to_string(),
            "refused"
        );
    }

    #[tokio::test]
    async fn a_real_sigterm_interrupts_the_work() {
        let raise = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            signal_hook::low_level::raise(SIGTERM).expect("SIGTERM raised");
        };
        let work = until_shutdown(async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(())
        });
        let (outcome, ()) =
            tokio::time::timeout(Duration::from_secs(5), async { tokio::join!(work, raise) })
                .await
                .expect("SIGTERM ended the work within 5 s");
        let error = outcome.expect_err("an interrupted work is not a success");
        assert!(error.is::<Interrupted>(), "{error}");
    }

    #[test]
    fn the_cleanups_error_is_never_lost() {
        let both = after_cleanup::<()>(Err("work".into()), Err("cleanup".into()));
        assert_eq!(
            both.expect_err("both failed").to_string(),
            "work; then the cleanup failed: cleanup"
        );
        let cleanup_only = after_cleanup(Ok(1), Err("cleanup".into()));
        assert!(cleanup_only.is_err());
        assert_eq!(after_cleanup(Ok(1), Ok(())).expect("both succeeded"), 1);
    }
}
