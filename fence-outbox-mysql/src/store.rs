//! The relay's side of the MySQL outbox: each step one short transaction that locks the
//! domain's outbox row, refuses a relay token older than the newest one seen there, and keeps
//! the domain's entries in order.

use std::time::Duration;

use async_trait::async_trait;
use fence_core::{Domain, FencingToken, Operation};
use fence_mysql::extension::{commit, map_error, token_column, BACKEND};
use fence_outbox::step::{StepLock, StepProgress};
use fence_outbox::{verdict, Candidate, OutboxEntry, OutboxError, OutboxStore, Purged, Settlement};
use fence_sql::release;
use sqlx::{MySql, Transaction};

use crate::outbox::{corrupt, MySqlOutbox};

/// The most delivered entries one purge call removes.
const PURGE_BATCH: u64 = 1000;

impl MySqlOutbox {
    /// Begins a relay step on `domain`: locks its outbox row and checks `relay` against the
    /// newest relay token seen there (older → `Fenced`), then records `relay` as the newest.
    /// `None` when the row is locked and `lock` says skip, or when the domain has no outbox.
    async fn relay_step(
        &self,
        domain: &Domain,
        relay: FencingToken,
        lock: StepLock,
    ) -> Result<Option<(Transaction<'static, MySql>, StepProgress)>, OutboxError> {
        let sql_error = |e| OutboxError::from(map_error(e, domain, Operation::Write, false));
        // The step pool's connections are closed by the server if their relay stops talking.
        let mut tx = self.steps.begin().await.map_err(sql_error)?;
        let skip = lock.clause();
        let row: Option<(u64, u64, Option<u64>)> = sqlx::query_as(&format!(
            "SELECT last_seq, done_seq, relay FROM {} WHERE domain = ? FOR UPDATE{skip}",
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
            .map(|newest| token_column(domain, newest, "relay token"))
            .transpose()?;
        if let Err(stale) = verdict::relay_may_step(domain, newest, relay) {
            release(tx).await;
            return Err(stale.into());
        }
        sqlx::query(&format!(
            "UPDATE {} SET relay = ? WHERE domain = ?",
            self.table("domains")
        ))
        .bind(relay.get())
        .bind(domain.as_str())
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?;
        Ok(Some((tx, progress)))
    }
}

#[async_trait]
impl OutboxStore for MySqlOutbox {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn candidates(&self, partition: u16, sweep: bool) -> Result<Vec<Candidate>, OutboxError> {
        // The listing is the data itself (no index to lose): the sweep only adds domains that
        // keep delivered entries, so they get purged.
        let rows: Vec<(Vec<u8>, u64)> = sqlx::query_as(&format!(
            "SELECT d.domain, d.version FROM {domains} d
             WHERE d.part = ? AND (d.done_seq < d.last_seq OR (? AND EXISTS (
                 SELECT 1 FROM {entries} e WHERE e.domain = d.domain AND e.status = 'd')))
             ORDER BY d.domain",
            domains = self.table("domains"),
            entries = self.table("entries"),
        ))
        .bind(partition)
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
        // Domains are stored as bytes: one that is not UTF-8 is not Fence's, and skipped.
        Ok(Candidate::listed(rows.into_iter().filter_map(
            |(domain, version)| match String::from_utf8(domain) {
                Ok(domain) => Some((domain, version.to_string())),
                Err(error) => {
                    tracing::warn!(%error, "outbox lists a domain that is not UTF-8");
                    None
                }
            },
        )))
    }

    async fn pending(
        &self,
        domain: &Domain,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, OutboxError> {
        let limit = u64::try_from(limit.max(1)).unwrap_or(u64::MAX);
        self.select_entries(domain, true, limit).await
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
        let sql_error = |e| OutboxError::from(map_error(e, domain, Operation::Write, false));
        let table = self.table("entries");
        let raised = sqlx::query(&format!(
            "UPDATE {table} SET attempts = attempts + 1
             WHERE domain = ? AND seq = ? AND status = 'p'"
        ))
        .bind(domain.as_str())
        .bind(seq)
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?
        .rows_affected();
        // The count this step raised (the row stays locked by the step).
        let attempts: Option<u32> = sqlx::query_scalar(&format!(
            "SELECT attempts FROM {table} WHERE domain = ? AND seq = ? FOR UPDATE"
        ))
        .bind(domain.as_str())
        .bind(seq)
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_error)?;
        let (1, Some(attempts)) = (raised, attempts) else {
            return Err(corrupt(
                domain,
                format!("head entry {seq} is missing or already settled"),
            ));
        };
        commit(tx, domain, Operation::Write).await?;
        Ok(Some(attempts))
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
        let (code, error) = settlement.code();
        let settled = code != 'r';
        let sql_error = |e| OutboxError::from(map_error(e, domain, Operation::Write, false));
        let updated = sqlx::query(&format!(
            "UPDATE {} SET status = IF(?, ?, status),
                 last_error = IF(? = '', last_error, ?),
                 settled_at = IF(?, UTC_TIMESTAMP(6), NULL),
                 settled_by = IF(?, ?, NULL)
             WHERE domain = ? AND seq = ? AND status = 'p'",
            self.table("entries")
        ))
        .bind(settled)
        .bind(code.to_string())
        .bind(error)
        .bind(error)
        .bind(settled)
        .bind(settled)
        .bind(relay.get())
        .bind(domain.as_str())
        .bind(seq)
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?
        .rows_affected();
        // Matched rows (sqlx connects with CLIENT_FOUND_ROWS): 0 means gone or settled.
        if updated != 1 {
            return Err(corrupt(
                domain,
                format!("head entry {seq} is missing or already settled"),
            ));
        }
        if settled {
            sqlx::query(&format!(
                "UPDATE {} SET done_seq = ? WHERE domain = ?",
                self.table("domains")
            ))
            .bind(seq)
            .bind(domain.as_str())
            .execute(&mut *tx)
            .await
            .map_err(sql_error)?;
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
        let retention_us = u64::try_from(retention.as_micros()).unwrap_or(u64::MAX);
        let removed = sqlx::query(&format!(
            "DELETE FROM {} WHERE domain = ? AND status = 'd'
                 AND settled_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
             ORDER BY seq LIMIT ?",
            self.table("entries")
        ))
        .bind(domain.as_str())
        .bind(retention_us)
        .bind(PURGE_BATCH)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, domain, Operation::Write, false))?
        .rows_affected();
        commit(tx, domain, Operation::Write).await?;
        Ok(Purged::new(usize::try_from(removed).unwrap_or(usize::MAX)))
    }
}
