//! An operation id a domain remembers, as an operator lists it: one shape for every adapter
//! (`fence inspect`), whatever the adapter stores.

use crate::op_memory::OpRecord;
use crate::{FencingToken, OpKind, OpOutcome, OperationId};

/// An operation id a domain remembers, with what its first attempt did.
///
/// ```
/// use fence_core::raw::OpRecord;
/// use fence_core::{FencingToken, OpKind, OpOutcome, OperationId, RememberedOp, Revision};
/// let record = OpRecord::new(
///     FencingToken::new(7)?,
///     OperationId::new("order-1")?,
///     Some(FencingToken::new(6)?),
///     OpOutcome::Write { revision: Revision::new(3) },
/// );
/// let listed = RememberedOp::from(&record);
/// assert_eq!((listed.kind, listed.outcome.as_str()), (OpKind::Write, "3"));
/// # Ok::<(), fence_core::FenceError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RememberedOp {
    /// The token the operation carried.
    pub token: FencingToken,
    /// The operation id.
    pub op_id: OperationId,
    /// What kind of operation it was.
    pub kind: OpKind,
    /// The domain's mark before it (`None`: the domain had none).
    pub previous: Option<FencingToken>,
    /// Its first outcome as the resource keeps it: a write's revision, an append's record
    /// count, an extension body's own text; empty when nothing is kept (a Redis fenced script,
    /// a PostgreSQL transaction).
    pub outcome: String,
}

impl RememberedOp {
    /// A listed operation.
    pub fn new(
        token: FencingToken,
        op_id: OperationId,
        kind: OpKind,
        previous: Option<FencingToken>,
        outcome: impl Into<String>,
    ) -> Self {
        RememberedOp {
            token,
            op_id,
            kind,
            previous,
            outcome: outcome.into(),
        }
    }
}

impl From<&OpRecord> for RememberedOp {
    fn from(record: &OpRecord) -> Self {
        let outcome = match record.outcome {
            OpOutcome::Write { revision } => revision.to_string(),
            OpOutcome::Append { records } => records.to_string(),
        };
        RememberedOp::new(
            record.token,
            record.op_id.clone(),
            record.outcome.kind(),
            record.previous,
            outcome,
        )
    }
}
