//! Redis leases that come with a fencing token, and a Redis token issuer.

use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fence_core::raw::{check_lease_ttl, held_until};
use fence_core::{
    Domain, FenceError, FencingToken, Lease, LeaseHolder, LeaseManager, Observed, Operation,
    OwnerId, TokenIssuer,
};

use crate::error::{unexpected, BACKEND};
use crate::fence::RedisFence;
use crate::reply::Reply;
use crate::scripts::{ISSUE, LEASE_ACQUIRE, LEASE_HOLDER, LEASE_RENEW};

/// Leases on Redis: `acquire` takes the lease (owner, TTL) and issues a fresh token for the
/// domain in one script; `renew` and `release` act only for the current owner and token.
///
/// The token sequence (`<prefix>:{<domain>}:seq`) never expires and is never reset by release
/// or expiry, so tokens keep growing across owners. This is the Redis lock users already run
/// (`SET NX PX`), made safe by the token that every protected write carries.
#[derive(Clone)]
pub struct RedisLeases {
    fence: RedisFence,
}

/// Issues fencing tokens from the same per-domain sequence the leases use.
#[derive(Clone)]
pub struct RedisIssuer {
    fence: RedisFence,
}

impl RedisFence {
    /// Leases sharing this fence's connection and key prefix, inside the telemetry layer.
    pub fn leases(&self) -> Observed<RedisLeases> {
        Observed::new(RedisLeases {
            fence: self.clone(),
        })
    }

    /// A token issuer sharing this fence's connection and key prefix, inside the telemetry
    /// layer.
    pub fn issuer(&self) -> Observed<RedisIssuer> {
        Observed::new(RedisIssuer {
            fence: self.clone(),
        })
    }
}

/// A TTL in whole milliseconds (checked to be at least 1 by [`check_lease_ttl`] first).
fn ttl_ms(ttl: Duration) -> String {
    ttl.as_millis().to_string()
}

fn issued(reply: &Reply, domain: &Domain) -> Result<FencingToken, FenceError> {
    reply
        .token(0)?
        .ok_or_else(|| unexpected("lease", domain, "no token issued"))
}

impl RedisLeases {
    async fn acquire_now(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        let ttl_text = ttl_ms(ttl);
        let keys = &self.fence.inner.keys;
        let started = Instant::now();
        let reply = self
            .fence
            .eval(
                &LEASE_ACQUIRE,
                domain,
                Operation::Lease,
                true,
                &[
                    keys.lease(domain),
                    keys.sequence(domain),
                    keys.state(domain),
                ],
                &[owner.as_str().as_bytes(), ttl_text.as_bytes()],
            )
            .await?;
        match reply.tag.as_str() {
            "ok" => Ok(Lease::new(
                domain.clone(),
                owner.clone(),
                issued(&reply, domain)?,
                held_until(started, ttl),
            )),
            "held" => Err(FenceError::LeaseHeld {
                domain: domain.clone(),
            }),
            "exhausted" => Err(FenceError::TokenExhausted {
                domain: domain.clone(),
            }),
            _ => Err(reply.into_error()),
        }
    }

    async fn renew_or_release(
        &self,
        lease: &Lease,
        ttl: Option<Duration>,
    ) -> Result<Option<Lease>, FenceError> {
        let action = match ttl {
            Some(ttl) => ttl_ms(ttl),
            None => "release".to_owned(),
        };
        let token = lease.token.to_string();
        let started = Instant::now();
        let reply = self
            .fence
            .eval(
                &LEASE_RENEW,
                &lease.domain,
                Operation::Lease,
                true,
                &[self.fence.inner.keys.lease(&lease.domain)],
                &[
                    lease.owner.as_str().as_bytes(),
                    token.as_bytes(),
                    action.as_bytes(),
                ],
            )
            .await?;
        match reply.tag.as_str() {
            "ok" => Ok(ttl.map(|ttl| {
                Lease::new(
                    lease.domain.clone(),
                    lease.owner.clone(),
                    lease.token,
                    held_until(started, ttl),
                )
            })),
            "lost" => Err(FenceError::LeaseLost {
                domain: lease.domain.clone(),
                token: lease.token,
            }),
            _ => Err(reply.into_error()),
        }
    }
}

#[async_trait]
impl LeaseManager for RedisLeases {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn acquire(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        check_lease_ttl(domain, ttl)?;
        self.acquire_now(domain, owner, ttl).await
    }

    /// The lease hash's owner and token, and its `PTTL` (Redis's clock).
    async fn holder(&self, domain: &Domain) -> Result<Option<LeaseHolder>, FenceError> {
        let lease_key = self.fence.inner.keys.lease(domain);
        let reply = self
            .fence
            .eval(
                &LEASE_HOLDER,
                domain,
                Operation::Read,
                false,
                &[lease_key],
                &[],
            )
            .await?;
        match reply.tag.as_str() {
            "none" => Ok(None),
            "ok" => {
                let corrupt = |what: &str| {
                    FenceError::corrupt(BACKEND, domain, format!("lease hash: {what}"))
                };
                let owner = OwnerId::new(reply.text(0)?).map_err(|_| corrupt("no valid owner"))?;
                let token = reply.token(1)?.ok_or_else(|| corrupt("no token"))?;
                let remaining = reply
                    .text(2)?
                    .parse::<u64>()
                    .ok()
                    .map(Duration::from_millis);
                Ok(Some(LeaseHolder::new(owner, token, remaining)))
            }
            _ => Err(reply.into_error()),
        }
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        check_lease_ttl(&lease.domain, ttl)?;
        self.renew_or_release(lease, Some(ttl))
            .await?
            .ok_or_else(|| unexpected("lease_renew", &lease.domain, "renew returned no lease"))
    }

    async fn release(&self, lease: &Lease) -> Result<(), FenceError> {
        self.renew_or_release(lease, None).await.map(|_| ())
    }
}

#[async_trait]
impl TokenIssuer for RedisIssuer {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        let reply = self
            .fence
            .eval(
                &ISSUE,
                domain,
                Operation::Issue,
                true,
                &[
                    self.fence.inner.keys.sequence(domain),
                    self.fence.inner.keys.state(domain),
                ],
                &[],
            )
            .await?;
        match reply.tag.as_str() {
            "ok" => issued(&reply, domain),
            "exhausted" => Err(FenceError::TokenExhausted {
                domain: domain.clone(),
            }),
            _ => Err(reply.into_error()),
        }
    }
}

impl fmt::Debug for RedisLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLeases")
            .field("fence", &self.fence)
            .finish()
    }
}

impl fmt::Debug for RedisIssuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisIssuer")
            .field("fence", &self.fence)
            .finish()
    }
}
