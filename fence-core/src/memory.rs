//! `MemoryFence`: the in-memory reference resource, the executable specification.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use async_trait::async_trait;

use crate::capabilities::OpIdRetention;
use crate::shards::Shards;
use crate::telemetry::observe_sync;
use crate::{
    rule, Accepted, AppendOutcome, AppendRequest, Appended, Capabilities, Claimed, Domain, Entry,
    Fence, FenceError, FencedLog, FencedStore, FencingToken, InvalidInput, LogEntry, Mutation,
    Operation, OperationId, Revision, Snapshot, WriteOutcome, WriteRequest,
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

    /// How many domains hold state.
    pub fn tracked_domains(&self) -> usize {
        let mut total = 0;
        self.domains.each(|shard| total += shard.len());
        total
    }

    fn check_size(&self, domain: &Domain, size: usize) -> Result<(), FenceError> {
        match self.max_value_bytes {
            Some(max) if size > max => Err(InvalidInput::ValueTooLarge {
                domain: domain.clone(),
                size,
                max,
            }
            .into()),
            _ => Ok(()),
        }
    }

    fn with_state<R>(&self, domain: &Domain, f: impl FnOnce(&mut DomainState) -> R) -> R {
        self.domains.with(domain, |map| {
            f(map
                .entry(domain.clone())
                .or_insert_with(DomainState::default))
        })
    }

    fn peek_state<R>(&self, domain: &Domain, f: impl FnOnce(Option<&DomainState>) -> R) -> R {
        self.domains.with(domain, |map| f(map.get(domain)))
    }

    fn write_now(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        let domain = request.domain();
        if let Some(value) = request.value() {
            self.check_size(domain, value.len())?;
        }
        let retention = self.op_id_retention;
        self.with_state(domain, |state| {
            let op_key = request.op_id().map(|op| (request.token(), op.clone()));
            let remembered = op_key
                .as_ref()
                .and_then(|key| state.extras.as_ref()?.write_ops.get(key));
            if let Some(first) = remembered {
                return Ok(WriteOutcome::Duplicate(first.clone()));
            }
            rule::check_token(domain, state.hwm, request.token(), request.policy())?;
            let live = matches!(state.entry, Entry::Value { .. });
            rule::check_condition(domain, request.condition(), live, state.revision())?;

            let revision = state.revision().map_or(Revision::new(1), Revision::next);
            let token = request.token();
            state.entry = match request.mutation() {
                Mutation::Put(value) => Entry::Value {
                    value: value.clone(),
                    token,
                    revision,
                },
                Mutation::Delete => Entry::Tombstone { token, revision },
            };
            let accepted = Accepted::new(token, revision, state.hwm);
            state.hwm = Some(token);
            if let Some(key) = op_key {
                state
                    .extras()
                    .write_ops
                    .remember(key, accepted.clone(), retention);
            }
            Ok(WriteOutcome::Accepted(accepted))
        })
    }

    fn append_now(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        let domain = request.domain();
        if request.records().is_empty() {
            return Err(InvalidInput::EmptyBatch {
                domain: domain.clone(),
            }
            .into());
        }
        let size = request.records().iter().map(|r| r.value.len()).sum();
        self.check_size(domain, size)?;
        let retention = self.op_id_retention;
        self.with_state(domain, |state| {
            let op_key = request.op_id().map(|op| (request.token(), op.clone()));
            let remembered = op_key
                .as_ref()
                .and_then(|key| state.extras.as_ref()?.append_ops.get(key));
            if let Some(first) = remembered {
                return Ok(AppendOutcome::Duplicate(first.clone()));
            }
            rule::check_token(domain, state.hwm, request.token(), request.policy())?;
            let token = request.token();
            state.extras().log.extend(
                request
                    .records()
                    .iter()
                    .map(|record| LogEntry::new(token, request.op_id().cloned(), record.clone())),
            );
            let appended = Appended::new(token, request.records().len(), state.hwm);
            state.hwm = Some(token);
            if let Some(key) = op_key {
                state
                    .extras()
                    .append_ops
                    .remember(key, appended.clone(), retention);
            }
            Ok(AppendOutcome::Appended(appended))
        })
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
            .finish_non_exhaustive()
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
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        observe_sync(BACKEND, Operation::Claim, domain, Some(token), || {
            self.with_state(domain, |state| {
                rule::check_claim(domain, state.hwm, token)?;
                let previous = state.hwm;
                state.hwm = Some(token);
                Ok(Claimed::new(token, previous))
            })
        })
    }

    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        observe_sync(BACKEND, Operation::HighWaterMark, domain, None, || {
            Ok(self.peek_state(domain, |state| state.and_then(|s| s.hwm)))
        })
    }
}

#[async_trait]
impl FencedStore for MemoryFence {
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        observe_sync(
            BACKEND,
            request.operation(),
            request.domain(),
            Some(request.token()),
            || self.write_now(request),
        )
    }

    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        observe_sync(BACKEND, Operation::Read, domain, None, || {
            Ok(self.peek_state(domain, |state| match state {
                Some(state) => Snapshot::new(state.hwm, state.entry.clone()),
                None => Snapshot::new(None, Entry::Absent),
            }))
        })
    }
}

#[async_trait]
impl FencedLog for MemoryFence {
    async fn append(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        observe_sync(
            BACKEND,
            Operation::Append,
            request.domain(),
            Some(request.token()),
            || self.append_now(request),
        )
    }

    async fn read_log(&self, domain: &Domain) -> Result<Vec<LogEntry>, FenceError> {
        observe_sync(BACKEND, Operation::ReadLog, domain, None, || {
            Ok(self.peek_state(domain, |state| {
                state
                    .and_then(|s| s.extras.as_ref())
                    .map(|e| e.log.clone())
                    .unwrap_or_default()
            }))
        })
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
    write_ops: OpMemory<Accepted>,
    append_ops: OpMemory<Appended>,
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
}

type OpKey = (FencingToken, OperationId);

/// The first outcomes of the most recent operation ids of one domain, oldest evicted first.
struct OpMemory<T> {
    outcomes: HashMap<OpKey, T>,
    order: VecDeque<OpKey>,
}

impl<T> Default for OpMemory<T> {
    fn default() -> Self {
        OpMemory {
            outcomes: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<T> OpMemory<T> {
    fn get(&self, key: &OpKey) -> Option<&T> {
        self.outcomes.get(key)
    }

    fn remember(&mut self, key: OpKey, outcome: T, capacity: usize) {
        if capacity == 0 {
            return;
        }
        while self.order.len() >= capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.outcomes.remove(&oldest);
            }
        }
        self.order.push_back(key.clone());
        self.outcomes.insert(key, outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FencedStoreExt;

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
