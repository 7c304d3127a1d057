//! `DynamoDbFence`: a domain's item as a fenced store. The state is read (or remembered),
//! decided by fence-core's pipeline, and written by one conditional `UpdateItem` whose condition
//! holds the acceptance rule and the store version that was read: a stale holder, or a writer
//! that lost a race, changes nothing, and DynamoDB answers with the item as it is now.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use fence_core::raw::cas::{self, CasPolicy, CasResource, Committed, Step};
use fence_core::raw::pipeline::{self, ClaimDecision, Decision};
use fence_core::raw::{BoundedCache, EntryHead, StoredOp, TokenBounds};
use fence_core::{
    Backoff, BoundsConfig, Capabilities, Claimed, Domain, EqualTokenPolicy, Fence, FenceError,
    FencedStore, FencingToken, IssuerView, Mutation, OpIdRetention, Operation, RememberedOp,
    Snapshot, WriteOutcome, WriteRequest,
};
use std::sync::Arc;

use crate::error::{backend_error, DynamoDbFenceError, Failure, BACKEND};
use crate::expr::Expr;
use crate::item::{attr, number, op_lines, text, Stored};
use crate::table::without_key;
use crate::DynamoDb;

/// Values larger than this are refused by default: the most a builder accepts
/// ([`MAX_VALUE_BYTES`]).
pub const DEFAULT_MAX_VALUE_BYTES: usize = MAX_VALUE_BYTES;
/// The largest value limit a builder accepts: a DynamoDB item holds at most 400 KB, and the
/// domain's item also holds up to [`MAX_OP_ID_RETENTION`] write and as many transaction op
/// records (each up to ~450 bytes: a 128-byte op id escapes to 384) and its lease.
pub const MAX_VALUE_BYTES: usize = 256 * 1024;
/// Operation ids remembered per domain by default (each write with an op id rewrites them),
/// for writes and for fenced transactions each.
pub const DEFAULT_OP_ID_RETENTION: usize = MAX_OP_ID_RETENTION;
/// The most operation ids a builder accepts per domain, for writes and for transactions each
/// (they share the item's 400 KB with the value).
pub const MAX_OP_ID_RETENTION: usize = 64;
/// Domains whose last seen state is remembered by default.
pub const DEFAULT_CACHE_CAPACITY: usize = 1024;
/// Conditional-write attempts per operation by default before
/// [`fence_core::BackendErrorKind::Contention`].
pub const DEFAULT_MAX_ATTEMPTS: u32 = 64;

/// DynamoDB as a fenced store: one item per domain holding its mark, entry and remembered op
/// ids, changed only by conditional writes that evaluate the acceptance rule (see the crate
/// docs). Durable and strongly consistent as DynamoDB's single-item writes are.
///
/// ```no_run
/// # async fn run(dynamodb: fence_dynamodb::DynamoDb) -> Result<(), fence_core::FenceError> {
/// use fence_core::{Domain, FencedStoreExt, FencingToken};
/// let fence = dynamodb.fence();
/// fence.put(&Domain::new("config/leader")?, FencingToken::new(7)?, "node-2").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DynamoDbFence {
    pub(crate) dynamodb: DynamoDb,
    pub(crate) max_value_bytes: usize,
    pub(crate) op_id_retention: usize,
    pub(crate) max_attempts: u32,
    pub(crate) bounds: BoundsConfig,
    /// The last state seen per domain (shared by clones).
    pub(crate) cache: Arc<BoundedCache<Domain, Stored>>,
}

/// A decided conditional write: the attributes it sets and removes, and the state once it
/// applies.
pub(crate) struct ItemChange {
    pub(crate) set: Vec<(&'static str, AttributeValue)>,
    pub(crate) remove: Vec<&'static str>,
    pub(crate) next: Box<Stored>,
    /// A fenced transaction's own actions, written with the change in one
    /// `TransactWriteItems` (`None`: the change is one `UpdateItem`).
    pub(crate) with: Option<crate::transaction::Actions>,
}

impl ItemChange {
    /// The update expression, its names and values registered in `expr`.
    pub(crate) fn expression(&self, expr: &mut Expr) -> String {
        let set: Vec<String> = self
            .set
            .iter()
            .map(|(name, value)| {
                let placeholder = expr.value(&format!("set_{name}"), value.clone());
                format!("{} = {placeholder}", expr.name(name))
            })
            .collect();
        let remove: Vec<String> = self.remove.iter().map(|name| expr.name(name)).collect();
        let mut expression = format!("SET {}", set.join(", "));
        if !remove.is_empty() {
            expression.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }
        expression
    }
}

impl DynamoDbFence {
    /// The handle this fence works through.
    pub fn dynamodb(&self) -> &DynamoDb {
        &self.dynamodb
    }

    /// The bounds a decision applies on `stored`.
    pub(crate) fn bounds(&self, stored: &Stored) -> TokenBounds {
        let issuer = if self.bounds.issued_only {
            IssuerView::IssuedUpTo(stored.counter)
        } else {
            IssuerView::Unchecked
        };
        TokenBounds::new(self.bounds.max_step, issuer)
    }

    /// The condition every change of the store carries: the version that was read, the
    /// acceptance rule, and (issued-only) the token among those issued.
    pub(crate) fn condition(
        &self,
        expr: &mut Expr,
        known: &Stored,
        token: FencingToken,
        policy: EqualTokenPolicy,
    ) -> String {
        let mut condition = format!(
            "{} AND {}",
            expr.at_version(known.version),
            expr.admits(token, policy)
        );
        if self.bounds.issued_only {
            let ctr = expr.name(attr::COUNTER);
            condition.push_str(&format!(" AND {ctr} >= :token"));
        }
        condition
    }

    /// The operation ids `domain` remembers, oldest first: for operators.
    pub async fn remembered_ops(&self, domain: &Domain) -> Result<Vec<RememberedOp>, FenceError> {
        let stored = self.load(domain, Operation::Read).await?;
        let writes = stored.ops.iter().map(RememberedOp::from);
        let transactions = stored.tx_ops.iter().map(|tx| {
            StoredOp::Transaction {
                previous: tx.previous,
            }
            .remembered(tx.token, tx.op_id.clone())
        });
        Ok(writes.chain(transactions).collect())
    }

    /// Reads the domain's item, and remembers what it read.
    pub(crate) async fn load(
        &self,
        domain: &Domain,
        operation: Operation,
    ) -> Result<Stored, FenceError> {
        self.cache.remove(domain);
        let stored = self.dynamodb.read(domain, operation).await?;
        self.cache.insert(domain.clone(), stored.without_value());
        Ok(stored)
    }

    /// Writes `change` if the item is still as `known` says, for `token` under `policy`.
    async fn compare_and_write(
        &self,
        domain: &Domain,
        operation: Operation,
        (known, token, policy): (&Stored, FencingToken, EqualTokenPolicy),
        change: &ItemChange,
    ) -> Result<Written, FenceError> {
        let mut expr = Expr::default();
        let condition = self.condition(&mut expr, known, token, policy);
        let update = change.expression(&mut expr);
        if let Some(actions) = &change.with {
            return self
                .transact_write(domain, known, (condition, update, expr), actions)
                .await;
        }
        match self
            .dynamodb
            .update(domain, &expr, (condition, update))
            .await
        {
            Ok(()) => Ok(Written::Applied),
            Err(Failure::Condition(item)) => Ok(Written::Changed(
                item.map(|item| Stored::decode(domain, Some(&without_key(item))))
                    .transpose()?,
            )),
            // Nothing was applied: another attempt may win.
            Err(Failure::NotApplied(source)) => Ok(Written::NotApplied(source)),
            Err(other) => Err(other.into_fence_error(domain, operation, true)),
        }
    }

    /// Decides and writes through core's compare-and-set loop: on the remembered state when
    /// there is one (a steady-state write is one request), else on a fresh read. A remembered
    /// state can only be older than the table's, so an answer decided on it without a write
    /// is decided again on the table's state. A write whose condition fails returns the item,
    /// and the operation is decided again on it, up to the attempt limit.
    pub(crate) async fn decided<T: Send>(
        &self,
        domain: &Domain,
        (operation, token, policy): (Operation, FencingToken, EqualTokenPolicy),
        attempt: impl FnMut(&Stored) -> Result<Step<T, ItemChange>, FenceError> + Send,
    ) -> Result<T, FenceError> {
        let resource = DomainItem {
            fence: self,
            domain,
            operation,
            token,
            policy,
        };
        let policy = CasPolicy {
            max_attempts: self.max_attempts,
            backoff: Backoff::new(Duration::from_millis(2), Duration::from_millis(100)),
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
        let what = (request.operation(), request.token(), request.policy());
        self.decided(domain, what, |stored| {
            if let Some(op_id) = request.op_id() {
                if let Some(first @ StoredOp::Transaction { .. }) = stored.stored_op(op_id) {
                    // An op id first used for a fenced transaction: `OpIdReused`.
                    first.as_write(domain, request.token(), op_id)?;
                }
            }
            let (outcome, remember) = match pipeline::decide_write(
                request,
                stored.current(),
                &stored.ops,
                self.bounds(stored),
            )? {
                Decision::Replay(first) => return Ok(Step::Done(WriteOutcome::Duplicate(first))),
                Decision::Apply { outcome, remember } => (outcome, remember),
            };
            let version = stored.version + 1;
            let mut set = vec![
                (attr::MARK, number(outcome.token.get())),
                (attr::VER, number(version)),
            ];
            let mut remove = Vec::new();
            let head = match value {
                Some(value) => {
                    set.push((attr::VALUE, AttributeValue::B(value.to_vec().into())));
                    EntryHead::Value {
                        token: outcome.token,
                        revision: outcome.revision,
                    }
                }
                None => {
                    remove.push(attr::VALUE);
                    EntryHead::Tombstone {
                        token: outcome.token,
                        revision: outcome.revision,
                    }
                }
            };
            set.push((attr::ENTRY, text(head.to_string())));
            let mut ops = stored.ops.clone();
            if let (Some(record), true) = (remember, self.op_id_retention > 0) {
                ops.remember(record, self.op_id_retention);
                set.push((attr::OPS, op_lines(&ops)));
            }
            let next = Stored {
                mark: Some(outcome.token),
                version,
                head: Some(head),
                value: None,
                ops,
                ..stored.without_value()
            };
            Ok(Step::Commit {
                change: ItemChange {
                    set,
                    remove,
                    next: Box::new(next),
                    with: None,
                },
                outcome: WriteOutcome::Accepted(outcome),
            })
        })
        .await
    }

    async fn claim_now(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        let what = (Operation::Claim, token, EqualTokenPolicy::SameOwner);
        self.decided(domain, what, |stored| {
            Ok(
                match pipeline::decide_claim(domain, stored.mark, token, self.bounds(stored))? {
                    ClaimDecision::Held(claimed) => Step::Done(claimed),
                    ClaimDecision::Raise(claimed) => {
                        let version = stored.version + 1;
                        Step::Commit {
                            change: ItemChange {
                                set: vec![
                                    (attr::MARK, number(token.get())),
                                    (attr::VER, number(version)),
                                ],
                                remove: Vec::new(),
                                next: Box::new(Stored {
                                    mark: Some(token),
                                    version,
                                    ..stored.without_value()
                                }),
                                with: None,
                            },
                            outcome: claimed,
                        }
                    }
                },
            )
        })
        .await
    }
}

/// One domain's item, for one operation under one token.
struct DomainItem<'a> {
    fence: &'a DynamoDbFence,
    domain: &'a Domain,
    operation: Operation,
    token: FencingToken,
    policy: EqualTokenPolicy,
}

/// Why an attempt was lost.
enum Loss {
    /// The item had changed.
    Changed,
    /// DynamoDB did nothing (throttled, or another transaction held the item).
    NotApplied(DynamoDbFenceError),
}

impl CasResource for DomainItem<'_> {
    type State = Stored;
    type Change = ItemChange;
    type Loss = Loss;

    fn remembered(&self) -> Option<Stored> {
        self.fence.cache.get(self.domain)
    }

    async fn load(&self) -> Result<Stored, FenceError> {
        self.fence.load(self.domain, self.operation).await
    }

    async fn commit(
        &self,
        known: &Stored,
        change: ItemChange,
    ) -> Result<Committed<Stored, Loss>, FenceError> {
        let (domain, fence) = (self.domain, self.fence);
        let written = fence
            .compare_and_write(
                domain,
                self.operation,
                (known, self.token, self.policy),
                &change,
            )
            .await;
        match written {
            Ok(Written::Applied) => {
                fence.cache.insert(domain.clone(), *change.next);
                Ok(Committed::Applied)
            }
            Ok(Written::Changed(now)) => {
                if let Some(now) = &now {
                    fence.cache.insert(domain.clone(), now.without_value());
                }
                Ok(Committed::Lost {
                    loss: Loss::Changed,
                    now,
                })
            }
            Ok(Written::NotApplied(source)) => Ok(Committed::Lost {
                loss: Loss::NotApplied(source),
                now: Some(known.clone()),
            }),
            Err(error) => {
                // The outcome, or the item, is unknown now.
                fence.cache.remove(domain);
                Err(error)
            }
        }
    }

    fn pauses_after(&self, _: &Loss) -> bool {
        true
    }

    fn exhausted(&self, attempts: u32, last: Option<Loss>) -> FenceError {
        let source = match last {
            Some(Loss::NotApplied(source)) => source,
            _ => DynamoDbFenceError::Contention { attempts },
        };
        backend_error(Some(self.domain), source)
    }
}

/// What a conditional write found.
pub(crate) enum Written {
    Applied,
    /// The condition was false: the item now, when DynamoDB returned it.
    Changed(Option<Stored>),
    /// Nothing was done, for a reason worth another attempt.
    NotApplied(DynamoDbFenceError),
}

impl fmt::Debug for DynamoDbFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbFence")
            .field("dynamodb", &self.dynamodb)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_retention", &self.op_id_retention)
            .field("max_attempts", &self.max_attempts)
            .field("bounds", &self.bounds)
            .field("cache_capacity", &self.cache.capacity())
            .finish()
    }
}

#[async_trait]
impl Fence for DynamoDbFence {
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
impl FencedStore for DynamoDbFence {
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        self.write_now(request).await
    }

    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.load(domain, Operation::Read).await?.snapshot(domain)
    }
}
