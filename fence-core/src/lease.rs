//! Leases that come with a fencing token: the held lease, its holder, the trait every lease
//! backend implements and the TTL check they share.

use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::{Backoff, Domain, FenceError, FencingToken, InvalidInput, OwnerId};

/// A held lease: the domain, its owner, the fencing token issued with it and its local expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// The leased domain.
    pub domain: Domain,
    /// The owner.
    pub owner: OwnerId,
    /// The token issued with this acquisition: carry it on every protected write.
    pub token: FencingToken,
    /// When the lease ends by the holder's clock, measured from before the request was sent
    /// and short of the TTL by the drift bound ([`crate::raw::held_until`]), so it errs early.
    /// A holder past this instant must assume another owner took over.
    pub valid_until: Instant,
}

impl Lease {
    /// A lease record.
    pub fn new(domain: Domain, owner: OwnerId, token: FencingToken, valid_until: Instant) -> Self {
        Lease {
            domain,
            owner,
            token,
            valid_until,
        }
    }

    /// True while the holder's clock says the lease still runs.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }
}

/// Who holds a domain's lease now, as the backend sees it (for operators: `fence inspect`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseHolder {
    /// The holder.
    pub owner: OwnerId,
    /// The token issued with its acquisition.
    pub token: FencingToken,
    /// How long the lease still runs by the backend's clock, when the backend says.
    pub remaining: Option<Duration>,
}

impl LeaseHolder {
    /// A holder record.
    pub fn new(owner: OwnerId, token: FencingToken, remaining: Option<Duration>) -> Self {
        LeaseHolder {
            owner,
            token,
            remaining,
        }
    }
}

/// Leases that come with a fencing token.
///
/// A lease alone cannot stop a paused holder from writing after it expired: the token it
/// carries, checked at the resource, does.
///
/// # Behavior
/// - `acquire` succeeds when the domain has no live lease (or the live lease is the same
///   owner's, which re-acquires); every success issues a new, greater token.
/// - `acquire` while another owner's lease runs → [`FenceError::LeaseHeld`].
/// - `renew` and `release` act only for the current owner with the current token; otherwise
///   [`FenceError::LeaseLost`]. The token counter is never reset by release or expiry.
#[async_trait]
pub trait LeaseManager: Send + Sync + fmt::Debug {
    /// The backend's short name, used in errors, spans and metrics.
    fn backend(&self) -> &'static str;

    /// Acquires the domain's lease for `ttl` and issues a fresh token. A `ttl` outside 1 ms
    /// ..= `i64::MAX` ms is refused before any I/O ([`check_lease_ttl`]).
    async fn acquire(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError>;

    /// Extends a held lease by `ttl` from now, keeping its token; `ttl` checked as for
    /// `acquire`.
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError>;

    /// Releases a held lease.
    async fn release(&self, lease: &Lease) -> Result<(), FenceError>;

    /// Waits, after `acquire` found `domain`'s lease held, until it may be free or `within`
    /// has passed ([`crate::LeaseGuard::acquire`] then tries again). The default sleeps a
    /// jittered 25 to 50 ms (bounded polling); a backend that can be notified of a release
    /// overrides it.
    async fn wait_for_release(&self, domain: &Domain, within: Duration) {
        let _ = domain;
        poll_for_release(within).await;
    }

    /// The live lease of `domain`, if any: who holds it, with which token, for how long. For
    /// inspection only: by the time it answers the lease may have changed hands, so never
    /// decide a write on it (the token at the resource decides). The default answers
    /// [`FenceError::Unsupported`].
    async fn holder(&self, domain: &Domain) -> Result<Option<LeaseHolder>, FenceError> {
        let _ = domain;
        Err(FenceError::unsupported(self.backend(), "lease inspection"))
    }
}

/// The bound on clock drift every lease manager of a remote server assumes: the holder's clock
/// and the server's run at rates that differ by less than this fraction (1 %; clocks kept by
/// NTP differ by far less). Under it, a holder that counts [`held_until`] on its own clock never
/// believes it holds a lease the server could already have given to another owner. Above it,
/// the holder's belief can outlast the server's grant (correctness still holds: the resource
/// fences its token; only the loss signal comes late).
pub const MAX_CLOCK_DRIFT: f64 = 0.01;

/// When a lease of `ttl` ends for its holder: from `started`, the holder's clock read *before*
/// the request was sent (the server starts its own count later), `ttl` less
/// [`MAX_CLOCK_DRIFT`] of it, so that a holder whose clock runs slow by up to the bound still
/// gives up first. The TTL is first taken down to whole milliseconds, the finest unit the
/// servers are sent. Every [`LeaseManager`] of a remote server sets [`Lease::valid_until`] with
/// it. A `ttl` too large for the clock gives `started`: the lease is not counted as held.
pub fn held_until(started: Instant, ttl: Duration) -> Instant {
    let sent = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    started
        .checked_add(sent.mul_f64(1.0 - MAX_CLOCK_DRIFT))
        .unwrap_or(started)
}

/// Refuses a lease TTL outside 1 ms ..= `i64::MAX` ms (what every backend can express), before
/// any I/O: the one check every [`LeaseManager`]'s `acquire` and `renew` run first.
pub fn check_lease_ttl(domain: &Domain, ttl: Duration) -> Result<(), FenceError> {
    let ms = ttl.as_millis();
    if ms == 0 || ms > i64::MAX as u128 {
        return Err(InvalidInput::Configuration(format!(
            "lease ttl on domain `{domain}` must be between 1 ms and {} ms, got {ttl:?}",
            i64::MAX
        ))
        .into());
    }
    Ok(())
}

/// The default wait of [`LeaseManager::wait_for_release`]: 25 to 50 ms (jittered), bounded by
/// `within`.
pub async fn poll_for_release(within: Duration) {
    let interval = Backoff::new(Duration::from_millis(50), Duration::from_millis(50)).delay(0);
    tokio::time::sleep(interval.min(within)).await;
}
