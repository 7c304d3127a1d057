//! In-memory leases, for tests and the demo.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::lease::check_lease_ttl;
use crate::{
    Domain, FenceError, FencingToken, Lease, LeaseHolder, LeaseManager, MemoryIssuer, OwnerId,
};

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

    fn owner(name: &str) -> OwnerId {
        OwnerId::new(name).unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[tokio::test]
    async fn lease_lifecycle() -> Result<(), FenceError> {
        let leases = MemoryLeases::new();
        let d = Domain::new("lease-test")?;
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
