//! An operator's re-base of a domain whose mark was pushed to a token no one issued: the
//! domain's folder read, the re-base decided on it with the read's revision as the issuer's
//! floor, and the lowered mark written with its record in one txn that fails if the domain
//! changed meanwhile.

use std::time::SystemTime;

use async_trait::async_trait;
use etcd_client::{GetOptions, Txn, TxnOp};
use fence_core::{
    Domain, FenceError, FencingToken, IssuerView, Operation, Rebase, RebaseRecord, Rebaser,
};

use crate::error::{corrupt, map_error};
use crate::fence::EtcdFence;
use crate::state::Stored;

#[async_trait]
impl Rebaser for EtcdFence {
    /// Re-bases `domain` (see [`Rebase::decide`]): refused unless the mark is still the
    /// reviewed one. Every token this cluster ever issued (lease or issuer) is a revision at
    /// or below the read's, so the new mark is never below that revision: every earlier holder,
    /// the live lease's too, is fenced and takes the lease again. The entry's writer token is
    /// lowered to the new mark if above it, and the record goes to
    /// `<prefix>/rebases/<domain>/<n>` (a [`RebaseRecord::to_line`], timed by this client's
    /// clock). A domain changed between the read and the txn is refused: review it again. For a
    /// domain whose tokens come from another issuer ([`Rebase::issuer_elsewhere`]) the mark is
    /// the requested one, unraised.
    async fn rebase(&self, domain: &Domain, rebase: &Rebase) -> Result<RebaseRecord, FenceError> {
        let operation = Operation::Rebase;
        let keys = self.etcd().keys();
        let dir = keys.store_dir(domain);
        self.forget(domain);
        let mut kv = self.etcd().etcd_client().kv_client();
        let read = kv
            .get(dir.as_bytes(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| map_error(e, domain, operation, false))?;
        let revision = read
            .header()
            .and_then(|h| u64::try_from(h.revision()).ok())
            .and_then(|r| FencingToken::new(r).ok())
            .ok_or_else(|| corrupt(domain, "a read answer without a revision"))?;
        let stored = Stored::decode(domain, &dir, read.kvs().to_vec())?;
        // Tokens of another issuer (declared by the operator) are not etcd revisions.
        let issuer = if rebase.is_issuer_elsewhere() {
            IssuerView::Unchecked
        } else {
            IssuerView::IssuedUpTo(Some(revision))
        };
        let to = rebase.decide(domain, stored.mark, issuer)?;

        let record = RebaseRecord::new(rebase, to, SystemTime::now());
        let head = stored.head.map(|head| head.capped_at(to));
        let mut changes = stored.replace(keys, domain, (to, head, stored.value.as_deref()))?;
        changes.push(TxnOp::put(
            keys.rebase(domain, stored.version),
            record.to_line(),
            None,
        ));
        let write = Txn::new()
            .when(stored.unchanged(keys, domain))
            .and_then(changes);
        let written = kv
            .txn(write)
            .await
            .map_err(|e| map_error(e, domain, operation, true))?;
        if !written.succeeded() {
            return Err(FenceError::RebaseRefused {
                domain: domain.clone(),
                detail: "the domain changed while the re-base was decided: review it again"
                    .to_owned(),
            });
        }
        Ok(record)
    }

    async fn rebases(&self, domain: &Domain) -> Result<Vec<RebaseRecord>, FenceError> {
        let dir = self.etcd().keys().rebases_dir(domain);
        let response = self
            .etcd()
            .etcd_client()
            .kv_client()
            .get(dir.as_bytes(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        let mut kvs = response.kvs().to_vec();
        kvs.sort_by_key(|kv| kv.create_revision());
        kvs.iter()
            .map(|kv| {
                let line = String::from_utf8_lossy(kv.value());
                RebaseRecord::parse_line(&line)
                    .map_err(|e| corrupt(domain, format!("re-base record `{line}`: {e}")))
            })
            .collect()
    }
}
