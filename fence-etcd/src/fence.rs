//! `EtcdFence`: etcd's KV as a fenced store. A domain's state (mark, entry and value in one
//! key) is read in one range request, decided by fence-core's pipeline, and written in one
//! txn that compares the state key's `mod_revision` with what was read: a stale holder, or a
//! writer that lost a race, changes nothing.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use fence_core::raw::cas::{self, CasPolicy, CasResource, Committed, Step};
use fence_core::raw::pipeline::{self, ClaimDecision, Decision};
use fence_core::raw::{BoundedCache, EntryHead, TokenBounds};
use fence_core::{
    BackendErrorKind, Backoff, BoundsConfig, Capabilities, Claimed, Domain, Fence, FenceError,
    FencedStore, FencingToken, IssuerView, Mutation, OpIdRetention, Operation, RememberedOp,
    Snapshot, WriteOutcome, WriteRequest,
};

use crate::error::{corrupt, map_error, EtcdFenceError, BACKEND};
use crate::keys::StoreKey;
use crate::settings::Settings;
use crate::state::{encode_ops, live_lease, Stored};
use crate::Etcd;

/// Values larger than this are refused by default: etcd refuses requests over 1.5 MiB unless
/// started with a larger `--max-request-bytes`, and a write carries the value and its keys.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 1024 * 1024;
/// Operation ids remembered per domain by default (each write with an op id rewrites them).
pub const DEFAULT_OP_ID_RETENTION: usize = 128;
/// Domains whose last seen state is remembered by default.
pub const DEFAULT_CACHE_CAPACITY: usize = 1024;
/// Compare-and-write attempts per operation by default before
/// [`BackendErrorKind::Contention`].
pub const DEFAULT_MAX_ATTEMPTS: u32 = 64;

/// etcd's KV as a fenced store: one folder of keys per domain (see the crate docs), changed
/// only by txns that compare the domain's state key with what the decision read. Durable and
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
    pub(crate) etcd: Etcd,
    pub(crate) max_value_bytes: usize,
    pub(crate) op_id_retention: usize,
    pub(crate) max_attempts: u32,
    /// This fence's own admission settings (the prefix's settings key adds to them).
    pub(crate) bounds: BoundsConfig,
    /// Whether the prefix's settings asked for issued-only at the last read (shared by
    /// clones): a hint that saves a second read, never a decision.
    prefix_issued_only: Arc<AtomicBool>,
    /// The last state seen per domain (shared by clones).
    pub(crate) cache: Arc<BoundedCache<Domain, Stored>>,
}

impl EtcdFence {
    /// A fence made by [`crate::EtcdFenceBuilder::build`].
    pub(crate) fn from_parts(
        etcd: Etcd,
        max_value_bytes: usize,
        op_id_retention: usize,
        max_attempts: u32,
        bounds: BoundsConfig,
        cache_capacity: usize,
    ) -> Self {
        EtcdFence {
            etcd,
            max_value_bytes,
            op_id_retention,
            max_attempts,
            bounds,
            prefix_issued_only: Arc::default(),
            cache: Arc::new(BoundedCache::new(cache_capacity)),
        }
    }

    pub(crate) fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    /// Drops the domain's cached state (its next operation reads etcd first).
    pub(crate) fn forget(&self, domain: &Domain) {
        self.cache.remove(domain);
    }

    /// The settings in force on `stored`: this fence's and the prefix's, the tighter of each.
    fn in_force(&self, stored: &Stored) -> BoundsConfig {
        self.bounds.tighter(stored.settings.bounds)
    }

    fn bounds(&self, stored: &Stored) -> TokenBounds {
        self.in_force(stored)
            .with_issuer(IssuerView::LiveLease(stored.live_lease))
    }

    /// The reads of a domain's state: its folder, the prefix's settings and, with `lock`, the
    /// domain's lock key (a worker without issued-only may lack access to the lease range).
    fn reads(&self, domain: &Domain, lock: bool) -> Vec<TxnOp> {
        let dir = self.etcd.keys().store_dir(domain);
        let mut reads = vec![
            TxnOp::get(dir.as_bytes(), Some(GetOptions::new().with_prefix())),
            TxnOp::get(self.etcd.keys().settings(), None),
        ];
        if lock {
            reads.push(TxnOp::get(self.etcd.keys().lock(domain), None));
        }
        reads
    }

    /// Decodes what [`EtcdFence::reads`] returned, in its order; `None` when the settings put
    /// issued-only in force and the lock key was not read.
    fn decode_reads(
        &self,
        domain: &Domain,
        responses: Vec<TxnOpResponse>,
        lock: bool,
    ) -> Result<Option<Stored>, FenceError> {
        let mut gets = responses.into_iter().filter_map(|r| match r {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        });
        let unexpected = || unexpected(domain, "an answer without the domain's keys");
        let folder = gets.next().ok_or_else(unexpected)?;
        let dir = self.etcd.keys().store_dir(domain);
        let mut stored = Stored::decode(domain, &dir, folder)?;
        stored.settings = Settings::decode(&gets.next().ok_or_else(unexpected)?)
            .map_err(|why| corrupt(domain, why))?;
        self.prefix_issued_only
            .store(stored.settings.bounds.issued_only, Ordering::Relaxed);
        if self.in_force(&stored).issued_only {
            if !lock {
                return Ok(None);
            }
            stored.live_lease = live_lease(domain, &gets.next().ok_or_else(unexpected)?)?;
        }
        Ok(Some(stored))
    }

    /// The operation ids `domain` remembers (its `ops` key), oldest first: for operators.
    pub async fn remembered_ops(&self, domain: &Domain) -> Result<Vec<RememberedOp>, FenceError> {
        let stored = self.load(domain, Operation::Read).await?;
        Ok(stored.ops.iter().map(RememberedOp::from).collect())
    }

    /// Reads the domain's keys at one revision, and remembers what it read.
    async fn load(&self, domain: &Domain, operation: Operation) -> Result<Stored, FenceError> {
        self.cache.remove(domain);
        // The lock key is read up front when issued-only was in force at the last read.
        let mut lock = self.bounds.issued_only || self.prefix_issued_only.load(Ordering::Relaxed);
        loop {
            let response = self
                .etcd
                .etcd_client()
                .kv_client()
                .txn(Txn::new().and_then(self.reads(domain, lock)))
                .await
                .map_err(|e| map_error(e, domain, operation, false))?;
            if let Some(stored) = self.decode_reads(domain, response.op_responses(), lock)? {
                self.cache.insert(domain.clone(), stored.without_value());
                return Ok(stored);
            }
            // The prefix's settings ask for the live lease: read it too.
            lock = true;
        }
    }

    /// Runs `changes` if the domain's state key is still at the version `known` was read at
    /// (and its `ops` key no newer), the prefix's settings are still the ones read and, when
    /// issued-only is in force, `token` is still the live lease's; else returns the domain's
    /// state as it is now, in the same request.
    async fn compare_and_write(
        &self,
        domain: &Domain,
        operation: Operation,
        (known, token): (&Stored, FencingToken),
        changes: Vec<TxnOp>,
    ) -> Result<Written, FenceError> {
        let keys = self.etcd.keys();
        let lock = self.in_force(known).issued_only;
        // The state is as it was read, nor did the settings change: else etcd's state is read
        // again. (Another tool's key in the folder is found by the next read of the folder.)
        let mut compares = known.unchanged(keys, domain);
        compares.push(Compare::mod_revision(
            keys.settings(),
            CompareOp::Equal,
            known.settings.version,
        ));
        if lock {
            // Admitted only as the live lease's token, which is an etcd revision (an i64).
            let revision = i64::try_from(token.get()).map_err(|_| FenceError::Unissued {
                domain: domain.clone(),
                presented: token,
                issuer: IssuerView::LiveLease(None),
            })?;
            compares.push(Compare::create_revision(
                self.etcd.keys().lock(domain),
                CompareOp::Equal,
                revision,
            ));
        }
        let txn = Txn::new()
            .when(compares)
            .and_then(changes)
            .or_else(self.reads(domain, lock));
        let response = self
            .etcd
            .etcd_client()
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| map_error(e, domain, operation, true))?;
        if response.succeeded() {
            let revision = response
                .header()
                .map(|h| h.revision())
                .ok_or_else(|| unexpected(domain, "a txn answer without a header"))?;
            return Ok(Written::Applied(revision));
        }
        let current = match self.decode_reads(domain, response.op_responses(), lock)? {
            Some(current) => {
                self.cache.insert(domain.clone(), current.without_value());
                current
            }
            // Issued-only came into force since: read again, with the lock key.
            None => self.load(domain, operation).await?,
        };
        Ok(Written::Changed(current))
    }

    /// Decides and writes under the version it decided on, in one txn, through core's
    /// compare-and-set loop: on the cached state when there is one (a steady-state write is one
    /// request), else on a fresh read. A cached state can only be older than etcd's, so any
    /// answer decided on it without a write (even `Fenced`, whose `current` must be etcd's
    /// mark) is decided again on etcd's state. A txn that finds the domain changed returns its
    /// keys, and the operation is decided again on them, up to the attempt limit.
    async fn decided<T: Send>(
        &self,
        domain: &Domain,
        (operation, token): (Operation, FencingToken),
        attempt: impl FnMut(&Stored) -> Result<Step<T, TxnChange>, FenceError> + Send,
    ) -> Result<T, FenceError> {
        let resource = DomainTxn {
            fence: self,
            domain,
            operation,
            token,
        };
        let policy = CasPolicy {
            max_attempts: self.max_attempts,
            backoff: Backoff::new(Duration::from_millis(2), Duration::from_millis(50)),
            free_losses: 2,
        };
        cas::drive_fresh_answers(&resource, policy, attempt).await
    }

    async fn write_now(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        pipeline::validate_write(request, Some(self.max_value_bytes))?;
        let value = match request.mutation() {
            Mutation::Put(value) => Some(value),
            Mutation::Delete => None,
            _ => return Err(FenceError::unsupported(BACKEND, "this mutation")),
        };
        let domain = request.domain();
        let what = (request.operation(), request.token());
        self.decided(domain, what, |stored| {
            let bounds = self.bounds(stored);
            let (outcome, remember) =
                match pipeline::decide_write(request, stored.current(), &stored.ops, bounds)? {
                    Decision::Replay(first) => {
                        return Ok(Step::Done(WriteOutcome::Duplicate(first)))
                    }
                    Decision::Apply { outcome, remember } => (outcome, remember),
                };
            let (token, revision) = (outcome.token, outcome.revision);
            let head = match value {
                Some(_) => EntryHead::Value { token, revision },
                None => EntryHead::Tombstone { token, revision },
            };
            let keys = self.etcd.keys();
            let mut changes =
                stored.replace(keys, domain, (token, Some(head), value.map(|v| &v[..])))?;
            let mut ops = stored.ops.clone();
            if let (Some(record), true) = (remember, self.op_id_retention > 0) {
                ops.remember(record, self.op_id_retention);
                changes.push(TxnOp::put(
                    keys.store(domain, StoreKey::Ops),
                    encode_ops(&ops),
                    None,
                ));
            }
            let next = Stored {
                mark: Some(token),
                version: 0,
                layout_1: false,
                head: Some(head),
                value: None,
                ops,
                live_lease: stored.live_lease,
                settings: stored.settings,
            };
            Ok(Step::Commit {
                change: TxnChange {
                    changes,
                    next: Box::new(next),
                },
                outcome: WriteOutcome::Accepted(outcome),
            })
        })
        .await
    }

    async fn claim_now(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.decided(domain, (Operation::Claim, token), |stored| {
            let bounds = self.bounds(stored);
            Ok(
                match pipeline::decide_claim(domain, stored.mark, token, bounds)? {
                    ClaimDecision::Held(claimed) => Step::Done(claimed),
                    // The state key is rewritten whole, value included, and a cache keeps no
                    // value: read it.
                    ClaimDecision::Raise(_)
                        if matches!(stored.head, Some(EntryHead::Value { .. }))
                            && stored.value.is_none() =>
                    {
                        Step::Reload
                    }
                    ClaimDecision::Raise(claimed) => Step::Commit {
                        change: TxnChange {
                            changes: stored.replace(
                                self.etcd.keys(),
                                domain,
                                (token, stored.head, stored.value.as_deref()),
                            )?,
                            next: Box::new(Stored {
                                mark: Some(token),
                                layout_1: false,
                                ..stored.without_value()
                            }),
                        },
                        outcome: claimed,
                    },
                },
            )
        })
        .await
    }
}

fn unexpected(domain: &Domain, what: &str) -> FenceError {
    FenceError::backend(
        BACKEND,
        BackendErrorKind::Rejected,
        Some(domain),
        EtcdFenceError::Unexpected(what.to_owned()),
    )
}

/// A decided txn: its changes, and the domain's state once they apply.
struct TxnChange {
    changes: Vec<TxnOp>,
    next: Box<Stored>,
}

/// One domain's keys, for one operation under one token.
struct DomainTxn<'a> {
    fence: &'a EtcdFence,
    domain: &'a Domain,
    operation: Operation,
    token: FencingToken,
}

impl CasResource for DomainTxn<'_> {
    type State = Stored;
    type Change = TxnChange;
    /// A lost txn carries etcd's state; nothing else to tell.
    type Loss = ();

    fn remembered(&self) -> Option<Stored> {
        self.fence.cache.get(self.domain)
    }

    async fn load(&self) -> Result<Stored, FenceError> {
        self.fence.load(self.domain, self.operation).await
    }

    async fn commit(
        &self,
        known: &Stored,
        change: TxnChange,
    ) -> Result<Committed<Stored, ()>, FenceError> {
        let (domain, fence) = (self.domain, self.fence);
        let TxnChange { changes, next } = change;
        let written = fence
            .compare_and_write(domain, self.operation, (known, self.token), changes)
            .await;
        match written {
            Ok(Written::Applied(revision)) => {
                let next = Stored {
                    version: revision,
                    ..*next
                };
                fence.cache.insert(domain.clone(), next);
                Ok(Committed::Applied)
            }
            Ok(Written::Changed(current)) => Ok(Committed::Lost {
                loss: (),
                now: Some(current),
            }),
            Err(error) => {
                // The outcome, or etcd's state, is unknown now.
                fence.cache.remove(domain);
                Err(error)
            }
        }
    }

    fn pauses_after(&self, _: &()) -> bool {
        true
    }

    fn exhausted(&self, attempts: u32, _: Option<()>) -> FenceError {
        FenceError::backend(
            BACKEND,
            BackendErrorKind::Contention,
            Some(self.domain),
            EtcdFenceError::Contention { attempts },
        )
    }
}

/// What a compare-and-write found.
enum Written {
    /// Applied at this revision.
    Applied(i64),
    /// The domain had changed: its state now.
    Changed(Stored),
}

impl fmt::Debug for EtcdFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdFence")
            .field("prefix", &self.etcd.prefix())
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_retention", &self.op_id_retention)
            .field("max_attempts", &self.max_attempts)
            .field("bounds", &self.bounds)
            .field("cache_capacity", &self.cache.capacity())
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
            .with_bounds(self.bounds)
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.claim_now(domain, token).await
    }

    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        Ok(self.load(domain, Operation::HighWaterMark).await?.mark)
    }
}

#[async_trait]
impl FencedStore for EtcdFence {
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        self.write_now(request).await
    }

    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        Ok(self.load(domain, Operation::Read).await?.snapshot())
    }
}
