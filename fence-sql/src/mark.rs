//! A domain's mark row as an adapter's lock read it, fence-core's decision on a fenced
//! transaction over it, and the snapshot a committed row shows.

use std::future::Future;

use async_trait::async_trait;

use fence_core::raw::pipeline::{self, ClaimDecision, TransactionDecision};
use fence_core::raw::{EntryHead, StoredOp, TokenBounds};
use fence_core::{
    Begun, BoundsConfig, Claimed, Domain, FenceError, FencingToken, IssuerView, Operation,
    OperationId, Revision, Snapshot, TransactionRequest,
};
use sqlx::{ColumnIndex, Database, Decode, Row, Transaction, Type};

use crate::{commit, corrupt, release, Dialect};

/// What a locked mark row holds, as the adapter's lock read it in the transaction that holds
/// the row.
#[derive(Debug)]
#[non_exhaustive]
pub struct Locked {
    /// The mark.
    pub hwm: Option<FencingToken>,
    /// The entry's head, where the lock read it (the fenced store's writes need it).
    pub entry: Option<EntryHead>,
    /// The record of the request's (token, op id), if one was asked for and is remembered.
    pub op: Option<StoredOp>,
    /// The admission settings in force: the client's and the tables', the tighter of each.
    pub settings: BoundsConfig,
    /// The domain's counter's last token, read after the lock (`None`: nothing issued).
    pub issued: Option<FencingToken>,
}

impl Locked {
    /// A locked row: its mark, entry head, op record, the settings in force and the
    /// domain's last issued token.
    pub fn new(
        hwm: Option<FencingToken>,
        entry: Option<EntryHead>,
        op: Option<StoredOp>,
        settings: BoundsConfig,
        issued: Option<FencingToken>,
    ) -> Self {
        Locked {
            hwm,
            entry,
            op,
            settings,
            issued,
        }
    }

    /// The checks beyond the rule, as the settings in force ask for them.
    pub fn bounds(&self) -> TokenBounds {
        self.settings
            .with_issuer(IssuerView::IssuedUpTo(self.issued))
    }
}

/// An operation to remember with a change of the mark row (same transaction): its token, op
/// id, the mark before it and, for a store write, the revision it produced.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Remember {
    /// The operation's token.
    pub token: FencingToken,
    /// Its op id.
    pub op_id: OperationId,
    /// The mark before it.
    pub previous: Option<FencingToken>,
    /// The revision a store write produced (`None`: a fenced transaction).
    pub revision: Option<Revision>,
}

impl Remember {
    /// A store write's (`revision`) or a fenced transaction's (`None`) record.
    pub fn new(
        token: FencingToken,
        op_id: OperationId,
        previous: Option<FencingToken>,
        revision: Option<Revision>,
    ) -> Self {
        Remember {
            token,
            op_id,
            previous,
            revision,
        }
    }
}

/// How a fenced transaction or a claim changes the locked mark row.
// Closed: a claim or a transaction keeps the mark or raises it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkChange {
    /// Leave it as it is (the token is the mark already).
    Keep,
    /// Raise the mark from `from` (what the lock read) to `to`; the entry stays. The adapter's
    /// statement names `from`, so a row that moved under the lock is never changed.
    Raise {
        /// The mark the lock read.
        from: Option<FencingToken>,
        /// The admitted token.
        to: FencingToken,
    },
}

/// What a fenced transaction admitted over a locked mark row writes there.
#[derive(Debug)]
#[non_exhaustive]
pub struct Admitted {
    /// The mark before the transaction.
    pub previous: Option<FencingToken>,
    /// How the mark row changes.
    pub change: MarkChange,
    /// The request's op id to remember, if it has one.
    pub remember: Option<Remember>,
}

/// fence-core's decision on a fenced transaction `request` over the mark row `tx` locked as
/// `locked`: a refusal or a replay releases the row's lock before it returns (a dropped
/// transaction would hold it until the pool takes the connection back); an admission hands
/// the transaction and what it writes to `admit`, the adapter's way of setting it up.
pub async fn admit_transaction<D, T, F, Fut>(
    request: &TransactionRequest,
    tx: Transaction<'static, D::Db>,
    locked: &Locked,
    admit: F,
) -> Result<Begun<T>, FenceError>
where
    D: Dialect,
    F: FnOnce(Transaction<'static, D::Db>, Admitted) -> Fut,
    Fut: Future<Output = Result<T, FenceError>>,
{
    let decided =
        pipeline::decide_transaction(request, locked.hwm, locked.op.as_ref(), locked.bounds());
    let raise = match decided {
        Ok(TransactionDecision::Admit { raise }) => raise,
        Ok(TransactionDecision::Replay {
            previous_high_water_mark,
        }) => {
            release(tx).await;
            return Ok(Begun::Duplicate {
                previous_high_water_mark,
            });
        }
        Err(refused) => {
            release(tx).await;
            return Err(refused);
        }
    };
    let token = request.token();
    let change = if raise {
        MarkChange::Raise {
            from: locked.hwm,
            to: token,
        }
    } else {
        MarkChange::Keep
    };
    let admitted = Admitted {
        previous: locked.hwm,
        change,
        remember: request
            .op_id()
            .map(|op_id| Remember::new(token, op_id.clone(), locked.hwm, None)),
    };
    admit(tx, admitted).await.map(Begun::Admitted)
}

/// The snapshot of a committed mark row `row` whose head decoded to `hwm` and `head`: the value
/// (column `value_column`) is read only for a live entry, so a tombstone's stale bytes are never
/// shown; a value column that does not decode, or a head that disagrees with it, fails closed.
pub fn snapshot<D: Dialect>(
    domain: &Domain,
    row: &<D::Db as Database>::Row,
    hwm: Option<FencingToken>,
    head: Option<EntryHead>,
    value_column: usize,
) -> Result<Snapshot, FenceError>
where
    Vec<u8>: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    let value: Option<Vec<u8>> = match head {
        Some(EntryHead::Value { .. }) => row
            .try_get(value_column)
            .map_err(|e| corrupt::<D>(domain, format!("value: {e}")))?,
        _ => None,
    };
    let entry = EntryHead::entry(head, value).map_err(|why| corrupt::<D>(domain, why))?;
    Ok(Snapshot::new(hwm, entry))
}

/// The adapter's statements on a domain's mark row, which the shared decisions run in order:
/// lock it (reading what fence-core's decisions need), then change it in the same transaction.
#[async_trait]
pub trait MarkRows: Send + Sync {
    /// The fence's dialect.
    type Dialect: Dialect;

    /// Begins a transaction and locks `domain`'s mark row in it (creating it if missing),
    /// reading the mark, the settings in force, the domain's counter and the record of `op`.
    async fn lock(
        &self,
        domain: &Domain,
        operation: Operation,
        op: Option<(FencingToken, &OperationId)>,
    ) -> Result<(Transaction<'static, <Self::Dialect as Dialect>::Db>, Locked), FenceError>;

    /// Applies `change` to the row `tx` locked and remembers `remember` with it.
    async fn change(
        &self,
        tx: &mut Transaction<'static, <Self::Dialect as Dialect>::Db>,
        domain: &Domain,
        operation: Operation,
        change: MarkChange,
        remember: Option<Remember>,
    ) -> Result<(), FenceError>;
}

/// A claim of `token` on `domain`: the row locked, fence-core's decision on it; a refusal, or a
/// claim at or below the mark, rolls the transaction back before returning (nothing changes);
/// a raise is written and committed (`Ambiguous` when the answer to `COMMIT` was lost).
pub async fn claim<F: MarkRows>(
    fence: &F,
    domain: &Domain,
    token: FencingToken,
) -> Result<Claimed, FenceError> {
    let (mut tx, locked) = fence.lock(domain, Operation::Claim, None).await?;
    let decision = match pipeline::decide_claim(domain, locked.hwm, token, locked.bounds()) {
        Ok(decision) => decision,
        Err(refused) => {
            release(tx).await;
            return Err(refused);
        }
    };
    if let ClaimDecision::Raise(_) = decision {
        let raise = MarkChange::Raise {
            from: locked.hwm,
            to: token,
        };
        fence
            .change(&mut tx, domain, Operation::Claim, raise, None)
            .await?;
        commit::<F::Dialect>(tx, domain, Operation::Claim).await?;
    } else {
        release(tx).await;
    }
    Ok(decision.claimed())
}
