//! `MemoryFence`: the in-memory reference resource, the executable specification.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

use async_trait::async_trait;

use crate::capabilities::OpIdRetention;
use crate::op_memory::{OpMemory, OpRecord};
use crate::raw::pipeline::{self, Current, Decision};
use crate::shards::Shards;
use crate::token_bounds::TokenBounds;
use crate::{
    AppendOutcome, AppendRequest, Capabilities, Claimed, Domain, Entry, Fence, FenceError,
    FencedLog, FencedStore, FencingToken, IssuerView, LogEntry, MemoryIssuer, Mutation, Rebase,
    RebaseRecord, Rebaser, Revision, Snapshot, WriteOutcome, WriteRequest,
};

const BACKEND: &str = "memory";

/// The in-memory fenced resource: a store and a log, the embedded default.
///
/// It implements the contract literally and is the reference the conformance suite is checked
/// against. Domains are spread over independently locked shards, so threads working on
/// different domains rarely meet; each operation holds one shard lock for its whole check and
/// mutation, which is what makes it atomic. State lives in the process: it does not survive a
/// restart ([`Capabilities::survives_restart`] is false).
///
/// ```
/// use fence_core::{Domain, Fence, FencedStore, FencingToken, MemoryFence, WriteRequest};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fence_core::FenceError> {
/// let store = MemoryFence::new().with_max_value_bytes(1024);
/// let d = Domain::new("invoice-7")?;
/// store.claim(&d, FencingToken::new(5)?).await?;
/// let stale = store.write(&WriteRequest::put(d.clone(), FencingToken::new(4)?, "x")).await;
/// assert!(stale.is_err_and(|e| e.is_fenced()));
/// # Ok(()) }
/// ```
pub struct MemoryFence {
    domains: Shards<HashMap<Domain, DomainState>>,
    max_value_bytes: Option<usize>,
    op_id_retention: usize,
    max_token_step: Option<NonZeroU64>,
    issuer: Option<Arc<MemoryIssuer>>,
}

/// Shards used by [`MemoryFence::new`].
pub const DEFAULT_SHARDS: usize = 64;
/// Operation ids remembered per domain by [`MemoryFence::new`].
pub const DEFAULT_OP_ID_RETENTION: usize = 1024;

impl MemoryFence {
    /// A resource with [`DEFAULT_SHARDS`] shards, [`DEFAULT_OP_ID_RETENTION`] remembered
    /// operation ids per domain and no value size limit.
    pub fn new() -> Self {
        Self::with_shards(DEFAULT_SHARDS)
    }

    /// A resource with `count` lock shards (at least one).
    pub fn with_shards(count: usize) -> Self {
        MemoryFence {
            domains: Shards::new(count),
            max_value_bytes: None,
            op_id_retention: DEFAULT_OP_ID_RETENTION,
            max_token_step: None,
            issuer: None,
        }
    }

    /// Rejects values (and append batches) larger than `max` bytes.
    pub fn with_max_value_bytes(mut self, max: usize) -> Self {
        self.max_value_bytes = Some(max);
        self
    }

    /// Remembers the last `count` operation ids per domain (0 turns replay detection off).
    pub fn with_op_id_retention(mut self, count: usize) -> Self {
        self.op_id_retention = count;
        self
    }

    /// Refuses tokens more than `max_step` above a domain's mark (above zero for a domain
    /// without one) with [`FenceError::TokenTooFar`]: see [`TokenBounds`].
    pub fn with_max_token_step(mut self, max_step: NonZeroU64) -> Self {
        self.max_token_step = Some(max_step);
        self
    }

    /// Accepts only tokens `issuer` issued for the domain (up to its last one), refusing others
    /// with [`FenceError::Unissued`]: see [`TokenBounds`]. The issuer's counters only grow, so
    /// reading them under the domain's lock is as good as one atomic step.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use fence_core::{Domain, FenceError, FencedStore, FencingToken, MemoryFence};
    /// use fence_core::{MemoryIssuer, TokenIssuer, WriteRequest};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), FenceError> {
    /// let issuer = Arc::new(MemoryIssuer::new());
    /// let store = MemoryFence::new().issued_by(issuer.clone());
    /// let d = Domain::new("invoice-7")?;
    /// let token = issuer.issue(&d).await?;
    /// store.write(&WriteRequest::put(d.clone(), token, "ok")).await?;
    /// let forged = store.write(&WriteRequest::put(d, FencingToken::MAX, "x")).await;
    /// assert!(matches!(forged, Err(FenceError::Unissued { .. })));
    /// # Ok(()) }
    /// ```
    pub fn issued_by(mut self, issuer: Arc<MemoryIssuer>) -> Self {
        self.issuer = Some(issuer);
        self
    }

    fn bounds(&self, domain: &Domain) -> TokenBounds {
        let issuer = match &self.issuer {
            Some(issuer) => IssuerView::IssuedUpTo(issuer.last_issued(domain)),
            None => IssuerView::Unchecked,
        };
        TokenBounds::new(self.max_token_step, issuer)
    }

    /// How many domains hold state.
    pub fn tracked_domains(&self) -> usize {
        let mut total = 0;
        self.domains.each(|shard| total += shard.len());
        total
    }

    fn with_state<R>(&self, domain: &Domain, f: impl FnOnce(&mut DomainState) -> R) -> R {
        self.domains.with(domain, |map| {
            // A known domain is found without cloning its name (an atomic reference count,
            // shared by every thread writing the domain).
            if let Some(state) = map.get_mut(domain) {
                return f(state);
            }
            let state = map.entry(domain.clone()).or_default();
            let result = f(state);
            // A refusal on a domain never seen leaves nothing behind.
            if state.hwm.is_none() && matches!(state.entry, Entry::Absent) && state.extras.is_none()
            {
                map.remove(domain);
            }
            result
        })
    }

    fn peek_state<R>(&self, domain: &Domain, f: impl FnOnce(Option<&DomainState>) -> R) -> R {
        self.domains.with(domain, |map| f(map.get(domain)))
    }

    fn write_now(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        pipeline::validate_write(request, self.max_value_bytes)?;
        self.with_state(request.domain(), |state| {
            let current = Current::new(
                state.hwm,
                matches!(state.entry, Entry::Value { .. }),
                state.revision(),
            );
            let bounds = self.bounds(request.domain());
            let (accepted, remember) =
                match pipeline::decide_write(request, current, state.ops(), bounds)? {
                    Decision::Replay(first) => return Ok(WriteOutcome::Duplicate(first)),
                    Decision::Apply { outcome, remember } => (outcome, remember),
                };
            let (token, revision) = (accepted.token, accepted.revision);
            state.entry = match request.mutation() {
                Mutation::Put(value) => Entry::Value {
                    value: value.clone(),
                    token,
                    revision,
                },
                Mutation::Delete => Entry::Tombstone { token, revision },
            };
            state.hwm = Some(token);
            self.remember(state, remember);
            Ok(WriteOutcome::Accepted(accepted))
        })
    }

    fn append_now(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        pipeline::validate_append(request, self.max_value_bytes)?;
        self.with_state(request.domain(), |state| {
            let bounds = self.bounds(request.domain());
            let (appended, remember) =
                match pipeline::decide_append(request, state.hwm, state.ops(), bounds)? {
                    Decision::Replay(first) => return Ok(AppendOutcome::Duplicate(first)),
                    Decision::Apply { outcome, remember } => (outcome, remember),
                };
            let token = appended.token;
            state.extras().log.extend(
                request
                    .records()
                    .iter()
                    .map(|record| LogEntry::new(token, request.op_id().cloned(), record.clone())),
            );
            state.hwm = Some(token);
            self.remember(state, remember);
            Ok(AppendOutcome::Appended(appended))
        })
    }

    fn remember(&self, state: &mut DomainState, record: Option<OpRecord>) {
        if let Some(record) = record {
            state.extras().ops.remember(record, self.op_id_retention);
        }
    }
}

impl Default for MemoryFence {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryFence")
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_retention", &self.op_id_retention)
            .field("max_token_step", &self.max_token_step)
            .field("issued_only", &self.issuer.is_some())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Rebaser for MemoryFence {
    /// Re-bases a domain whose mark was pushed to a token no one issued (see [`Rebase`]),
    /// checked against the issuer of [`MemoryFence::issued_by`] when there is one, and records
    /// it (see [`Rebaser::rebases`]).
    ///
    /// ```
    /// use fence_core::{Domain, Fence, FencedStoreExt, FencingToken, MemoryFence, OwnerId};
    /// use fence_core::{Rebase, Rebaser};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryFence::new();
    /// let d = Domain::new("invoice-7")?;
    /// store.put(&d, FencingToken::MAX, "forged").await?;
    /// let rebase = Rebase::new(FencingToken::new(3)?, FencingToken::MAX, OwnerId::new("ops")?, "INC-7")?;
    /// store.rebase(&d, &rebase).await?;
    /// assert_eq!(store.high_water_mark(&d).await?, Some(FencingToken::new(3)?));
    /// assert!(store.put(&d, FencingToken::new(2)?, "stale").await.is_err());
    /// assert_eq!(store.rebases(&d).await?[0].operator.as_str(), "ops");
    /// # Ok(()) }
    /// ```
    async fn rebase(&self, domain: &Domain, rebase: &Rebase) -> Result<RebaseRecord, FenceError> {
        let issuer = self.bounds(domain).issuer;
        self.with_state(domain, |state| {
            let to = rebase.decide(domain, state.hwm, issuer)?;
            state.hwm = Some(to);
            state.entry = std::mem::replace(&mut state.entry, Entry::Absent).capped_at(to);
            let record = RebaseRecord::new(rebase, to, std::time::SystemTime::now());
            state.extras().rebases.push(record.clone());
            Ok(record)
        })
    }

    async fn rebases(&self, domain: &Domain) -> Result<Vec<RebaseRecord>, FenceError> {
        Ok(self.peek_state(domain, |state| {
            state
                .and_then(|s| s.extras.as_ref())
                .map(|extras| extras.rebases.clone())
                .unwrap_or_default()
        }))
    }
}

#[async_trait]
impl Fence for MemoryFence {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        let retention = OpIdRetention::per_domain(self.op_id_retention);
        Capabilities::store()
            .with_append(true)
            .with_op_id_retention(retention)
            .with_max_value_bytes(self.max_value_bytes)
            .with_max_token_step(self.max_token_step)
            .with_issued_only(self.issuer.is_some())
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.with_state(domain, |state| {
            let bounds = self.bounds(domain);
            let claimed = pipeline::decide_claim(domain, state.hwm, token, bounds)?.claimed();
            state.hwm = Some(token);
            Ok(claimed)
        })
    }

    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        Ok(self.peek_state(domain, |state| state.and_then(|s| s.hwm)))
    }
}

#[async_trait]
impl FencedStore for MemoryFence {
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        self.write_now(request)
    }

    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        Ok(self.peek_state(domain, |state| match state {
            Some(state) => Snapshot::new(state.hwm, state.entry.clone()),
            None => Snapshot::new(None, Entry::Absent),
        }))
    }
}

#[async_trait]
impl crate::Retirer for MemoryFence {
    /// Forgets the domain (its leases live in a [`crate::MemoryLeases`], which ends them on
    /// its own).
    async fn retire(&self, domain: &Domain) -> Result<crate::Retired, FenceError> {
        let removed = self
            .domains
            .with(domain, |map| map.remove(domain).is_some());
        Ok(crate::Retired::new(usize::from(removed)))
    }
}

#[async_trait]
impl FencedLog for MemoryFence {
    async fn append(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        self.append_now(request)
    }

    async fn read_log(&self, domain: &Domain) -> Result<Vec<LogEntry>, FenceError> {
        Ok(self.peek_state(domain, |state| {
            state
                .and_then(|s| s.extras.as_ref())
                .map(|e| e.log.clone())
                .unwrap_or_default()
        }))
    }
}

/// One domain's state. The log and the operation-id memories are rarely used, so they live
/// behind one optional box: a plain fenced store costs a small fixed size per domain.
struct DomainState {
    hwm: Option<FencingToken>,
    entry: Entry,
    extras: Option<Box<Extras>>,
}

#[derive(Default)]
struct Extras {
    log: Vec<LogEntry>,
    ops: OpMemory,
    rebases: Vec<RebaseRecord>,
}

impl Default for DomainState {
    fn default() -> Self {
        DomainState {
            hwm: None,
            entry: Entry::Absent,
            extras: None,
        }
    }
}

impl DomainState {
    fn revision(&self) -> Option<Revision> {
        match self.entry {
            Entry::Value { revision, .. } | Entry::Tombstone { revision, .. } => Some(revision),
            Entry::Absent => None,
        }
    }

    fn extras(&mut self) -> &mut Extras {
        self.extras.get_or_insert_with(Box::default)
    }

    fn ops(&self) -> &OpMemory {
        static NONE: std::sync::LazyLock<OpMemory> = std::sync::LazyLock::new(OpMemory::new);
        self.extras.as_ref().map_or(&NONE, |extras| &extras.ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FencedStoreExt, OperationId};

    fn t(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap_or(FencingToken::MAX)
    }

    #[tokio::test]
    async fn op_id_retention_is_bounded() -> Result<(), FenceError> {
        let store = MemoryFence::new().with_op_id_retention(2);
        let d = Domain::new("retention")?;
        let ops: Vec<OperationId> = ["a", "b", "c"]
            .iter()
            .map(OperationId::new)
            .collect::<Result<_, _>>()?;
        for op in &ops {
            store
                .write(&WriteRequest::put(d.clone(), t(1), "v").with_op_id(op.clone()))
                .await?;
        }
        // "a" was evicted: its retry applies again; "c" is still remembered.
        let retry_a = store
            .write(&WriteRequest::put(d.clone(), t(1), "v").with_op_id(ops[0].clone()))
            .await?;
        assert!(!retry_a.is_duplicate());
        let retry_c = store
            .write(&WriteRequest::put(d.clone(), t(1), "v").with_op_id(ops[2].clone()))
            .await?;
        assert!(retry_c.is_duplicate());
        Ok(())
    }

    #[tokio::test]
    async fn tracked_domains_counts_every_shard() -> Result<(), FenceError> {
        let store = MemoryFence::with_shards(4);
        for i in 0..100 {
            store.put(&Domain::new(format!("d{i}"))?, t(1), "v").await?;
        }
        assert_eq!(store.tracked_domains(), 100);
        Ok(())
    }
}
