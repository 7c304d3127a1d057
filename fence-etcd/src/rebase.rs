//! An operator's re-base of a domain whose mark was pushed to a token no one issued: the
//! domain's folder and lock key read at one revision, the re-base decided on them, and the
//! lowered mark written with its record in one txn that fails if anything it read changed.

use std::time::SystemTime;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use fence_core::{
    Domain, EntryHead, FenceError, FencingToken, IssuerView, Operation, Rebase, RebaseRecord,
    Rebaser,
};

use crate::error::{corrupt, map_error};
use crate::fence::EtcdFence;
use crate::keys::StoreKey;
use crate::state::{live_lease, Stored};

#[async_trait]
impl Rebaser for EtcdFence {
    /// Re-bases `domain` (see [`Rebase`]): refused unless the mark is still the reviewed one
    /// and the new mark is at or above the last token this cluster issued for the domain (the
    /// live lease's lock key `create_revision`, and the [`crate::EtcdIssuer`]'s last put,
    /// whichever is greater); the entry's writer token is lowered to the new mark
    /// if above it. The record goes to `<prefix>/rebases/<domain>/<n>` (a
    /// [`RebaseRecord::to_line`], timed by this client's clock). A domain that changed between
    /// the read and the txn (a write, a new lease) is refused: review it again.
    async fn rebase(&self, domain: &Domain, rebase: &Rebase) -> Result<RebaseRecord, FenceError> {
        let operation = Operation::Rebase;
        let keys = self.etcd().keys();
        let (dir, lock, issued) = (
            keys.store_dir(domain),
            keys.lock(domain),
            keys.issued(domain),
        );
        self.forget(domain);
        let mut kv = self.etcd().client().kv_client();
        let read = Txn::new().and_then([
            TxnOp::get(dir.as_bytes(), Some(GetOptions::new().with_prefix())),
            TxnOp::get(lock.as_bytes(), None),
            TxnOp::get(issued.as_bytes(), None),
        ]);
        let response = kv
            .txn(read)
            .await
            .map_err(|e| map_error(e, domain, operation, false))?;
        let mut gets = response.op_responses().into_iter().filter_map(|r| match r {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        });
        let (Some(folder), Some(lock_kvs), Some(issued_kvs)) =
            (gets.next(), gets.next(), gets.next())
        else {
            return Err(corrupt(domain, "a read answer without the domain's keys"));
        };
        let stored = Stored::decode(domain, &dir, folder)?;
        let live = live_lease(domain, &lock_kvs)?;
        let issued_revision = issued_kvs.first().map_or(0, |kv| kv.mod_revision());
        let last_issued = u64::try_from(issued_revision)
            .ok()
            .and_then(|r| FencingToken::new(r).ok())
            .max(live);
        rebase.check(domain, stored.mark, IssuerView::IssuedUpTo(last_issued))?;

        let to = rebase.to();
        let record = RebaseRecord::new(rebase, SystemTime::now());
        let mut changes = vec![
            TxnOp::put(keys.store(domain, StoreKey::Mark), to.to_string(), None),
            TxnOp::put(keys.rebase(domain, stored.version), record.to_line(), None),
        ];
        let lowered = match stored.head {
            Some(EntryHead::Value { token, revision }) if token > to => Some(EntryHead::Value {
                token: to,
                revision,
            }),
            Some(EntryHead::Tombstone { token, revision }) if token > to => {
                Some(EntryHead::Tombstone {
                    token: to,
                    revision,
                })
            }
            _ => None,
        };
        if let Some(head) = lowered {
            changes.push(TxnOp::put(
                keys.store(domain, StoreKey::Entry),
                head.to_string(),
                None,
            ));
        }
        let live_revision = live.map_or(0, |t| i64::try_from(t.get()).unwrap_or(i64::MAX));
        let write = Txn::new()
            .when([
                Compare::mod_revision(
                    keys.store(domain, StoreKey::Mark),
                    CompareOp::Equal,
                    stored.version,
                ),
                Compare::mod_revision(dir.as_bytes(), CompareOp::Less, stored.version + 1)
                    .with_prefix(),
                Compare::create_revision(lock, CompareOp::Equal, live_revision),
                Compare::mod_revision(issued, CompareOp::Equal, issued_revision),
            ])
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
            .client()
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
