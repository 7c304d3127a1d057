//! A token issuer and leases in PostgreSQL: a per-domain counter floored at the domain's mark,
//! and lease expiry decided by the server's clock.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use fence_core::raw::{check_lease_ttl, held_until};
use fence_core::{
    Domain, FenceError, FencingToken, Lease, LeaseHolder, LeaseManager, Observed, Operation,
    OwnerId, TokenIssuer,
};
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::{PgConnection, Postgres, Transaction};

use crate::error::commit;
use crate::error::{corrupt, map_error, token_column, BACKEND};
use crate::fence::PostgresFence;

/// Issues tokens from `<schema>.fence_counters`: one row per domain, never deleted by Fence,
/// each issue floored at the domain's mark in `fence_marks`, so a recreated or restored
/// counter never issues a token the resource has already seen. Durable across restarts.
#[derive(Clone, Debug)]
pub struct PostgresIssuer {
    fence: PostgresFence,
}

/// Leases in `<schema>.fence_leases`, whose tokens come from the issuer's counter (one
/// sequence per domain for both). Expiry is decided by the server's clock
/// (`clock_timestamp()`), never a client's; `renew` and `release` act only for the current
/// owner and token. [`Lease::valid_until`] is measured on the holder's clock from before the
/// request was sent and ends short of the TTL by the drift bound
/// ([`fence_core::raw::held_until`]), so it errs early. A waiting [`fence_core::LeaseGuard::acquire`] is
/// woken by the release itself (`NOTIFY` on `fence_lease_released` when the release commits;
/// each waiter listens on a connection of its own, outside the pool, while it waits) or at the
/// holder's expiry by the server's clock: no polling.
#[derive(Clone, Debug)]
pub struct PostgresLeases {
    fence: PostgresFence,
}

impl PostgresFence {
    /// A token issuer on this fence's pool and schema, inside the telemetry layer.
    pub fn issuer(&self) -> Observed<PostgresIssuer> {
        Observed::new(PostgresIssuer {
            fence: self.clone(),
        })
    }

    /// Leases on this fence's pool and schema, inside the telemetry layer.
    pub fn leases(&self) -> Observed<PostgresLeases> {
        Observed::new(PostgresLeases {
            fence: self.clone(),
        })
    }

    /// Issues the domain's next token inside `tx`: the counter row is locked (created at 0 if
    /// missing), the next token is one above the greater of the counter and the domain's mark.
    async fn issue_in(
        &self,
        tx: &mut PgConnection,
        domain: &Domain,
        operation: Operation,
    ) -> Result<FencingToken, FenceError> {
        let counters = self.tables().counters();
        let sql_error = |e| map_error(e, domain, operation, false);
        sqlx::query(&format!(
            "INSERT INTO {counters} (domain, last) VALUES ($1, 0) ON CONFLICT (domain) DO NOTHING"
        ))
        .bind(domain.as_str())
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?;
        let last: String = sqlx::query_scalar(&format!(
            "SELECT last::text FROM {counters} WHERE domain = $1 FOR UPDATE"
        ))
        .bind(domain.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(sql_error)?;
        // The mark in its own statement, after the lock: a statement that waited for the lock
        // would still see the marks of its start.
        let mark: Option<Option<String>> = sqlx::query_scalar(&format!(
            "SELECT hwm::text FROM {} WHERE domain = $1",
            self.tables().marks()
        ))
        .bind(domain.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_error)?;
        let last: u64 = last
            .parse()
            .map_err(|e| corrupt(domain, format!("token counter `{last}`: {e}")))?;
        let mark = match mark.flatten() {
            Some(text) => token_column(domain, &text, "high-water mark")?.get(),
            None => 0,
        };
        let next = last
            .max(mark)
            .checked_add(1)
            .ok_or_else(|| FenceError::TokenExhausted {
                domain: domain.clone(),
            })?;
        sqlx::query(&format!(
            "UPDATE {counters} SET last = $2::numeric WHERE domain = $1"
        ))
        .bind(domain.as_str())
        .bind(next.to_string())
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?;
        Ok(FencingToken::new(next)?)
    }

    async fn begin_plain(
        &self,
        domain: &Domain,
        operation: Operation,
    ) -> Result<Transaction<'static, Postgres>, FenceError> {
        self.ensure_shape(domain, operation).await?;
        self.pool()
            .begin()
            .await
            .map_err(|e| map_error(e, domain, operation, false))
    }
}

#[async_trait]
impl TokenIssuer for PostgresIssuer {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        let mut tx = self.fence.begin_plain(domain, Operation::Issue).await?;
        let token = self
            .fence
            .issue_in(&mut tx, domain, Operation::Issue)
            .await?;
        commit(tx, domain, Operation::Issue).await?;
        Ok(token)
    }
}

/// The channel releases are notified on; the payload is `<schema>\n<domain>`.
const RELEASE_CHANNEL: &str = "fence_lease_released";

/// A TTL in whole milliseconds (checked to be 1 ..= `i64::MAX` by [`check_lease_ttl`] first).
fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

impl PostgresLeases {
    async fn acquire_now(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        let ms = ttl_ms(ttl);
        let operation = Operation::Lease;
        let leases = self.fence.tables().leases();
        let started = Instant::now();
        let mut tx = self.fence.begin_plain(domain, operation).await?;
        // The counter row's lock (taken by the issue below) serializes acquisitions; the
        // lease row is read under it, so a refusal issues nothing.
        let token = self.fence.issue_in(&mut tx, domain, operation).await?;
        let holder: Option<(String, bool)> = sqlx::query_as(&format!(
            "SELECT owner, expires > clock_timestamp() FROM {leases} WHERE domain = $1 FOR UPDATE"
        ))
        .bind(domain.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| map_error(e, domain, operation, false))?;
        if let Some((current, true)) = &holder {
            if current != owner.as_str() {
                // Dropping the transaction rolls the issue back: losers consume no token.
                return Err(FenceError::LeaseHeld {
                    domain: domain.clone(),
                });
            }
        }
        sqlx::query(&format!(
            "INSERT INTO {leases} (domain, owner, token, expires) \
             VALUES ($1, $2, $3::numeric, clock_timestamp() + $4 * interval '1 millisecond') \
             ON CONFLICT (domain) DO UPDATE SET owner = excluded.owner, token = excluded.token, \
             expires = excluded.expires"
        ))
        .bind(domain.as_str())
        .bind(owner.as_str())
        .bind(token.to_string())
        .bind(ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, domain, operation, false))?;
        commit(tx, domain, operation).await?;
        Ok(Lease::new(
            domain.clone(),
            owner.clone(),
            token,
            held_until(started, ttl),
        ))
    }

    async fn renew_now(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        let ms = ttl_ms(ttl);
        let domain = &lease.domain;
        self.fence.ensure_shape(domain, Operation::Lease).await?;
        let started = Instant::now();
        let renewed = sqlx::query(&format!(
            "UPDATE {} SET expires = clock_timestamp() + $4 * interval '1 millisecond' \
             WHERE domain = $1 AND owner = $2 AND token = $3::numeric \
             AND expires > clock_timestamp()",
            self.fence.tables().leases()
        ))
        .bind(domain.as_str())
        .bind(lease.owner.as_str())
        .bind(lease.token.to_string())
        .bind(ms)
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
        // An expired row of this owner is removed too (no one holds it), but reported lost.
        // Waiters are notified when the statement commits.
        let live: Option<bool> = sqlx::query_scalar(&format!(
            "WITH gone AS (DELETE FROM {} WHERE domain = $1 AND owner = $2 AND token = $3::numeric \
             RETURNING expires > clock_timestamp() AS live) \
             SELECT live FROM (SELECT live, pg_notify('{RELEASE_CHANNEL}', $4) FROM gone) AS notified",
            self.fence.tables().leases()
        ))
        .bind(domain.as_str())
        .bind(lease.owner.as_str())
        .bind(lease.token.to_string())
        .bind(self.release_payload(domain))
        .fetch_optional(self.fence.pool())
        .await
        .map_err(|e| map_error(e, domain, Operation::Lease, false))?;
        match live {
            Some(true) => Ok(()),
            _ => Err(lost(lease)),
        }
    }

    /// The notification payload of a release of `domain`'s lease in this schema.
    fn release_payload(&self, domain: &Domain) -> String {
        format!("{}\n{}", self.fence.schema(), domain.as_str())
    }

    /// Returns once `domain`'s lease is released (a notification) or has expired by the
    /// server's clock (read after listening, so a release in between is not missed).
    async fn released(&self, domain: &Domain) -> Result<(), FenceError> {
        let sql_error = |e| map_error(e, domain, Operation::Lease, false);
        // A connection of its own, outside the pool: waiters never starve the holders'
        // renewals of pool connections.
        let own = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with((*self.fence.pool().connect_options()).clone());
        let mut listener = PgListener::connect_with(&own).await.map_err(sql_error)?;
        listener.listen(RELEASE_CHANNEL).await.map_err(sql_error)?;
        let left_ms: Option<f64> = sqlx::query_scalar(&format!(
            "SELECT (extract(epoch FROM expires - clock_timestamp()) * 1000)::float8 \
             FROM {} WHERE domain = $1",
            self.fence.tables().leases()
        ))
        .bind(domain.as_str())
        .fetch_optional(&mut listener)
        .await
        .map_err(sql_error)?;
        let Some(left_ms) = left_ms.filter(|ms| ms.is_finite() && *ms > 0.0) else {
            return Ok(());
        };
        let expiry = Duration::from_secs_f64(left_ms.min(1e9) / 1000.0);
        let payload = self.release_payload(domain);
        let notified = async {
            loop {
                let notification = listener.recv().await.map_err(sql_error)?;
                if notification.payload() == payload {
                    return Ok(());
                }
            }
        };
        tokio::time::timeout(expiry, notified)
            .await
            .unwrap_or(Ok(()))
    }
}

fn lost(lease: &Lease) -> FenceError {
    FenceError::LeaseLost {
        domain: lease.domain.clone(),
        token: lease.token,
    }
}

#[async_trait]
impl LeaseManager for PostgresLeases {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    /// The live lease row, with its remaining time by the server's clock.
    async fn holder(&self, domain: &Domain) -> Result<Option<LeaseHolder>, FenceError> {
        self.fence.ensure_shape(domain, Operation::Read).await?;
        let row: Option<(String, String, i64)> = sqlx::query_as(&format!(
            "SELECT owner, token::text, \
             (extract(epoch FROM expires - clock_timestamp()) * 1000)::bigint \
             FROM {} WHERE domain = $1 AND expires > clock_timestamp()",
            self.fence.tables().leases()
        ))
        .bind(domain.as_str())
        .fetch_optional(self.fence.pool())
        .await
        .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        let Some((owner, token, remaining_ms)) = row else {
            return Ok(None);
        };
        let corrupt =
            |what: &str| FenceError::corrupt(BACKEND, domain, format!("lease row: {what}"));
        let owner = OwnerId::new(owner).map_err(|_| corrupt("no valid owner"))?;
        let token = token
            .parse()
            .map_err(|_| corrupt("token is not a u64 token"))?;
        let remaining = u64::try_from(remaining_ms).ok().map(Duration::from_millis);
        Ok(Some(LeaseHolder::new(owner, token, remaining)))
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

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        check_lease_ttl(&lease.domain, ttl)?;
        self.renew_now(lease, ttl).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), FenceError> {
        self.release_now(lease).await
    }

    /// Notified: `LISTEN` for releases, bounded by the holder's expiry.
    async fn wait_for_release(&self, domain: &Domain, within: Duration) {
        match tokio::time::timeout(within, self.released(domain)).await {
            Ok(Ok(())) | Err(_) => {}
            Ok(Err(error)) => {
                // Unreachable now: the caller's next attempt reports it; do not spin meanwhile.
                tracing::debug!(%error, domain = domain.as_str(), "listening for a release failed");
                tokio::time::sleep(within.min(Duration::from_millis(50))).await;
            }
        }
    }
}
