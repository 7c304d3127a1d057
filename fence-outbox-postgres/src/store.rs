//! The relay's side of the PostgreSQL outbox: each step one short transaction that locks the
//! domain's outbox row, refuses a relay token older than the newest one seen there, and keeps
//! the domain's entries in order.

use std::time::Duration;

use async_trait::async_trait;
use fence_core::{Domain, FencingToken, Operation};
use fence_outbox::step::{StepLock, StepProgress};
use fence_outbox::{verdict, Candidate, OutboxEntry, OutboxError, OutboxStore, Purged, Settlement};
use fence_postgres::extension::{commit, map_error, token_column, BACKEND};
use fence_sql::release;
use sqlx::{Postgres, Transaction};

use crate::outbox::{corrupt, PostgresOutbox};

/// The most delivered entries one purge call removes.
const PURGE_BATCH: i64 = 1000;

impl PostgresOutbox {
    /// Begins a relay step on `domain`: locks its outbox row and checks `relay` against the
    /// newest relay token seen there (older → `Fenced`), then records `relay` as the newest.
    /// `None` when the row is locked and `lock` says skip, or when the domain has no outbox.
    async fn relay_step(
        &self,
        domain: &Domain,
        relay: FencingToken,
        lock: StepLock,
    ) -> Result<Option<(Transaction<'static, Postgres>, StepProgress)>, OutboxError> {
        let sql_error = |e| OutboxError::from(map_error(e, domain, Operation::Write, false));
        let mut tx = self.fence.pool().begin().await.map_err(sql_error)?;
        // For this transaction only: the server ends it if its relay stops talking mid-step.
        let step_ms = self.step_timeout.as_millis().to_string();
        sqlx::query("SELECT set_config('idle_in_transaction_session_timeout', $1, true)")
            .bind(&step_ms)
            .execute(&mut *tx)
            .await
            .map_err(sql_error)?;
        let skip = lock.clause();
        let row: Option<(i64, i64, Option<String>)> = sqlx::query_as(&format!(
            "SELECT last, done, relay::text FROM {} WHERE domain = $1 FOR UPDATE{skip}",
            self.table("domains")
        ))
        .bind(domain.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_error)?;
        let Some((last, done, newest)) = row else {
            release(tx).await;
            return Ok(None);
        };
        let Some(progress) = StepProgress::new(last, done) else {
            return Err(corrupt(domain, format!("outbox progress {done} of {last}")));
        };
        let newest = newest
            .map(|newest| token_column(domain, &newest, "relay token"))
            .transpose()?;
        if let Err(stale) = verdict::relay_may_step(domain, newest, relay) {
            release(tx).await;
            return Err(stale.into());
        }
        sqlx::query(&format!(
            "UPDATE {} SET relay = $2::numeric WHERE domain = $1",
            self.table("domains")
        ))
        .bind(domain.as_str())
        .bind(relay.to_string())
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?;
        Ok(Some((tx, progress)))
    }
}

fn seq_i64(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

#[async_trait]
impl OutboxStore for PostgresOutbox {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn candidates(&self, partition: u16, sweep: bool) -> Result<Vec<Candidate>, OutboxError> {
        // The listing is the data itself (no index to lose): the sweep only adds domains that
        // keep delivered entries, so they get purged.
        let rows: Vec<(String, String)> = sqlx::query_as(&format!(
            "SELECT d.domain, d.version::text FROM {domains} d
             WHERE d.partition = $1 AND (d.done < d.last OR ($2 AND EXISTS (
                 SELECT 1 FROM {entries} e WHERE e.domain = d.domain AND e.status = 'd')))
             ORDER BY d.domain",
            domains = self.table("domains"),
            entries = self.table("entries"),
        ))
        .bind(i32::from(partition))
        .bind(sweep)
        .fetch_all(self.fence.pool())
        .await
        .map_err(|e| {
            let listing = Domain::new(format!("fence-outbox-partition-{partition}"));
            match listing {
                Ok(domain) => OutboxError::from(map_error(e, &domain, Operation::Read, false)),
                Err(invalid) => invalid.into(),
            }
        })?;
        Ok(Candidate::listed(rows))
    }

    async fn pending(
        &self,
        domain: &Domain,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, OutboxError> {
        let mut conn = self
            .fence
            .pool()
            .acquire()
            .await
            .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        let done: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT done FROM {} WHERE domain = $1",
            self.table("domains")
        ))
        .bind(domain.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        let Some(done) = done else {
            return Ok(Vec::new());
        };
        let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX);
        self.select_entries(&mut conn, domain, done, limit, true)
            .await
    }

    async fn begin(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
    ) -> Result<Option<u32>, OutboxError> {
        let Some((mut tx, progress)) = self.relay_step(domain, relay, StepLock::SkipLocked).await?
        else {
            return Ok(None);
        };
        if !progress.is_head(seq) {
            release(tx).await;
            return Ok(None);
        }
        let seq = seq_i64(seq);
        let attempts: Option<i32> = sqlx::query_scalar(&format!(
            "UPDATE {} SET attempts = attempts + 1
             WHERE domain = $1 AND seq = $2 AND status = 'p' RETURNING attempts",
            self.table("entries")
        ))
        .bind(domain.as_str())
        .bind(seq)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| map_error(e, domain, Operation::Write, false))?;
        let Some(attempts) = attempts else {
            return Err(corrupt(
                domain,
                format!("head entry {seq} is missing or already settled"),
            ));
        };
        commit(tx, domain, Operation::Write).await?;
        Ok(Some(u32::try_from(attempts).unwrap_or(u32::MAX)))
    }

    async fn settle(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
        settlement: &Settlement,
    ) -> Result<bool, OutboxError> {
        let Some((mut tx, progress)) = self.relay_step(domain, relay, StepLock::Wait).await? else {
            return Ok(false);
        };
        if !progress.is_head(seq) {
            release(tx).await;
            return Ok(false);
        }
        let seq = seq_i64(seq);
        let (code, error) = settlement.code();
        let settled = code != 'r';
        let updated = sqlx::query(&format!(
            "UPDATE {} SET status = CASE WHEN $3 THEN $4::\"char\" ELSE status END,
                 last_error = CASE WHEN $5 = '' THEN last_error ELSE $5 END,
                 settled_at = CASE WHEN $3 THEN clock_timestamp() END,
                 settled_by = CASE WHEN $3 THEN $6::numeric END
             WHERE domain = $1 AND seq = $2 AND status = 'p'",
            self.table("entries")
        ))
        .bind(domain.as_str())
        .bind(seq)
        .bind(settled)
        .bind(code as i8)
        .bind(error)
        .bind(relay.to_string())
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, domain, Operation::Write, false))?
        .rows_affected();
        if updated != 1 {
            return Err(corrupt(
                domain,
                format!("head entry {seq} is missing or already settled"),
            ));
        }
        if settled {
            sqlx::query(&format!(
                "UPDATE {} SET done = $2 WHERE domain = $1",
                self.table("domains")
            ))
            .bind(domain.as_str())
            .bind(seq)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_error(e, domain, Operation::Write, false))?;
        }
        commit(tx, domain, Operation::Write).await?;
        Ok(true)
    }

    async fn purge(
        &self,
        candidate: &Candidate,
        relay: FencingToken,
        retention: Duration,
        _drained: bool,
    ) -> Result<Purged, OutboxError> {
        let domain = &candidate.domain;
        let Some((mut tx, _)) = self.relay_step(domain, relay, StepLock::SkipLocked).await? else {
            return Ok(Purged::new(0));
        };
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let removed = sqlx::query(&format!(
            "DELETE FROM {entries} WHERE domain = $1 AND seq IN (
                 SELECT seq FROM {entries} WHERE domain = $1 AND status = 'd'
                 AND settled_at < clock_timestamp() - $2 * interval '1 millisecond'
                 ORDER BY seq LIMIT $3)",
            entries = self.table("entries")
        ))
        .bind(domain.as_str())
        .bind(retention_ms)
        .bind(PURGE_BATCH)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, domain, Operation::Write, false))?
        .rows_affected();
        commit(tx, domain, Operation::Write).await?;
        Ok(Purged::new(usize::try_from(removed).unwrap_or(usize::MAX)))
    }

    async fn wait_for_work(&self, partition: u16, idle: Duration, seen: &mut u64) {
        self.wakeups
            .wait(self.fence.pool(), partition, idle, seen)
            .await;
    }
}
