//! A token issuer and leases in MySQL: a per-domain counter floored at the domain's mark, and
//! lease expiry decided by the server's clock.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use fence_core::raw::{check_lease_ttl, held_until};
use fence_core::{
    Domain, FenceError, FencingToken, InvalidInput, Lease, LeaseHolder, LeaseManager, Observed,
    Operation, OwnerId, TokenIssuer,
};
use sqlx::MySqlConnection;

use crate::error::commit;
use crate::error::{corrupt, map_error, BACKEND};
use crate::fence::MySqlFence;
use crate::mark::token_column;

/// The longest lease TTL: a `DATETIME(6)` ends in the year 9999.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Issues tokens from `<database>.fence_counters`: one row per domain, never deleted by Fence,
/// each issue floored at the domain's mark in `fence_marks`, so a recreated or restored counter
/// never issues a token the resource has already seen. Durable across restarts.
#[derive(Clone, Debug)]
pub struct MySqlIssuer {
    fence: MySqlFence,
}

/// Leases in `<database>.fence_leases`, whose tokens come from the issuer's counter (one
/// sequence per domain for both). Expiry is decided by the server's clock (`UTC_TIMESTAMP(6)`),
/// never a client's; `renew` and `release` act only for the current owner and token.
/// [`Lease::valid_until`] is measured on the holder's clock from before the request was sent
/// and ends short of the TTL by the drift bound ([`fence_core::raw::held_until`]). MySQL has no
/// notifications: a waiting [`fence_core::LeaseGuard::acquire`] polls (25–50 ms).
#[derive(Clone, Debug)]
pub struct MySqlLeases {
    fence: MySqlFence,
}

impl MySqlFence {
    /// A token issuer on this fence's pool and database, inside the telemetry layer.
    pub fn issuer(&self) -> Observed<MySqlIssuer> {
        Observed::new(MySqlIssuer {
            fence: self.clone(),
        })
    }

    /// Leases on this fence's pool and database, inside the telemetry layer.
    pub fn leases(&self) -> Observed<MySqlLeases> {
        Observed::new(MySqlLeases {
            fence: self.clone(),
        })
    }

    /// Issues the domain's next token inside `tx`: the counter row is locked (created at 0 if
    /// missing), the next token is one above the greater of the counter and the domain's mark.
    async fn issue_in(
        &self,
        tx: &mut MySqlConnection,
        domain: &Domain,
        operation: Operation,
    ) -> Result<FencingToken, FenceError> {
        let counters = self.tables().counters();
        let key = domain.as_str().as_bytes();
        let sql_error = |e| map_error(e, domain, operation, false);
        sqlx::query(&format!(
            "INSERT INTO {counters} (domain, last) VALUES (?, 0) \
             ON DUPLICATE KEY UPDATE domain = domain"
        ))
        .bind(key)
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?;
        let last: u64 = sqlx::query_scalar(&format!(
            "SELECT last FROM {counters} WHERE domain = ? FOR UPDATE"
        ))
        .bind(key)
        .fetch_one(&mut *tx)
        .await
        .map_err(sql_error)?;
        // A plain read, the transaction's first: its snapshot is taken under the counter's
        // lock (a locking read of a missing mark row would take a gap lock).
        let mark: Option<Option<u64>> = sqlx::query_scalar(&format!(
            "SELECT hwm FROM {} WHERE domain = ?",
            self.tables().marks()
        ))
        .bind(key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_error)?;
        let mark = match mark.flatten() {
            Some(mark) => token_column(domain, mark, "high-water mark")?.get(),
            None => 0,
        };
        let next = last
            .max(mark)
            .checked_add(1)
            .ok_or_else(|| FenceError::TokenExhausted {
                domain: domain.clone(),
            })?;
        sqlx::query(&format!("UPDATE {counters} SET last = ? WHERE domain = ?"))
            .bind(next)
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(sql_error)?;
        Ok(FencingToken::new(next)?)
    }
}

#[async_trait]
impl TokenIssuer for MySqlIssuer {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        let operation = Operation::Issue;
        self.fence.ensure_shape(domain, operation).await?;
        let mut tx = self
            .fence
            .pool()
            .begin()
            .await
            .map_err(|e| map_error(e, domain, operation, false))?;
        let token = self.fence.issue_in(&mut tx, domain, operation).await?;
        commit(tx, domain, operation).await?;
        Ok(token)
    }
}

/// The TTL in microseconds, once within what a `DATETIME(6)` holds.
fn ttl_micros(domain: &Domain, ttl: Duration) -> Result<u64, FenceError> {
    check_lease_ttl(domain, ttl)?;
    if ttl > MAX_LEASE_TTL {
        return Err(InvalidInput::Configuration(format!(
            "lease ttl on domain `{domain}` must be at most {MAX_LEASE_TTL:?} on MySQL \
             (a DATETIME ends in 9999), got {ttl:?}"
        ))
        .into());
    }
    Ok(u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX))
}

fn lost(lease: &Lease) -> FenceError {
    FenceError::LeaseLost {
        domain: lease.domain.clone(),
        token: lease.token,
    }
}

impl MySqlLeases {
    async fn acquire_now(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        let micros = ttl_micros(domain, ttl)?;
        let operation = Operation::Lease;
        let sql_error = |e| map_error(e, domain, operation, false);
        self.fence.ensure_shape(domain, operation).await?;
        let started = Instant::now();
        let mut tx = self.fence.pool().begin().await.map_err(sql_error)?;
        // The counter row's lock (taken by the issue) serializes acquisitions of the domain;
        // the lease row is read under it, so a refusal issues nothing.
        let token = self.fence.issue_in(&mut tx, domain, operation).await?;
        let leases = self.fence.tables().leases();
        let key = domain.as_str().as_bytes();
        let holder: Option<(Vec<u8>, bool)> = sqlx::query_as(&format!(
            "SELECT owner, expires > UTC_TIMESTAMP(6) FROM {leases} WHERE domain = ?"
        ))
        .bind(key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_error)?;
        if let Some((current, true)) = &holder {
            if current.as_slice() != owner.as_str().as_bytes() {
                // Dropping the transaction rolls the issue back: losers consume no token.
                return Err(FenceError::LeaseHeld {
                    domain: domain.clone(),
                });
            }
        }
        sqlx::query(&format!(
            "INSERT INTO {leases} (domain, owner, token, expires) \
             VALUES (?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) \
             ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token), \
             expires = VALUES(expires)"
        ))
        .bind(key)
        .bind(owner.as_str().as_bytes())
        .bind(token.get())
        .bind(micros)
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?;
        commit(tx, domain, operation).await?;
        Ok(Lease::new(
            domain.clone(),
            owner.clone(),
            token,
            held_until(started, ttl),
        ))
    }

    async fn renew_now(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        let domain = &lease.domain;
        let micros = ttl_micros(domain, ttl)?;
        self.fence.ensure_shape(domain, Operation::Lease).await?;
        let started = Instant::now();
        let renewed = sqlx::query(&format!(
            "UPDATE {} SET expires = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
             WHERE domain = ? AND owner = ? AND token = ? AND expires > UTC_TIMESTAMP(6)",
            self.fence.tables().leases()
        ))
        .bind(micros)
        .bind(domain.as_str().as_bytes())
        .bind(lease.owner.as_str().as_bytes())
        .bind(lease.token.get())
        .execute(self.fence.pool())
        .await
        .map_err(|e| map_error(e, domain, Operation::Lease, false))?
        .rows_affected();
        if renewed == 1 {
            Ok(Lease::new(
                domain.clone(),
                lease.owner.clone(),
                lease.token,
                held_until(started, ttl),
            ))
        } else {
            Err(lost(lease))
        }
    }

    async fn release_now(&self, lease: &Lease) -> Result<(), FenceError> {
        let domain = &lease.domain;
        self.fence.ensure_shape(domain, Operation::Lease).await?;
        // The live row first; else an expired row of this owner is removed too (no one holds
        // it), but reported lost.
        for live_only in [true, false] {
            let condition = if live_only {
                " AND expires > UTC_TIMESTAMP(6)"
            } else {
                ""
            };
            let deleted = sqlx::query(&format!(
                "DELETE FROM {} WHERE domain = ? AND owner = ? AND token = ?{condition}",
                self.fence.tables().leases()
            ))
            .bind(domain.as_str().as_bytes())
            .bind(lease.owner.as_str().as_bytes())
            .bind(lease.token.get())
            .execute(self.fence.pool())
            .await
            .map_err(|e| map_error(e, domain, Operation::Lease, false))?
            .rows_affected();
            if live_only && deleted == 1 {
                return Ok(());
            }
        }
        Err(lost(lease))
    }
}

#[async_trait]
impl LeaseManager for MySqlLeases {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    /// The live lease row, with its remaining time by the server's clock.
    async fn holder(&self, domain: &Domain) -> Result<Option<LeaseHolder>, FenceError> {
        self.fence.ensure_shape(domain, Operation::Read).await?;
        let row: Option<(Vec<u8>, u64, i64)> = sqlx::query_as(&format!(
            "SELECT owner, token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires) \
             FROM {} WHERE domain = ? AND expires > UTC_TIMESTAMP(6)",
            self.fence.tables().leases()
        ))
        .bind(domain.as_str().as_bytes())
        .fetch_optional(self.fence.pool())
        .await
        .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        let Some((owner, token, remaining_us)) = row else {
            return Ok(None);
        };
        let owner = OwnerId::new(String::from_utf8_lossy(&owner))
            .map_err(|_| corrupt(domain, "lease row: no valid owner"))?;
        let token = token_column(domain, token, "lease token")?;
        let remaining = u64::try_from(remaining_us).ok().map(Duration::from_micros);
        Ok(Some(LeaseHolder::new(owner, token, remaining)))
    }

    async fn acquire(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        self.acquire_now(domain, owner, ttl).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        self.renew_now(lease, ttl).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), FenceError> {
        self.release_now(lease).await
    }
}
