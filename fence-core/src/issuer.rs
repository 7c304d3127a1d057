//! Token issuers and leases: where fencing tokens come from.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::shards::Shards;
use crate::{Domain, FenceError, FencingToken, InvalidInput, OwnerId};

/// Issues fencing tokens: strictly increasing per domain, never reused, never wrapped.
///
/// # Behavior
/// - Every call returns a token greater than every token issued before for the domain,
///   including across issuer restarts for durable issuers (Redis `INCR` on a persistent key, a
///   database sequence). An issuer that can go backwards (snapshot restore, an in-memory counter
///   after a crash) breaks fencing: restart it above the greatest token ever issued.
/// - At `u64::MAX` it fails with [`FenceError::TokenExhausted`].
#[async_trait]
pub trait TokenIssuer: Send + Sync + fmt::Debug {
    /// The backend's short name, used in errors, spans and metrics.
    fn backend(&self) -> &'static str;

    /// Issues the domain's next token.
    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError>;
}

/// The in-memory issuer: per-domain counters, for tests and the demo. Not durable.
///
/// ```
/// use fence_core::{Domain, MemoryIssuer, TokenIssuer};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fence_core::FenceError> {
/// let issuer = MemoryIssuer::new();
/// let d = Domain::new("shard-7")?;
/// let first = issuer.issue(&d).await?;
/// assert!(issuer.issue(&d).await? > first);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MemoryIssuer {
    counters: Shards<HashMap<Domain, u64>>,
    floor: u64,
}

impl MemoryIssuer {
    /// An issuer whose first token for each domain is 1.
    pub fn new() -> Self {
        Self::starting_after(0)
    }

    /// An issuer whose first token for each domain is `floor + 1`: restart an in-memory issuer
    /// above the greatest token it ever issued.
    pub fn starting_after(floor: u64) -> Self {
        MemoryIssuer {
            counters: Shards::new(16),
            floor,
        }
    }

    /// The last token issued for `domain` (`None`: none yet).
    pub fn last_issued(&self, domain: &Domain) -> Option<FencingToken> {
        self.counters.with(domain, |counters| {
            counters
                .get(domain)
                .and_then(|last| FencingToken::new(*last).ok())
        })
    }

    fn issue_now(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        self.counters.with(domain, |counters| {
            let counter = counters.entry(domain.clone()).or_insert(self.floor);
            let next = counter
                .checked_add(1)
                .ok_or_else(|| FenceError::TokenExhausted {
                    domain: domain.clone(),
                })?;
            *counter = next;
            Ok(FencingToken::new(next)?)
        })
    }
}

impl Default for MemoryIssuer {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl TokenIssuer for MemoryIssuer {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        self.issue_now(domain)
    }
}

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
    /// (so it errs early). A holder past this instant must assume another owner took over.
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
        crate::lease_guard::poll_for_release(within).await;
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

struct Held {
    owner: OwnerId,
    token: FencingToken,
    expires: Instant,
}

/// In-memory leases backed by a [`MemoryIssuer`], for tests and the demo. Not durable.
pub struct MemoryLeases {
    issuer: MemoryIssuer,
    held: Mutex<HashMap<Domain, Held>>,
}

impl MemoryLeases {
    /// Leases with a fresh in-memory issuer.
    pub fn new() -> Self {
        MemoryLeases {
            issuer: MemoryIssuer::new(),
            held: Mutex::new(HashMap::new()),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Domain, Held>> {
        // A panic elsewhere cannot leave a half-updated entry: every update is one insert/remove.
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Default for MemoryLeases {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLeases").finish_non_exhaustive()
    }
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

#[async_trait]
impl LeaseManager for MemoryLeases {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn acquire(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        check_lease_ttl(domain, ttl)?;
        let now = Instant::now();
        let mut held = self.held();
        if let Some(current) = held.get(domain) {
            if current.expires > now && current.owner != *owner {
                return Err(FenceError::LeaseHeld {
                    domain: domain.clone(),
                });
            }
        }
        let token = self.issuer.issue_now(domain)?;
        let expires = now + ttl;
        held.insert(
            domain.clone(),
            Held {
                owner: owner.clone(),
                token,
                expires,
            },
        );
        Ok(Lease::new(domain.clone(), owner.clone(), token, expires))
    }

    async fn holder(&self, domain: &Domain) -> Result<Option<LeaseHolder>, FenceError> {
        let now = Instant::now();
        Ok(self.held().get(domain).and_then(|current| {
            (current.expires > now).then(|| {
                LeaseHolder::new(
                    current.owner.clone(),
                    current.token,
                    Some(current.expires - now),
                )
            })
        }))
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        check_lease_ttl(&lease.domain, ttl)?;
        let now = Instant::now();
        let mut held = self.held();
        match held.get_mut(&lease.domain) {
            Some(current)
                if current.token == lease.token
                    && current.owner == lease.owner
                    && current.expires > now =>
            {
                current.expires = now + ttl;
                Ok(Lease::new(
                    lease.domain.clone(),
                    lease.owner.clone(),
                    lease.token,
                    current.expires,
                ))
            }
            _ => Err(FenceError::LeaseLost {
                domain: lease.domain.clone(),
                token: lease.token,
            }),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), FenceError> {
        let mut held = self.held();
        match held.get(&lease.domain) {
            Some(current) if current.token == lease.token && current.owner == lease.owner => {
                held.remove(&lease.domain);
                Ok(())
            }
            _ => Err(FenceError::LeaseLost {
                domain: lease.domain.clone(),
                token: lease.token,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain() -> Domain {
        Domain::new("lease-test").unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn owner(name: &str) -> OwnerId {
        OwnerId::new(name).unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[tokio::test]
    async fn issuer_is_strictly_increasing_and_never_wraps() -> Result<(), FenceError> {
        let d = domain();
        let issuer = MemoryIssuer::starting_after(u64::MAX - 2);
        assert_eq!(issuer.issue(&d).await?.get(), u64::MAX - 1);
        assert_eq!(issuer.issue(&d).await?.get(), u64::MAX);
        assert!(matches!(
            issuer.issue(&d).await,
            Err(FenceError::TokenExhausted { .. })
        ));
        let other = Domain::new("other")?;
        assert_eq!(issuer.issue(&other).await?.get(), u64::MAX - 1);
        Ok(())
    }

    #[tokio::test]
    async fn lease_lifecycle() -> Result<(), FenceError> {
        let leases = MemoryLeases::new();
        let d = domain();
        let a = leases
            .acquire(&d, &owner("a"), Duration::from_millis(40))
            .await?;
        assert!(matches!(
            leases
                .acquire(&d, &owner("b"), Duration::from_secs(1))
                .await,
            Err(FenceError::LeaseHeld { .. })
        ));
        let a = leases.renew(&a, Duration::from_millis(40)).await?;
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!a.is_valid());
        assert!(matches!(
            leases.renew(&a, Duration::from_secs(1)).await,
            Err(FenceError::LeaseLost { .. })
        ));
        let b = leases
            .acquire(&d, &owner("b"), Duration::from_secs(1))
            .await?;
        assert!(b.token > a.token);
        assert!(matches!(
            leases.release(&a).await,
            Err(FenceError::LeaseLost { .. })
        ));
        leases.release(&b).await?;
        let c = leases
            .acquire(&d, &owner("a"), Duration::from_secs(1))
            .await?;
        assert!(c.token > b.token, "release never resets the counter");
        assert!(matches!(
            leases.acquire(&d, &owner("a"), Duration::ZERO).await,
            Err(FenceError::InvalidInput(_))
        ));
        Ok(())
    }
}
