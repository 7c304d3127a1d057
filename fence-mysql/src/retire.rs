//! Retiring a domain on MySQL: its mark row, counter row, op-id rows and lease row, deleted in
//! one transaction that refuses under a live lease.

use async_trait::async_trait;
use fence_core::{Domain, FenceError, Operation, Retired, Retirer};

use crate::error::commit;
use crate::error::map_error;
use crate::MySqlFence;

#[async_trait]
impl Retirer for MySqlFence {
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError> {
        let operation = Operation::Write;
        self.ensure_shape(domain, operation).await?;
        let sql_error = |e| map_error(e, domain, operation, false);
        let tables = self.tables();
        let key = domain.as_str().as_bytes();
        let mut tx = self.pool().begin().await.map_err(sql_error)?;
        // The lease row locked first: an acquisition waits behind the retirement, or wins.
        let live: Option<bool> = sqlx::query_scalar(&format!(
            "SELECT expires > UTC_TIMESTAMP(6) FROM {} WHERE domain = ? FOR UPDATE",
            tables.leases()
        ))
        .bind(key)
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
            let deleted = sqlx::query(&format!("DELETE FROM {table} WHERE domain = ?"))
                .bind(key)
                .execute(&mut *tx)
                .await
                .map_err(sql_error)?;
            removed += usize::try_from(deleted.rows_affected()).unwrap_or(usize::MAX);
        }
        // A lost answer to COMMIT leaves the outcome unknown: retrying is safe (idempotent).
        commit(tx, domain, operation).await?;
        Ok(Retired::new(removed))
    }
}
