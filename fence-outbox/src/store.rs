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
    /// What the store listed it at, opaque to the relay: a store that drops drained domains
    /// from its candidates (see [`OutboxStore::purge`]) drops one only if it is unchanged since,
    /// so a transition that lands meanwhile is never dropped.
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

    /// The candidates of a store's listing of (domain name, version): a name that is not a
    /// valid domain (foreign or damaged state) is logged and skipped, never relayed.
    pub fn listed<N, V>(listing: impl IntoIterator<Item = (N, V)>) -> Vec<Self>
    where
        N: Into<String>,
        V: Into<String>,
    {
        listing
            .into_iter()
            .filter_map(|(name, version)| {
                let name = name.into();
                match Domain::new(name.clone()) {
                    Ok(domain) => Some(Candidate::new(domain, version)),
                    Err(error) => {
                        tracing::warn!(domain = name, %error, "outbox lists an invalid domain");
                        None
                    }
                }
            })
            .collect()
    }
}

/// The result of a purge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Purged {
    /// Delivered entries removed because their retention window passed.
    pub removed: usize,
}

impl Purged {
    /// A purge result.
    pub fn new(removed: usize) -> Self {
        Purged { removed }
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

    /// Ends the relay's visit of `candidate`: removes delivered entries settled more than
    /// `retention` ago (dead letters stay), under the relay's token. When `drained` (nothing was
    /// pending when the visit began), the store may stop listing the domain, unless it changed
    /// since `candidate` was listed (the version guards that step, not the token: a stale
    /// relay dropping a listing only delays the next visit until the sweep).
    async fn purge(
        &self,
        candidate: &Candidate,
        relay: FencingToken,
        retention: Duration,
        drained: bool,
    ) -> Result<Purged, OutboxError>;

    /// Waits, when a pass found nothing to do, until `partition` may have new work or `idle`
    /// has passed. `seen` is the calling relay's cursor (0 at first), for stores that count
    /// wake-ups so that none is lost between a pass and the wait. The default sleeps `idle`
    /// (polling); a store that can be notified of new entries (PostgreSQL's `LISTEN`) returns
    /// as soon as one is recorded.
    async fn wait_for_work(&self, partition: u16, idle: Duration, seen: &mut u64) {
        let _ = (partition, seen);
        tokio::time::sleep(idle).await;
    }
}
