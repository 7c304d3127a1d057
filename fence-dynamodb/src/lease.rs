//! `DynamoDbLeases`: the lock-table shape (an owner, a lease duration, a record version number)
//! on the domain's item, plus a monotonic token raised in the same conditional update that
//! grants the lease.
//!
//! DynamoDB's conditions have no server clock, so expiry is judged as
//! amazon-dynamodb-lock-client judges it: a contender that sees a lease remembers its record
//! version number (`rvn`, changed by every grant and renewal) and when it first saw it, on its
//! own monotonic clock; once it has seen the same `rvn` for the lease's whole duration, the
//! holder has neither renewed nor released, and the contender may take the lease over with a
//! conditional update on that `rvn`. The holder counts its lease from before its request was
//! sent, shortened by [`fence_core::raw::MAX_CLOCK_DRIFT`]; the contender counts from after it
//! read the item. So the holder gives up first as long as the two clocks' *rates* differ by
//! less than 1 % — no wall clocks are compared, and none need to agree. A contender that
//! starts fresh (or restarts) waits one whole duration before taking over a lease whose holder
//! died. The fence never depends on any of this: a holder that outlives its lease is refused by
//! the resource, whose check does not involve clocks.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fence_core::raw::{check_lease_ttl, held_until, random_u64, BoundedCache};
use fence_core::{
    Domain, FenceError, FencingToken, Lease, LeaseHolder, LeaseManager, Operation, OwnerId,
};

use crate::error::{backend_error, corrupt, DynamoDbFenceError, Failure, BACKEND};
use crate::expr::Expr;
use crate::issuer::{next_token, pause, raise_condition, MAX_ATTEMPTS};
use crate::item::{attr, number, text, LeaseRecord, Stored};
use crate::table::without_key;
use crate::DynamoDb;

/// Leases a contender remembers having seen, by default.
pub const DEFAULT_OBSERVED_LEASES: usize = 10_000;

/// Leases on DynamoDB, with fencing tokens (see the module docs for how expiry is judged).
/// Clones share what they have seen of other holders' leases.
#[derive(Clone)]
pub struct DynamoDbLeases {
    dynamodb: DynamoDb,
    /// Per domain: the lease last seen and when it was first seen unchanged.
    seen: Arc<BoundedCache<Domain, Sighting>>,
}

/// A lease as a contender saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sighting {
    token: FencingToken,
    rvn: u64,
    since: Instant,
}

impl DynamoDbLeases {
    pub(crate) fn new(dynamodb: DynamoDb) -> Self {
        DynamoDbLeases {
            dynamodb,
            seen: Arc::new(BoundedCache::new(DEFAULT_OBSERVED_LEASES)),
        }
    }

    /// How long `lease` has still to run as far as this process can tell: its duration,
    /// less the time this process has seen it unchanged.
    fn remaining(&self, domain: &Domain, lease: &LeaseRecord) -> Duration {
        let now = Instant::now();
        let seen = match self.seen.get(domain) {
            Some(seen) if seen.token == lease.token && seen.rvn == lease.rvn => seen,
            _ => {
                let seen = Sighting {
                    token: lease.token,
                    rvn: lease.rvn,
                    since: now,
                };
                self.seen.insert(domain.clone(), seen.clone());
                seen
            }
        };
        Duration::from_millis(lease.ttl_ms).saturating_sub(now.duration_since(seen.since))
    }

    /// Grants the lease to `owner` on `stored`, raising the counter; `Ok(None)` when the
    /// item changed first (`stored` is then what it holds now).
    async fn grant(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
        stored: &mut Stored,
    ) -> Result<Option<FencingToken>, Failure> {
        let next = next_token(domain, stored).map_err(Failure::Fence)?;
        let mut expr = Expr::default();
        let mut condition = raise_condition(&mut expr, stored, next);
        let owner_attr = expr.name(attr::OWNER);
        match &stored.lease {
            None => condition.push_str(&format!(" AND attribute_not_exists({owner_attr})")),
            Some(expired) => {
                let rvn = expr.name(attr::RVN);
                let seen = expr.value("seen", number(expired.rvn));
                condition.push_str(&format!(" AND {rvn} = {seen}"));
            }
        }
        // The stored duration never shrinks under a holder that may still count it: the same
        // owner re-acquiring its running lease keeps the longer of the two.
        let stored_ttl = match &stored.lease {
            Some(held) if held.owner == owner.as_str() => ttl_ms(ttl).max(held.ttl_ms),
            _ => ttl_ms(ttl),
        };
        let update = format!(
            "SET {} = {next}, {owner_attr} = {}, {} = {next}, {} = {}, {} = {}",
            expr.name(attr::COUNTER),
            expr.value("owner", text(owner.as_str())),
            expr.name(attr::LEASE_TOKEN),
            expr.name(attr::RVN),
            expr.value("rvn", number(fresh_rvn())),
            expr.name(attr::TTL),
            expr.value("ttl", number(stored_ttl)),
            next = expr.value("next", number(next.get())),
        );
        match self
            .dynamodb
            .update(domain, &expr, (condition, update))
            .await
        {
            Ok(()) => Ok(Some(next)),
            Err(Failure::Condition(Some(item))) => {
                *stored =
                    Stored::decode(domain, Some(&without_key(item))).map_err(Failure::Fence)?;
                Ok(None)
            }
            Err(Failure::Condition(None)) => {
                *stored = self
                    .dynamodb
                    .read(domain, Operation::Lease)
                    .await
                    .map_err(Failure::Fence)?;
                Ok(None)
            }
            Err(other) => Err(other),
        }
    }

    /// A conditional update of the lease `lease` still holds (same owner, same token), with
    /// `extra` conditions: `Ok(Err(now))` with the item as it is now when a condition failed.
    /// A lost answer is `Ambiguous` (a release repeated after one that landed would answer
    /// `LeaseLost`).
    async fn update_held(
        &self,
        lease: &Lease,
        change: impl FnOnce(&mut Expr) -> (String, String),
    ) -> Result<Result<(), Stored>, FenceError> {
        let (domain, dynamodb) = (&lease.domain, &self.dynamodb);
        let mut expr = Expr::default();
        let held = format!(
            "{} = {} AND {} = {}",
            expr.name(attr::OWNER),
            expr.value("owner", text(lease.owner.as_str())),
            expr.name(attr::LEASE_TOKEN),
            expr.value("token", number(lease.token.get())),
        );
        let (extra, update) = change(&mut expr);
        let condition = if extra.is_empty() {
            held
        } else {
            format!("{held} AND {extra}")
        };
        match dynamodb.update(domain, &expr, (condition, update)).await {
            Ok(()) => Ok(Ok(())),
            Err(Failure::Condition(Some(item))) => {
                Ok(Err(Stored::decode(domain, Some(&without_key(item)))?))
            }
            Err(Failure::Condition(None)) => {
                Ok(Err(dynamodb.read(domain, Operation::Lease).await?))
            }
            Err(other) => Err(other.into_fence_error(domain, Operation::Lease, true)),
        }
    }

    fn lost(lease: &Lease) -> FenceError {
        FenceError::LeaseLost {
            domain: lease.domain.clone(),
            token: lease.token,
        }
    }
}

/// A new record version number (never 0, the one value a count cannot hold).
fn fresh_rvn() -> u64 {
    random_u64() | 1
}

/// The TTL in whole milliseconds (checked by `check_lease_ttl` to fit).
fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[async_trait]
impl LeaseManager for DynamoDbLeases {
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
        let started = Instant::now();
        let mut stored = self.dynamodb.read(domain, Operation::Lease).await?;
        for attempt in 0..MAX_ATTEMPTS {
            if let Some(lease) = &stored.lease {
                // The same owner re-acquires its own lease at once (a new, greater token).
                if lease.owner != owner.as_str() && !self.remaining(domain, lease).is_zero() {
                    return Err(FenceError::LeaseHeld {
                        domain: domain.clone(),
                    });
                }
            }
            match self.grant(domain, owner, ttl, &mut stored).await {
                Ok(Some(token)) => {
                    self.seen.remove(domain);
                    return Ok(Lease::new(
                        domain.clone(),
                        owner.clone(),
                        token,
                        held_until(started, ttl),
                    ));
                }
                Ok(None) => {}
                Err(Failure::NotApplied(_)) => {
                    tokio::time::sleep(pause(attempt)).await;
                    stored = self.dynamodb.read(domain, Operation::Lease).await?;
                }
                // A grant whose answer was lost may have given the lease to this owner: the
                // token is unknown, so the outcome is reported as it is (`Ambiguous`).
                Err(other) => return Err(other.into_fence_error(domain, Operation::Lease, true)),
            }
        }
        Err(backend_error(
            Some(domain),
            DynamoDbFenceError::Contention {
                attempts: MAX_ATTEMPTS,
            },
        ))
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        check_lease_ttl(&lease.domain, ttl)?;
        let started = Instant::now();
        // The stored duration never shrinks: a contender counts it from when it saw the
        // renewal, while a holder that lost the renewal's answer still counts the one before.
        // A shorter renewal keeps the stored duration, and the holder counts the shorter one
        // it asked for (it gives up first). Repeating a renewal is harmless.
        let mut stored_ttl = ttl_ms(ttl);
        for _ in 0..2 {
            let renewed = self
                .update_held(lease, |expr| {
                    let ttl_attr = expr.name(attr::TTL);
                    let ttl = expr.value("ttl", number(stored_ttl));
                    let update = format!(
                        "SET {} = {}, {ttl_attr} = {ttl}",
                        expr.name(attr::RVN),
                        expr.value("rvn", number(fresh_rvn())),
                    );
                    (format!("{ttl_attr} <= {ttl}"), update)
                })
                .await?;
            match renewed {
                Ok(()) => {
                    return Ok(Lease::new(
                        lease.domain.clone(),
                        lease.owner.clone(),
                        lease.token,
                        held_until(started, ttl),
                    ))
                }
                Err(now) => match now.lease {
                    Some(held)
                        if held.owner == lease.owner.as_str()
                            && held.token == lease.token
                            && held.ttl_ms > stored_ttl =>
                    {
                        stored_ttl = held.ttl_ms;
                    }
                    _ => break,
                },
            }
        }
        Err(Self::lost(lease))
    }

    async fn release(&self, lease: &Lease) -> Result<(), FenceError> {
        let released = self
            .update_held(lease, |expr| {
                let update = format!(
                    "REMOVE {}, {}, {}, {}",
                    expr.name(attr::OWNER),
                    expr.name(attr::LEASE_TOKEN),
                    expr.name(attr::RVN),
                    expr.name(attr::TTL)
                );
                (String::new(), update)
            })
            .await?;
        released.map_err(|_| Self::lost(lease))
    }

    async fn holder(&self, domain: &Domain) -> Result<Option<LeaseHolder>, FenceError> {
        let stored = self.dynamodb.read(domain, Operation::LeaseHolder).await?;
        let Some(lease) = stored.lease else {
            return Ok(None);
        };
        let owner = OwnerId::new(lease.owner.as_str())
            .map_err(|e| corrupt(domain, format!("the lease's owner: {e}")))?;
        let remaining = self.remaining(domain, &lease);
        Ok(Some(LeaseHolder::new(owner, lease.token, Some(remaining))))
    }
}

impl fmt::Debug for DynamoDbLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbLeases")
            .field("dynamodb", &self.dynamodb)
            .field("seen", &self.seen.len())
            .finish()
    }
}
