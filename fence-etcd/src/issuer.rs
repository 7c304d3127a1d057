//! `EtcdIssuer`: tokens from the cluster's revision.

use async_trait::async_trait;
use fence_core::{Domain, FenceError, FencingToken, Operation, TokenIssuer};

use crate::error::{corrupt, map_error, BACKEND};
use crate::Etcd;

/// Issues each token as the revision of a put to the domain's `issued` key: etcd's revision
/// is consensus-ordered and never reused (it carries on across restarts and compactions), so
/// tokens grow strictly per domain, with gaps (every write in the cluster takes a revision),
/// and share one sequence with [`crate::EtcdLeases`] of the same cluster.
///
/// A snapshot restore (`etcdutl snapshot restore`) can bring the revision back: restore with
/// `--bump-revision` above the greatest token ever issued (and `--mark-compacted`).
#[derive(Clone, Debug)]
pub struct EtcdIssuer {
    etcd: Etcd,
}

impl EtcdIssuer {
    pub(crate) fn new(etcd: Etcd) -> Self {
        EtcdIssuer { etcd }
    }
}

#[async_trait]
impl TokenIssuer for EtcdIssuer {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        let response = self
            .etcd
            .etcd_client()
            .kv_client()
            .put(self.etcd.keys().issued(domain), "", None)
            // A put whose answer was lost at most skips a revision: a retry can help.
            .await
            .map_err(|e| map_error(e, domain, Operation::Issue, false))?;
        let revision = response.header().map_or(0, |h| h.revision());
        revision_token(domain, revision)
    }
}

/// A token from an etcd revision (`CorruptState` when it is not above 0).
pub(crate) fn revision_token(domain: &Domain, revision: i64) -> Result<FencingToken, FenceError> {
    u64::try_from(revision)
        .ok()
        .and_then(|r| FencingToken::new(r).ok())
        .ok_or_else(|| corrupt(domain, format!("etcd answered with revision {revision}")))
}
