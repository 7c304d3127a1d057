//! A token issuer and leases in the fence's tables: a per-domain counter floored at the
//! domain's mark, and lease expiry decided by the server's clock.

use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fence_core::raw::{check_lease_ttl, held_until};
use fence_core::{
    Domain, FenceError, FencingToken, InvalidInput, Lease, LeaseHolder, LeaseManager, Observed,
    Operation, OwnerId, TokenIssuer,
};
use sqlx::{ColumnIndex, Database, Decode, Executor, IntoArguments, QueryBuilder, Row, Type};

use crate::{commit, map_error, Dialect, FenceCore};

/// Issues tokens from `<namespace>.fence_counters`: one row per domain, never deleted by Fence,
/// each issue floored at the domain's mark in `fence_marks`, so a recreated or restored counter
/// never issues a token the resource has already seen. Durable across restarts. Made by the
/// fence's `issuer()`.
pub struct SqlIssuer<D: Dialect> {
    core: FenceCore<D>,
}

/// Leases in `<namespace>.fence_leases`, whose tokens come from the issuer's counter (one
/// sequence per domain for both). Expiry is decided by the server's clock, never a client's;
/// `renew` and `release` act only for the current owner and token. [`Lease::valid_until`] is
/// measured on the holder's clock from before the request was sent and ends short of the TTL
/// by the drift bound ([`fence_core::raw::held_until`]), so it errs early. Made by the fence's
/// `leases()`; the adapter's name for it says how a waiting [`fence_core::LeaseGuard`] learns
/// of a release.
pub struct SqlLeases<D: Dialect> {
    core: FenceCore<D>,
}

impl<D: Dialect> FenceCore<D> {
    /// A token issuer on this fence's pool and tables, inside the telemetry layer.
    pub fn issuer(&self) -> Observed<SqlIssuer<D>> {
        Observed::new(SqlIssuer { core: self.clone() })
    }

    /// Leases on this fence's pool and tables, inside the telemetry layer.
    pub fn leases(&self) -> Observed<SqlLeases<D>> {
        Observed::new(SqlLeases { core: self.clone() })
    }
}

/// `ttl` if the dialect's lease rows can hold it (fence-core's bounds, and the dialect's
/// longest lease), refused before any I/O otherwise.
fn check_ttl<D: Dialect>(domain: &Domain, ttl: Duration) -> Result<(), FenceError> {
    check_lease_ttl(domain, ttl)?;
    if ttl > D::MAX_LEASE_TTL {
        return Err(InvalidInput::Configuration(format!(
            "lease ttl on domain `{domain}` must be at most {:?} on {}, got {ttl:?}",
            D::MAX_LEASE_TTL,
            D::BACKEND
        ))
        .into());
    }
    Ok(())
}

fn lost(lease: &Lease) -> FenceError {
    FenceError::LeaseLost {
        domain: lease.domain.clone(),
        token: lease.token,
    }
}

/// `<column> = <domain> AND owner = <owner> AND token = <token>`: the lease row of `lease`.
fn push_lease<D: Dialect>(query: &mut QueryBuilder<'_, D::Db>, lease: &Lease) {
    query.push("domain = ");
    D::push_domain(query, &lease.domain);
    query.push(" AND owner = ");
    D::push_text(query, lease.owner.as_str());
    query.push(" AND token = ");
    D::push_token(query, lease.token);
}

impl<D: Dialect> FenceCore<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    /// Issues the domain's next token on `conn` (in the caller's transaction): the counter row
    /// is locked (created at 0 if missing), then the domain's mark is read (after the lock: a
    /// statement that waited for it would still see the marks of its start; on MySQL this
    /// plain read takes the transaction's snapshot then), and the next token is one above the
    /// greater of the two.
    async fn issue_in(
        &self,
        conn: &mut <D::Db as Database>::Connection,
        domain: &Domain,
        operation: Operation,
    ) -> Result<FencingToken, FenceError> {
        let sql_error = |e| map_error::<D>(e, domain, operation, false);
        let tables = self.tables();
        let mut create = QueryBuilder::new(format!(
            "INSERT INTO {} (domain, last) VALUES (",
            tables.counters()
        ));
        D::push_domain(&mut create, domain);
        create.push(", 0)").push(D::upsert(&[]));
        create
            .build()
            .execute(&mut *conn)
            .await
            .map_err(sql_error)?;
        let mut lock = QueryBuilder::new(format!(
            "SELECT {} FROM {} WHERE domain = ",
            D::token_select("last"),
            tables.counters()
        ));
        D::push_domain(&mut lock, domain);
        lock.push(" FOR UPDATE");
        let row = lock
            .build()
            .fetch_one(&mut *conn)
            .await
            .map_err(sql_error)?;
        let last: D::TokenValue = row
            .try_get(0)
            .map_err(|e| crate::corrupt::<D>(domain, format!("token counter: {e}")))?;
        let last = D::number_of(domain, last, "token counter")?;
        let mut mark = QueryBuilder::new(format!(
            "SELECT {} FROM {} WHERE domain = ",
            D::token_select("hwm"),
            tables.marks()
        ));
        D::push_domain(&mut mark, domain);
        let row = mark
            .build()
            .fetch_optional(&mut *conn)
            .await
            .map_err(sql_error)?;
        let mark: Option<D::TokenValue> = match row {
            None => None,
            Some(row) => row
                .try_get(0)
                .map_err(|e| crate::corrupt::<D>(domain, format!("high-water mark: {e}")))?,
        };
        let mark = match mark {
            Some(mark) => D::token_of(domain, mark, "high-water mark")?.get(),
            None => 0,
        };
        let next = last
            .max(mark)
            .checked_add(1)
            .ok_or_else(|| FenceError::TokenExhausted {
                domain: domain.clone(),
            })?;
        let next = FencingToken::new(next)?;
        let mut raise = QueryBuilder::new(format!("UPDATE {} SET last = ", tables.counters()));
        D::push_token(&mut raise, next);
        raise.push(" WHERE domain = ");
        D::push_domain(&mut raise, domain);
        raise.build().execute(&mut *conn).await.map_err(sql_error)?;
        Ok(next)
    }
}

#[async_trait]
impl<D: Dialect> TokenIssuer for SqlIssuer<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    fn backend(&self) -> &'static str {
        D::BACKEND
    }

    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        let operation = Operation::Issue;
        self.core.ensure_shape(domain, operation).await?;
        let mut tx = self
            .core
            .pool()
            .begin()
            .await
            .map_err(|e| map_error::<D>(e, domain, operation, false))?;
        match self.core.issue_in(&mut tx, domain, operation).await {
            Ok(token) => {
                commit::<D>(tx, domain, operation).await?;
                Ok(token)
            }
            Err(error) => {
                // The counter row's lock is free when the call returns.
                crate::release(tx).await;
                Err(error)
            }
        }
    }
}

impl<D: Dialect> SqlLeases<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
    bool: for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    async fn acquire_now(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        let operation = Operation::Lease;
        let sql_error = |e| map_error::<D>(e, domain, operation, false);
        self.core.ensure_shape(domain, operation).await?;
        let leases = self.core.tables().leases();
        let started = Instant::now();
        let mut tx = self.core.pool().begin().await.map_err(sql_error)?;
        // The counter row's lock (taken by the issue) serializes acquisitions of the domain;
        // the lease row is read under it, so a refusal issues nothing.
        let granted = async {
            let token = self.core.issue_in(&mut tx, domain, operation).await?;
            let mut read = QueryBuilder::new(format!(
                "SELECT owner, expires > {} FROM {leases} WHERE domain = ",
                D::NOW
            ));
            D::push_domain(&mut read, domain);
            read.push(D::LEASE_READ_SUFFIX);
            let holder = read
                .build()
                .fetch_optional(&mut *tx)
                .await
                .map_err(sql_error)?;
            if let Some(row) = holder {
                let column =
                    |e: sqlx::Error| crate::corrupt::<D>(domain, format!("lease row: {e}"));
                let current: D::TextValue = row.try_get(0).map_err(column)?;
                let live: bool = row.try_get(1).map_err(column)?;
                if live && D::text_of(domain, current, "lease owner")? != owner.as_str() {
                    return Err(FenceError::LeaseHeld {
                        domain: domain.clone(),
                    });
                }
            }
            let mut grant = QueryBuilder::new(format!(
                "INSERT INTO {leases} (domain, owner, token, expires) VALUES ("
            ));
            D::push_domain(&mut grant, domain);
            grant.push(", ");
            D::push_text(&mut grant, owner.as_str());
            grant.push(", ");
            D::push_token(&mut grant, token);
            grant.push(", ");
            D::push_expiry(&mut grant, ttl);
            grant
                .push(")")
                .push(D::upsert(&["owner", "token", "expires"]));
            grant.build().execute(&mut *tx).await.map_err(sql_error)?;
            Ok(token)
        }
        .await;
        let token = match granted {
            Ok(token) => token,
            Err(refused) => {
                // Rolled back now: losers consume no token, and the counter row's lock is
                // free when the call returns.
                crate::release(tx).await;
                return Err(refused);
            }
        };
        commit::<D>(tx, domain, operation).await?;
        Ok(Lease::new(
            domain.clone(),
            owner.clone(),
            token,
            held_until(started, ttl),
        ))
    }

    async fn renew_now(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        let domain = &lease.domain;
        self.core.ensure_shape(domain, Operation::Lease).await?;
        let started = Instant::now();
        let mut renew = QueryBuilder::new(format!(
            "UPDATE {} SET expires = ",
            self.core.tables().leases()
        ));
        D::push_expiry(&mut renew, ttl);
        renew.push(" WHERE ");
        push_lease::<D>(&mut renew, lease);
        renew.push(format!(" AND expires > {}", D::NOW));
        let renewed = self.execute(renew, domain).await?;
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
        self.core.ensure_shape(domain, Operation::Lease).await?;
        let sql_error = |e| map_error::<D>(e, domain, Operation::Lease, false);
        let mut conn = self.core.pool().acquire().await.map_err(sql_error)?;
        // The live row first; else an expired row of this owner is removed too (no one holds
        // it), but reported lost.
        for live_only in [true, false] {
            let mut delete = QueryBuilder::new(format!(
                "DELETE FROM {} WHERE ",
                self.core.tables().leases()
            ));
            push_lease::<D>(&mut delete, lease);
            if live_only {
                delete.push(format!(" AND expires > {}", D::NOW));
            }
            let deleted = delete
                .build()
                .execute(&mut *conn)
                .await
                .map_err(sql_error)?;
            if live_only && D::rows_affected(&deleted) == 1 {
                // Released whatever the notification does (on the same connection, once the
                // delete committed): a waiter it misses wakes at the expiry it read.
                if let Err(error) = D::notify_release(&mut conn, &self.core, domain).await {
                    tracing::debug!(%error, domain = domain.as_str(), "release not notified");
                }
                return Ok(());
            }
        }
        Err(lost(lease))
    }

    /// Runs `statement` on the pool; the rows it matched.
    async fn execute(
        &self,
        mut statement: QueryBuilder<'_, D::Db>,
        domain: &Domain,
    ) -> Result<u64, FenceError> {
        let mut conn = self
            .core
            .pool()
            .acquire()
            .await
            .map_err(|e| map_error::<D>(e, domain, Operation::Lease, false))?;
        let done = statement
            .build()
            .execute(&mut *conn)
            .await
            .map_err(|e| map_error::<D>(e, domain, Operation::Lease, false))?;
        Ok(D::rows_affected(&done))
    }
}

#[async_trait]
impl<D: Dialect> LeaseManager for SqlLeases<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
    bool: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'r> Decode<'r, D::Db> + Type<D::Db>,
{
    fn backend(&self) -> &'static str {
        D::BACKEND
    }

    /// The live lease row, with its remaining time by the server's clock.
    async fn holder(&self, domain: &Domain) -> Result<Option<LeaseHolder>, FenceError> {
        self.core.ensure_shape(domain, Operation::Read).await?;
        let mut query = QueryBuilder::new(format!(
            "SELECT owner, {}, {} FROM {} WHERE domain = ",
            D::token_select("token"),
            D::remaining_ms("expires"),
            self.core.tables().leases()
        ));
        D::push_domain(&mut query, domain);
        query.push(format!(" AND expires > {}", D::NOW));
        let mut conn = self
            .core
            .pool()
            .acquire()
            .await
            .map_err(|e| map_error::<D>(e, domain, Operation::Read, false))?;
        let row = query
            .build()
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| map_error::<D>(e, domain, Operation::Read, false))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let column = |e: sqlx::Error| crate::corrupt::<D>(domain, format!("lease row: {e}"));
        let owner: D::TextValue = row.try_get(0).map_err(column)?;
        let token: D::TokenValue = row.try_get(1).map_err(column)?;
        let remaining_ms: i64 = row.try_get(2).map_err(column)?;
        let owner = OwnerId::new(D::text_of(domain, owner, "lease owner")?)
            .map_err(|_| crate::corrupt::<D>(domain, "lease row: no valid owner"))?;
        let token = D::token_of(domain, token, "lease token")?;
        let remaining = u64::try_from(remaining_ms).ok().map(Duration::from_millis);
        Ok(Some(LeaseHolder::new(owner, token, remaining)))
    }

    async fn acquire(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        check_ttl::<D>(domain, ttl)?;
        self.acquire_now(domain, owner, ttl).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        check_ttl::<D>(&lease.domain, ttl)?;
        self.renew_now(lease, ttl).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), FenceError> {
        self.release_now(lease).await
    }

    /// As the dialect learns of a release: notified, or polling.
    async fn wait_for_release(&self, domain: &Domain, within: Duration) {
        D::wait_for_release(&self.core, domain, within).await;
    }
}

impl<D: Dialect> Clone for SqlIssuer<D> {
    fn clone(&self) -> Self {
        SqlIssuer {
            core: self.core.clone(),
        }
    }
}

impl<D: Dialect> Clone for SqlLeases<D> {
    fn clone(&self) -> Self {
        SqlLeases {
            core: self.core.clone(),
        }
    }
}

impl<D: Dialect> fmt::Debug for SqlIssuer<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlIssuer")
            .field("core", &self.core)
            .finish()
    }
}

impl<D: Dialect> fmt::Debug for SqlLeases<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlLeases")
            .field("core", &self.core)
            .finish()
    }
}
