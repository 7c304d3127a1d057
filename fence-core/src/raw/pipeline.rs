//! The decision sequence of every fenced operation, written once.
//!
//! An adapter reads what its resource holds for a domain (the mark, the entry's head, the
//! remembered operations), asks one of these functions what to do, and then performs the
//! mutation in the same atomic step it read in (a lock, a conditional request, a transaction).
//! The order is the same for every adapter:
//!
//! 1. **op-id replay**: a request whose (token, op id) is remembered gets its first outcome back,
//!    even if a newer owner has written since (the retry learns what happened, nothing applies);
//! 2. **the token rule** ([`rule::check_token`]);
//! 3. **token bounds** ([`TokenBounds::check`]): a token the resource's issuer does not vouch for,
//!    or one too far above the mark, is refused (both checks off unless configured);
//! 4. **the revision condition** (writes only, [`rule::check_condition`]);
//! 5. **apply**: the new mark is the request's token; the record to remember comes with it.
//!
//! Adapters that decide inside the server (Redis Lua) run the same order there; the conformance
//! suite pins it for every adapter.
//!
//! ```
//! use fence_core::raw::pipeline::{decide_write, Current, Decision};
//! use fence_core::raw::{OpMemory, TokenBounds};
//! use fence_core::{Domain, FencingToken, OperationId, WriteRequest};
//! let d = Domain::new("orders")?;
//! let op = OperationId::new("pay-7")?;
//! let request = WriteRequest::put(d, FencingToken::new(3)?, "v").with_op_id(op);
//! let mut ops = OpMemory::new();
//! let decision = decide_write(&request, Current::EMPTY, &ops, TokenBounds::OPEN)?;
//! let Decision::Apply { outcome, remember } = decision else {
//!     unreachable!("nothing is remembered yet");
//! };
//! ops.remember(remember.expect("the request has an op id"), 16);
//! // The retry, after the mutation was applied, replays the first outcome.
//! let current = Current::new(Some(outcome.token), true, Some(outcome.revision));
//! let retry = decide_write(&request, current, &ops, TokenBounds::OPEN)?;
//! assert!(matches!(retry, Decision::Replay(_)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::op_memory::{OpMemory, OpOutcome, OpRecord};
use crate::raw::rule;
use crate::token_bounds::TokenBounds;
use crate::{
    Accepted, AppendRequest, Appended, Claimed, Domain, EqualTokenPolicy, FenceError, FencingToken,
    InvalidInput, Revision, WriteRequest,
};

/// What a resource holds for a domain, as far as a decision needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Current {
    /// The domain's high-water mark (`None`: no token accepted yet).
    pub high_water_mark: Option<FencingToken>,
    /// Whether a live value exists (not absent, not a tombstone).
    pub live: bool,
    /// The revision of the value or tombstone (`None`: nothing was ever written).
    pub revision: Option<Revision>,
}

impl Current {
    /// A domain the resource has never seen.
    pub const EMPTY: Current = Current {
        high_water_mark: None,
        live: false,
        revision: None,
    };

    /// A domain's state.
    pub const fn new(
        high_water_mark: Option<FencingToken>,
        live: bool,
        revision: Option<Revision>,
    ) -> Self {
        Current {
            high_water_mark,
            live,
            revision,
        }
    }

    /// A domain's state from its mark and the head of its entry (`None`: never written).
    pub fn with_head(
        high_water_mark: Option<FencingToken>,
        head: Option<crate::raw::EntryHead>,
    ) -> Self {
        match head {
            Some(head) => Current::new(high_water_mark, head.is_live(), Some(head.revision())),
            None => Current::mark(high_water_mark),
        }
    }

    /// A domain known only by its mark (logs, claims).
    pub const fn mark(high_water_mark: Option<FencingToken>) -> Self {
        Current {
            high_water_mark,
            live: false,
            revision: None,
        }
    }
}

/// What to do with a write or an append.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Decision<T> {
    /// The operation was applied before: answer with its first outcome, change nothing.
    Replay(T),
    /// Apply it: `outcome` is what to answer once the mutation is done (its token is the new
    /// mark); `remember` is the record to add to the domain's [`OpMemory`] in the same step.
    Apply {
        /// The outcome to report.
        outcome: T,
        /// The operation to remember, when the request carried an op id.
        remember: Option<OpRecord>,
    },
}

/// What to do with a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum ClaimDecision {
    /// The mark already is the claimed token: nothing to write.
    Held(Claimed),
    /// Raise the mark to the claimed token.
    Raise(Claimed),
}

impl ClaimDecision {
    /// The outcome to report.
    pub fn claimed(self) -> Claimed {
        match self {
            ClaimDecision::Held(claimed) | ClaimDecision::Raise(claimed) => claimed,
        }
    }
}

/// Refuses a value over `max` bytes. The one size check every adapter runs before I/O.
pub fn check_size(domain: &Domain, size: usize, max: Option<usize>) -> Result<(), FenceError> {
    match max {
        Some(max) if size > max => Err(InvalidInput::ValueTooLarge {
            domain: domain.clone(),
            size,
            max,
        }
        .into()),
        _ => Ok(()),
    }
}

/// Input checks of a write before any I/O: the value's size against `max`.
pub fn validate_write(request: &WriteRequest, max: Option<usize>) -> Result<(), FenceError> {
    match request.value() {
        Some(value) => check_size(request.domain(), value.len(), max),
        None => Ok(()),
    }
}

/// Input checks of an append before any I/O: a non-empty batch whose values fit `max` bytes.
pub fn validate_append(request: &AppendRequest, max: Option<usize>) -> Result<(), FenceError> {
    if request.records().is_empty() {
        return Err(InvalidInput::EmptyBatch {
            domain: request.domain().clone(),
        }
        .into());
    }
    let size = request.records().iter().map(|r| r.value.len()).sum();
    check_size(request.domain(), size, max)
}

/// Steps 2 and 3 for any operation that carries a token (writes, appends, claims, fenced
/// transactions): the token rule against the mark, then the resource's token bounds.
pub fn admit(
    domain: &Domain,
    high_water_mark: Option<FencingToken>,
    token: FencingToken,
    policy: EqualTokenPolicy,
    bounds: TokenBounds,
) -> Result<(), FenceError> {
    rule::check_token(domain, high_water_mark, token, policy)?;
    bounds.check(domain, high_water_mark, token)
}

/// Decides a fenced write or delete; `bounds` holds the resource's checks beyond the rule.
pub fn decide_write(
    request: &WriteRequest,
    current: Current,
    ops: &OpMemory,
    bounds: TokenBounds,
) -> Result<Decision<Accepted>, FenceError> {
    let (domain, token) = (request.domain(), request.token());
    if let Some(op_id) = request.op_id() {
        if let Some(first) = ops.find(domain, token, op_id, crate::OpKind::Write)? {
            if let OpOutcome::Write { revision } = first.outcome {
                return Ok(Decision::Replay(Accepted::new(
                    token,
                    revision,
                    first.previous,
                )));
            }
        }
    }
    admit(
        domain,
        current.high_water_mark,
        token,
        request.policy(),
        bounds,
    )?;
    rule::check_condition(domain, request.condition(), current.live, current.revision)?;
    let revision = current.revision.map_or(Revision::new(1), Revision::next);
    let previous = current.high_water_mark;
    let remember = request.op_id().map(|op_id| OpRecord {
        token,
        op_id: op_id.clone(),
        previous,
        outcome: OpOutcome::Write { revision },
    });
    Ok(Decision::Apply {
        outcome: Accepted::new(token, revision, previous),
        remember,
    })
}

/// Decides a fenced append; `bounds` holds the resource's checks beyond the rule.
pub fn decide_append(
    request: &AppendRequest,
    high_water_mark: Option<FencingToken>,
    ops: &OpMemory,
    bounds: TokenBounds,
) -> Result<Decision<Appended>, FenceError> {
    let (domain, token) = (request.domain(), request.token());
    if let Some(op_id) = request.op_id() {
        if let Some(first) = ops.find(domain, token, op_id, crate::OpKind::Append)? {
            if let OpOutcome::Append { records } = first.outcome {
                return Ok(Decision::Replay(Appended::new(
                    token,
                    records,
                    first.previous,
                )));
            }
        }
    }
    admit(domain, high_water_mark, token, request.policy(), bounds)?;
    let records = request.records().len();
    let remember = request.op_id().map(|op_id| OpRecord {
        token,
        op_id: op_id.clone(),
        previous: high_water_mark,
        outcome: OpOutcome::Append { records },
    });
    Ok(Decision::Apply {
        outcome: Appended::new(token, records, high_water_mark),
        remember,
    })
}

/// Decides a claim: refused when older than the mark (or not admitted), nothing to write when
/// equal.
pub fn decide_claim(
    domain: &Domain,
    high_water_mark: Option<FencingToken>,
    token: FencingToken,
    bounds: TokenBounds,
) -> Result<ClaimDecision, FenceError> {
    admit(
        domain,
        high_water_mark,
        token,
        EqualTokenPolicy::SameOwner,
        bounds,
    )?;
    let claimed = Claimed::new(token, high_water_mark);
    Ok(if high_water_mark == Some(token) {
        ClaimDecision::Held(claimed)
    } else {
        ClaimDecision::Raise(claimed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AppendRequest, OperationId, Record, WriteCondition};

    fn t(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap_or(FencingToken::MAX)
    }

    fn domain() -> Domain {
        Domain::new("d").unwrap_or_else(|_| unreachable!())
    }

    fn op(name: &str) -> OperationId {
        OperationId::new(name).unwrap_or_else(|_| unreachable!())
    }

    #[test]
    fn replay_comes_before_the_token_rule_and_the_condition() -> Result<(), FenceError> {
        let request = WriteRequest::put(domain(), t(3), "v")
            .with_op_id(op("a"))
            .with_condition(WriteCondition::Absent);
        let mut ops = OpMemory::new();
        let Decision::Apply { remember, .. } =
            decide_write(&request, Current::EMPTY, &ops, TokenBounds::OPEN)?
        else {
            unreachable!("first run applies");
        };
        ops.remember(
            remember.ok_or_else(|| FenceError::unsupported("t", "x"))?,
            4,
        );
        // A newer owner wrote since, and the value is live: still the first outcome.
        let later = Current::new(Some(t(9)), true, Some(Revision::new(5)));
        assert_eq!(
            decide_write(&request, later, &ops, TokenBounds::OPEN)?,
            Decision::Replay(Accepted::new(t(3), Revision::new(1), None))
        );
        let append = AppendRequest::new(domain(), t(3), vec![Record::new("r")]).with_op_id(op("b"));
        let Decision::Apply { remember, .. } =
            decide_append(&append, Some(t(2)), &ops, TokenBounds::OPEN)?
        else {
            unreachable!("first append applies");
        };
        ops.remember(
            remember.ok_or_else(|| FenceError::unsupported("t", "x"))?,
            4,
        );
        assert_eq!(
            decide_append(&append, Some(t(9)), &ops, TokenBounds::OPEN)?,
            Decision::Replay(Appended::new(t(3), 1, Some(t(2))))
        );
        Ok(())
    }

    #[test]
    fn an_op_id_reused_for_another_kind_is_a_typed_error() -> Result<(), FenceError> {
        let mut ops = OpMemory::new();
        let write = WriteRequest::put(domain(), t(3), "v").with_op_id(op("a"));
        if let Decision::Apply {
            remember: Some(record),
            ..
        } = decide_write(&write, Current::EMPTY, &ops, TokenBounds::OPEN)?
        {
            ops.remember(record, 4);
        }
        let append = AppendRequest::new(domain(), t(3), vec![Record::new("r")]).with_op_id(op("a"));
        let refused = decide_append(&append, Some(t(3)), &ops, TokenBounds::OPEN);
        assert!(matches!(
            refused,
            Err(FenceError::InvalidInput(InvalidInput::OpIdReused { .. }))
        ));
        Ok(())
    }

    #[test]
    fn stale_mismatched_and_fresh_requests() -> Result<(), FenceError> {
        let ops = OpMemory::new();
        let current = Current::new(Some(t(5)), true, Some(Revision::new(2)));
        let stale = WriteRequest::put(domain(), t(4), "v");
        assert!(
            decide_write(&stale, current, &ops, TokenBounds::OPEN).is_err_and(|e| e.is_fenced())
        );
        let mismatch =
            WriteRequest::put(domain(), t(5), "v").with_condition(WriteCondition::Absent);
        assert!(matches!(
            decide_write(&mismatch, current, &ops, TokenBounds::OPEN),
            Err(FenceError::RevisionMismatch { .. })
        ));
        let fresh = WriteRequest::delete(domain(), t(6));
        assert_eq!(
            decide_write(&fresh, current, &ops, TokenBounds::OPEN)?,
            Decision::Apply {
                outcome: Accepted::new(t(6), Revision::new(3), Some(t(5))),
                remember: None
            }
        );
        assert_eq!(
            decide_claim(&domain(), Some(t(5)), t(5), TokenBounds::OPEN)?,
            ClaimDecision::Held(Claimed::new(t(5), Some(t(5))))
        );
        assert!(decide_claim(&domain(), Some(t(5)), t(4), TokenBounds::OPEN)
            .is_err_and(|e| e.is_fenced()));
        Ok(())
    }
}

/// What to do with a fenced transaction (the SQL adapters' `begin`), on the locked mark row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum TransactionDecision {
    /// The op id had committed before: answer with the mark before that run, run nothing.
    Replay {
        /// The mark before the first run.
        previous_high_water_mark: Option<FencingToken>,
    },
    /// Admitted: the caller's statements may run; the mark rises to the token when `raise`
    /// (it is the token already otherwise), and the request's op id, if any, is remembered
    /// with the mark before it.
    Admit {
        /// Whether the mark changes.
        raise: bool,
    },
}

/// Decides a fenced transaction in the pipeline's order: a remembered op id replays (one first
/// used for a write is `OpIdReused`), else the token is admitted against the mark and `bounds`.
pub fn decide_transaction(
    request: &crate::TransactionRequest,
    high_water_mark: Option<FencingToken>,
    stored: Option<&crate::raw::StoredOp>,
    bounds: TokenBounds,
) -> Result<TransactionDecision, FenceError> {
    let (domain, token) = (request.domain(), request.token());
    if let (Some(op_id), Some(stored)) = (request.op_id(), stored) {
        return Ok(TransactionDecision::Replay {
            previous_high_water_mark: stored.as_transaction(domain, op_id)?,
        });
    }
    admit(domain, high_water_mark, token, request.policy(), bounds)?;
    Ok(TransactionDecision::Admit {
        raise: high_water_mark != Some(token),
    })
}
