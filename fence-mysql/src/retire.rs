//! Retiring a domain on MySQL: its mark row, counter row, op-id rows and lease row, deleted in
//! one transaction that refuses under a live lease.

use async_trait::async_trait;
use fence_core::{Domain, FenceError, Operation, Retired, Retirer};

use crate::MySqlFence;

#[async_trait]
impl Retirer for MySqlFence {
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError> {
        self.ensure_shape(domain, Operation::Write).await?;
        fence_sql::retire(self.pool(), self.tables(), domain).await
    }
}
