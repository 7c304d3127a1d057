//! `EtcdFence`: etcd's KV as a fenced store. A domain's mark and entry are read in one range
//! request, decided by fence-core's pipeline, and written in one txn that compares the mark
//! key's `mod_revision` with what was read: a stale holder, or a writer that lost a race,
//! changes nothing.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use fence_core::pipeline::{self, ClaimDecision, Decision};
use fence_core::{
    BackendErrorKind, Backoff, Capabilities, Claimed, Domain, EntryHead, Fence, FenceError,
    FencedStore, FencingToken, Mutation, OpIdRetention, Operation, Snapshot, WriteOutcome,
    WriteRequest,
};

use crate::error::{map_error, EtcdFenceError, BACKEND};
use crate::keys::StoreKey;
use crate::state::{encode_ops, Stored};
use crate::Etcd;

/// Values larger than this are refused by default: etcd refuses requests over 1.5 MiB unless
/// started with a larger `--max-request-bytes`, and a write carries the value and its keys.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 1024 * 1024;
/// Operation ids remembered per domain by default (each write with an op id rewrites them).
pub const DEFAULT_OP_ID_RETENTION: usize = 128;
/// Compare-and-write attempts per operation by default before
/// [`BackendErrorKind::Contention`].
pub const DEFAULT_MAX_ATTEMPTS: u32 = 64;

/// etcd's KV as a fenced store: one folder of keys per domain (see the crate docs), changed
/// only by txns that compare the domain's mark key with what the decision read. Durable and
/// linearizable as etcd is.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use fence_core::{Domain, FencedStoreExt, FencingToken};
/// let etcd = fence_etcd::Etcd::connect(&["http://127.0.0.1:2379"], None, "/fence").await?;
/// let fence = etcd.fence();
/// fence.put(&Domain::new("config/leader")?, FencingToken::new(7)?, "node-2").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdFence {
    etcd: Etcd,
    max_value_bytes: usize,
    op_id_retention: usize,
    max_attempts: u32,
}

impl EtcdFence {
    pub(crate) fn new(etcd: Etcd) -> Self {
        EtcdFence {
            etcd,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            op_id_retention: DEFAULT_OP_ID_RETENTION,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// Refuses values larger than `max` bytes, before any I/O.
    pub fn with_max_value_bytes(mut self, max: usize) -> Self {
        self.max_value_bytes = max;
        self
    }

    /// Remembers the newest `count` operation ids per domain (0 turns replay detection off).
    pub fn with_op_id_retention(mut self, count: usize) -> Self {
        self.op_id_retention = count;
        self
    }

    /// Gives up after `attempts` compare-and-write rounds lost to concurrent writers (at
    /// least 1).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Reads the domain's keys at one revision.
    async fn load(&self, domain: &Domain, operation: Operation) -> Result<Stored, FenceError> {
        let dir = self.etcd.keys().store_dir(domain);
        let response = self
            .etcd
            .client()
            .kv_client()
            .get(dir.as_bytes(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| map_error(e, domain, operation, false))?;
        let mut stored = Stored::decode(domain, &dir, response.kvs().to_vec())?;
        stored.version = response
            .kvs()
            .iter()
            .find(|kv| kv.key() == self.etcd.keys().store(domain, StoreKey::Mark).as_bytes())
            .map_or(0, |kv| kv.mod_revision());
        Ok(stored)
    }

    /// Runs `changes` if the domain's mark key is still at `version`: true when applied.
    async fn compare_and_write(
        &self,
        domain: &Domain,
        operation: Operation,
        version: i64,
        changes: Vec<TxnOp>,
    ) -> Result<bool, FenceError> {
        let mark = self.etcd.keys().store(domain, StoreKey::Mark);
        let txn = Txn::new()
            .when([Compare::mod_revision(mark, CompareOp::Equal, version)])
            .and_then(changes);
        let response = self
            .etcd
            .client()
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| map_error(e, domain, operation, true))?;
        Ok(response.succeeded())
    }

    /// Decides on a fresh read and writes under the read's version, again when a concurrent
    /// writer changed the domain in between, up to the attempt limit.
    async fn decided<T>(
        &self,
        domain: &Domain,
        operation: Operation,
        mut attempt: impl FnMut(&Stored) -> Result<Step<T>, FenceError>,
    ) -> Result<T, FenceError> {
        let backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(50));
        for round in 0..self.max_attempts {
            if round > 2 {
                tokio::time::sleep(backoff.delay(round - 2)).await;
            }
            let stored = self.load(domain, operation).await?;
            match attempt(&stored)? {
                Step::Done(outcome) => return Ok(outcome),
                Step::Write(changes, outcome) => {
                    if self
                        .compare_and_write(domain, operation, stored.version, changes)
                        .await?
                    {
                        return Ok(outcome);
                    }
                }
            }
        }
        Err(FenceError::backend(
            BACKEND,
            BackendErrorKind::Contention,
            Some(domain),
            EtcdFenceError::Contention {
                attempts: self.max_attempts,
            },
        ))
    }

    fn key(&self, domain: &Domain, key: StoreKey) -> String {
        self.etcd.keys().store(domain, key)
    }

    async fn write_now(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        pipeline::validate_write(request, Some(self.max_value_bytes))?;
        let value = match request.mutation() {
            Mutation::Put(value) => Some(value),
            Mutation::Delete => None,
            _ => return Err(FenceError::unsupported(BACKEND, "this mutation")),
        };
        let domain = request.domain();
        self.decided(domain, request.operation(), |stored| {
            let (outcome, remember) =
                match pipeline::decide_write(request, stored.current(), &stored.ops)? {
                    Decision::Replay(first) => {
                        return Ok(Step::Done(WriteOutcome::Duplicate(first)))
                    }
                    Decision::Apply { outcome, remember } => (outcome, remember),
                };
            let mut changes = vec![TxnOp::put(
                self.key(domain, StoreKey::Mark),
                outcome.token.to_string(),
                None,
            )];
            let head = match value {
                Some(value) => {
                    changes.push(TxnOp::put(
                        self.key(domain, StoreKey::Value),
                        value.to_vec(),
                        None,
                    ));
                    EntryHead::Value {
                        token: outcome.token,
                        revision: outcome.revision,
                    }
                }
                None => {
                    changes.push(TxnOp::delete(self.key(domain, StoreKey::Value), None));
                    EntryHead::Tombstone {
                        token: outcome.token,
                        revision: outcome.revision,
                    }
                }
            };
            changes.push(TxnOp::put(
                self.key(domain, StoreKey::Entry),
                head.to_string(),
                None,
            ));
            if let (Some(record), true) = (remember, self.op_id_retention > 0) {
                let mut ops = stored.ops.clone();
                ops.remember(record, self.op_id_retention);
                changes.push(TxnOp::put(
                    self.key(domain, StoreKey::Ops),
                    encode_ops(&ops),
                    None,
                ));
            }
            Ok(Step::Write(changes, WriteOutcome::Accepted(outcome)))
        })
        .await
    }

    async fn claim_now(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.decided(domain, Operation::Claim, |stored| {
            Ok(match pipeline::decide_claim(domain, stored.mark, token)? {
                ClaimDecision::Held(claimed) => Step::Done(claimed),
                ClaimDecision::Raise(claimed) => Step::Write(
                    vec![TxnOp::put(
                        self.key(domain, StoreKey::Mark),
                        token.to_string(),
                        None,
                    )],
                    claimed,
                ),
            })
        })
        .await
    }
}

/// One round of [`EtcdFence::decided`].
enum Step<T> {
    /// Nothing to write: the outcome stands.
    Done(T),
    /// Write these changes; the outcome holds if they apply.
    Write(Vec<TxnOp>, T),
}

impl fmt::Debug for EtcdFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdFence")
            .field("prefix", &self.etcd.prefix())
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_retention", &self.op_id_retention)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

#[async_trait]
impl Fence for EtcdFence {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::per_domain(self.op_id_retention))
            .with_max_value_bytes(Some(self.max_value_bytes))
            .with_survives_restart(true)
    }

    async fn do_claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.claim_now(domain, token).await
    }

    async fn do_high_water_mark(
        &self,
        domain: &Domain,
    ) -> Result<Option<FencingToken>, FenceError> {
        Ok(self.load(domain, Operation::HighWaterMark).await?.mark)
    }
}

#[async_trait]
impl FencedStore for EtcdFence {
    async fn do_write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        self.write_now(request).await
    }

    async fn do_read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        Ok(self.load(domain, Operation::Read).await?.snapshot())
    }
}
