//! Retiring a domain on PostgreSQL: its mark row, counter row, op-id rows and lease row,
//! deleted in one transaction that refuses under a live lease (re-base rows, the audit trail,
//! are kept).

use async_trait::async_trait;
use fence_core::{Domain, FenceError, Operation, Retired, Retirer};

use crate::error::map_error;
use crate::PostgresFence;

#[async_trait]
impl Retirer for PostgresFence {
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError> {
        self.ensure_shape(domain, Operation::Write).await?;
        let sql_error = |e| map_error(e, domain, Operation::Write, false);
        let tables = self.tables();
        let mut tx = self.pool().begin().await.map_err(sql_error)?;
        // The lease row locked first: an acquisition waits behind the retirement, or wins.
        let live: Option<bool> = sqlx::query_scalar(&format!(
            "SELECT expires > clock_timestamp() FROM {} WHERE domain = $1 FOR UPDATE",
            tables.leases()
        ))
        .bind(domain.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_error)?;
        if live == Some(true) {
            return Err(FenceError::LeaseHeld {
                domain: domain.clone(),
            });
        }
        let mut removed = 0;
        for table in [
            tables.leases(),
            tables.ops(),
            tables.counters(),
            tables.marks(),
        ] {
            let deleted = sqlx::query(&format!("DELETE FROM {table} WHERE domain = $1"))
                .bind(domain.as_str())
                .execute(&mut *tx)
                .await
                .map_err(sql_error)?;
            removed += usize::try_from(deleted.rows_affected()).unwrap_or(usize::MAX);
        }
        // A lost answer to COMMIT leaves the outcome unknown: retrying is safe (idempotent).
        tx.commit()
            .await
            .map_err(|e| map_error(e, domain, Operation::Write, true))?;
        Ok(Retired::new(removed))
    }
}
