//! Retiring a domain on PostgreSQL: its mark row, counter row, op-id rows and lease row,
//! deleted in one transaction that refuses under a live lease (re-base rows, the audit trail,
//! are kept).

use async_trait::async_trait;
use fence_core::{Domain, FenceError, Operation, Retired, Retirer};

use crate::PostgresFence;

#[async_trait]
impl Retirer for PostgresFence {
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError> {
        self.ensure_shape(domain, Operation::Write).await?;
        fence_sql::retire(self.pool(), self.tables(), domain).await
    }
}
