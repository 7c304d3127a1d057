//! Leases users can live with: acquire with a wait deadline, and a guard that owns the lease,
//! renews it in the background, exposes its token and signals its loss.
//!
//! The loss signal lets a holder stop starting new work; correctness never depends on it
//! arriving in time: the resource fences a stale token regardless.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backoff::random_u64;
use crate::{Backoff, Domain, FenceError, FencingToken, Lease, LeaseManager, OwnerId};

/// Why a held lease was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseLoss {
    /// A renewal was refused: the lease expired at the backend or another owner holds it.
    Refused,
    /// The lease's time ran out (by the holder's clock) without a successful renewal: the
    /// backend was unreachable or too slow.
    Expired,
}

impl fmt::Display for LeaseLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaseLoss::Refused => "a renewal was refused",
            LeaseLoss::Expired => "the lease ran out without a successful renewal",
        })
    }
}

/// How a guard acquires and keeps its lease.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct LeaseOptions {
    /// The lease's time to live, asked for at every acquisition and renewal.
    pub ttl: Duration,
    /// How long `acquire` waits for a lease another owner holds (zero: try once).
    pub wait: Duration,
    /// The fraction of the TTL after which the guard renews (jittered by ±10 %).
    pub renew_at: f64,
}

impl LeaseOptions {
    /// A TTL of `ttl`, no waiting, renewal after a third of the TTL.
    pub const fn new(ttl: Duration) -> Self {
        LeaseOptions {
            ttl,
            wait: Duration::ZERO,
            renew_at: 1.0 / 3.0,
        }
    }

    /// Waits up to `wait` for a lease another owner holds.
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Renews after `fraction` of the TTL (clamped to 0.1 ..= 0.9).
    pub fn renew_at(mut self, fraction: f64) -> Self {
        self.renew_at = fraction.clamp(0.1, 0.9);
        self
    }
}

/// A held lease: renewed in the background until released, dropped or lost.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fence_core::FenceError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use fence_core::{Domain, LeaseGuard, LeaseOptions, MemoryLeases, OwnerId};
/// let leases = Arc::new(MemoryLeases::new());
/// let options = LeaseOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5));
/// let guard = LeaseGuard::acquire(leases, &Domain::new("shard-7")?, &OwnerId::new("w1")?, options).await?;
/// let token = guard.token(); // carry it on every protected write
/// assert!(!guard.is_lost());
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct LeaseGuard {
    manager: Arc<dyn LeaseManager>,
    lease: Arc<Mutex<Lease>>,
    lost: watch::Receiver<Option<LeaseLoss>>,
    renewer: JoinHandle<()>,
    released: bool,
}

impl LeaseGuard {
    /// Acquires `domain`'s lease for `owner`, waiting up to `options.wait` while another owner
    /// holds it (the backend's [`LeaseManager::wait_for_release`]: notified where the backend
    /// can, bounded jittered polling where it cannot), then keeps it renewed. Past the wait,
    /// [`FenceError::LeaseHeld`]; other errors at once.
    pub async fn acquire(
        manager: Arc<dyn LeaseManager>,
        domain: &Domain,
        owner: &OwnerId,
        options: LeaseOptions,
    ) -> Result<LeaseGuard, FenceError> {
        let deadline = Instant::now() + options.wait;
        let lease = loop {
            match manager.acquire(domain, owner, options.ttl).await {
                Ok(lease) => break lease,
                Err(FenceError::LeaseHeld { .. }) if Instant::now() < deadline => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    manager.wait_for_release(domain, left).await;
                }
                Err(error) => return Err(error),
            }
        };
        Ok(Self::hold(manager, lease, options))
    }

    /// Keeps an acquired `lease` renewed in the background.
    pub fn hold(manager: Arc<dyn LeaseManager>, lease: Lease, options: LeaseOptions) -> Self {
        let (signal, lost) = watch::channel(None);
        let shared = Arc::new(Mutex::new(lease));
        let renewer = tokio::spawn(renew(manager.clone(), shared.clone(), options, signal));
        LeaseGuard {
            manager,
            lease: shared,
            lost,
            renewer,
            released: false,
        }
    }

    /// The fencing token of this acquisition: carry it on every protected write.
    pub fn token(&self) -> FencingToken {
        self.lease().token
    }

    /// The lease as last renewed.
    pub fn lease(&self) -> Lease {
        self.lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// True once the lease is lost: stop starting new work under it.
    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }

    /// Resolves when the lease is lost (a renewal refused, or its time run out without a
    /// successful renewal), with the reason; never while it is held. Use it to cancel work:
    /// `tokio::select! { _ = guard.lost() => …, result = work => … }`.
    pub async fn lost(&self) -> LeaseLoss {
        let mut lost = self.lost.clone();
        loop {
            if let Some(reason) = lost.borrow_and_update().clone() {
                return reason;
            }
            if lost.changed().await.is_err() {
                // The renewer ended without a loss: only after release or drop.
                return LeaseLoss::Expired;
            }
        }
    }

    /// Stops renewing and releases the lease at the backend.
    pub async fn release(mut self) -> Result<(), FenceError> {
        self.renewer.abort();
        self.released = true;
        let lease = self.lease();
        self.manager.release(&lease).await
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.renewer.abort();
        if self.released || self.is_lost() {
            return;
        }
        // Best effort: on the current runtime, if there is one. The lease otherwise expires.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (manager, lease) = (self.manager.clone(), self.lease());
            runtime.spawn(async move {
                if let Err(error) = manager.release(&lease).await {
                    tracing::debug!(%error, domain = lease.domain.as_str(), "release on drop failed");
                }
            });
        }
    }
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("lease", &self.lease())
            .field("lost", &*self.lost.borrow())
            .finish_non_exhaustive()
    }
}

/// Renews `lease` after `renew_at` of the TTL (jittered) until it is refused or runs out.
async fn renew(
    manager: Arc<dyn LeaseManager>,
    lease: Arc<Mutex<Lease>>,
    options: LeaseOptions,
    signal: watch::Sender<Option<LeaseLoss>>,
) {
    let current = || lease.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let retry = Backoff::new(options.ttl / 20, options.ttl / 5);
    let mut failures = 0;
    loop {
        let held = current();
        let interval = jittered(options.ttl.mul_f64(options.renew_at));
        let wait = if failures == 0 {
            interval
        } else {
            retry.delay(failures)
        };
        let until = held.valid_until;
        // Sleep until the next renewal, but never past the lease's end.
        tokio::time::sleep(wait.min(until.saturating_duration_since(Instant::now()))).await;
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            lose(&manager, &held, &signal, LeaseLoss::Expired);
            return;
        }
        match tokio::time::timeout(left, manager.renew(&held, options.ttl)).await {
            Ok(Ok(renewed)) => {
                failures = 0;
                *lease.lock().unwrap_or_else(PoisonError::into_inner) = renewed;
            }
            Ok(Err(FenceError::LeaseLost { .. })) => {
                lose(&manager, &held, &signal, LeaseLoss::Refused);
                return;
            }
            Ok(Err(error)) => {
                failures += 1;
                tracing::warn!(%error, domain = held.domain.as_str(), "lease renewal failed; retrying");
            }
            Err(_) => {
                lose(&manager, &held, &signal, LeaseLoss::Expired);
                return;
            }
        }
    }
}

fn lose(
    manager: &Arc<dyn LeaseManager>,
    lease: &Lease,
    signal: &watch::Sender<Option<LeaseLoss>>,
    reason: LeaseLoss,
) {
    let label = match reason {
        LeaseLoss::Refused => "refused",
        LeaseLoss::Expired => "expired",
    };
    metrics::counter!("fence_lease_losses_total", "backend" => manager.backend(), "reason" => label)
        .increment(1);
    tracing::warn!(
        domain = lease.domain.as_str(),
        token = lease.token.get(),
        %reason,
        "lease lost: stop starting work under it"
    );
    signal.send_replace(Some(reason));
}

/// `duration` ± 10 %.
fn jittered(duration: Duration) -> Duration {
    let tenth = duration / 10;
    let span = (tenth * 2).as_nanos().min(u128::from(u64::MAX)) as u64;
    duration - tenth + Duration::from_nanos(random_u64() % span.saturating_add(1))
}
