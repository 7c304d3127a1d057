//! Retiring a domain on etcd: its store folder (its state, remembered operations, any layout-1
//! keys) and
//! its issuer key, deleted in one txn that refuses while the lock key exists (a live lease);
//! re-base records, the audit trail, are kept.

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, DeleteOptions, Txn, TxnOp, TxnOpResponse};
use fence_core::{Domain, FenceError, Operation, Retired, Retirer};

use crate::error::map_error;
use crate::fence::EtcdFence;

#[async_trait]
impl Retirer for EtcdFence {
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError> {
        let keys = self.etcd().keys();
        self.forget(domain);
        let retire = Txn::new()
            // The lock key lives as long as its holder's etcd lease: absent, no one holds one.
            .when([Compare::version(keys.lock(domain), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::delete(
                    keys.store_dir(domain),
                    Some(DeleteOptions::new().with_prefix()),
                ),
                TxnOp::delete(keys.issued(domain), None),
            ]);
        let answer = self
            .etcd()
            .etcd_client()
            .kv_client()
            .txn(retire)
            .await
            .map_err(|e| map_error(e, domain, Operation::Write, true))?;
        if !answer.succeeded() {
            return Err(FenceError::LeaseHeld {
                domain: domain.clone(),
            });
        }
        let removed = answer
            .op_responses()
            .iter()
            .map(|response| match response {
                TxnOpResponse::Delete(deleted) => usize::try_from(deleted.deleted()).unwrap_or(0),
                _ => 0,
            })
            .sum();
        Ok(Retired::new(removed))
    }
}
