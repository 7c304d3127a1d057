//! `OutboxStore`: what the relay needs from a backend.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use fence_core::{Domain, FencingToken};

use crate::entry::{OutboxEntry, Settlement};
use crate::error::OutboxError;

/// A domain that may have work for the relay, with the index version it was listed at.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// The domain.
    pub domain: Domain,
    /// The index entry's version; [`OutboxStore::forget`] removes the entry only if it is
    /// unchanged, so a transition that lands meanwhile is never dropped from the index.
    pub version: String,
}

impl Candidate {
    /// A candidate.
    pub fn new(domain: Domain, version: impl Into<String>) -> Self {
        Candidate {
            domain,
            version: version.into(),
        }
    }
}

/// The result of a purge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Purged {
    /// Delivered entries removed because their retention window passed.
    pub removed: usize,
    /// Nothing is pending and nothing delivered is retained: the domain can leave the index.
    pub idle: bool,
}

impl Purged {
    /// A purge result.
    pub fn new(removed: usize, idle: bool) -> Self {
        Purged { removed, idle }
    }
}

/// The relay's view of an outbox backend. Every mutating call carries the relay's fencing
/// token and is refused with a fenced error when a newer relay has touched the domain.
#[async_trait]
pub trait OutboxStore: Send + Sync + fmt::Debug {
    /// The backend's name, for metrics and logs.
    fn backend(&self) -> &'static str;

    /// Domains of `partition` that may have pending entries. With `sweep`, also walks the
    /// whole outbox state: recovers domains missing from the index, and lists domains that
    /// only retain delivered entries, so the relay purges them.
    async fn candidates(&self, partition: u16, sweep: bool) -> Result<Vec<Candidate>, OutboxError>;

    /// Up to `limit` pending entries of `domain`, in order.
    async fn pending(&self, domain: &Domain, limit: usize)
        -> Result<Vec<OutboxEntry>, OutboxError>;

    /// Starts an attempt on the head entry `seq`: counts it and records the relay. Returns the
    /// attempt number, or `None` when `seq` is no longer the pending head.
    async fn begin(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
    ) -> Result<Option<u32>, OutboxError>;

    /// Records the result of an attempt on the head entry `seq`. Returns false when `seq` is no
    /// longer the pending head (someone else settled it).
    async fn settle(
        &self,
        domain: &Domain,
        relay: FencingToken,
        seq: u64,
        settlement: &Settlement,
    ) -> Result<bool, OutboxError>;

    /// Removes delivered entries older than `retention` (dead letters stay).
    async fn purge(
        &self,
        domain: &Domain,
        relay: FencingToken,
        retention: Duration,
    ) -> Result<Purged, OutboxError>;

    /// Removes an idle domain from `partition`'s index if its entry is still at `candidate`'s
    /// version.
    async fn forget(&self, partition: u16, candidate: &Candidate) -> Result<(), OutboxError>;
}
