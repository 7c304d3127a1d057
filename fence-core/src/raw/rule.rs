//! The acceptance rule of the contract, as pure functions.
//!
//! A resource must run these checks and its mutation in ONE atomic step (a Lua script, a
//! conditional request, a transaction, a lock held across both). Adapters whose atomic step is a
//! compare-and-set on state they read first (S3's `If-Match`) call these between the read and the
//! conditional write; adapters that check inside the server (Redis Lua) mirror them there.

use crate::{
    Domain, EqualTokenPolicy, FenceError, FencingToken, Operation, Revision, WriteCondition,
};

/// Checks a write's token against the domain's high-water mark.
///
/// - `presented < hwm` → [`FenceError::Fenced`];
/// - `presented == hwm` → accepted under [`EqualTokenPolicy::SameOwner`], fenced under
///   [`EqualTokenPolicy::Strict`];
/// - `presented > hwm`, or no high-water mark yet → accepted.
///
/// ```
/// use fence_core::raw::rule;
/// use fence_core::{Domain, EqualTokenPolicy, FencingToken};
/// let d = Domain::new("orders")?;
/// let (t41, t42) = (FencingToken::new(41)?, FencingToken::new(42)?);
/// assert!(rule::check_token(&d, Some(t42), t41, EqualTokenPolicy::SameOwner).is_err());
/// assert!(rule::check_token(&d, Some(t42), t42, EqualTokenPolicy::SameOwner).is_ok());
/// assert!(rule::check_token(&d, Some(t42), t42, EqualTokenPolicy::Strict).is_err());
/// assert!(rule::check_token(&d, None, t41, EqualTokenPolicy::Strict).is_ok());
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
pub fn check_token(
    domain: &Domain,
    high_water_mark: Option<FencingToken>,
    presented: FencingToken,
    policy: EqualTokenPolicy,
) -> Result<(), FenceError> {
    let Some(current) = high_water_mark else {
        return Ok(());
    };
    let stale = match policy {
        EqualTokenPolicy::SameOwner => presented < current,
        EqualTokenPolicy::Strict => presented <= current,
    };
    if stale {
        return Err(FenceError::Fenced {
            domain: domain.clone(),
            presented,
            current,
        });
    }
    Ok(())
}

/// Checks a claim: refused only when the presented token is older than the high-water mark.
/// Claiming the current mark again is accepted (claims are idempotent).
pub fn check_claim(
    domain: &Domain,
    high_water_mark: Option<FencingToken>,
    presented: FencingToken,
) -> Result<(), FenceError> {
    check_token(
        domain,
        high_water_mark,
        presented,
        EqualTokenPolicy::SameOwner,
    )
}

/// Judges the replicas that acknowledged a change the primary applied: fewer than `requested`
/// is [`FenceError::Unreplicated`] — the change could be lost on failover, so it is never a
/// success — else the count. (The change is applied on the primary either way; a retry with
/// the same operation id waits again.)
///
/// ```
/// use fence_core::raw::rule;
/// use fence_core::{Domain, Operation};
/// let d = Domain::new("orders")?;
/// assert!(rule::check_replicas(&d, Operation::Claim, 1, 0).is_err());
/// assert_eq!(rule::check_replicas(&d, Operation::Claim, 1, 2)?, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check_replicas(
    domain: &Domain,
    operation: Operation,
    requested: u32,
    acknowledged: u32,
) -> Result<u32, FenceError> {
    if acknowledged < requested {
        return Err(FenceError::Unreplicated {
            domain: domain.clone(),
            operation,
            requested,
            acknowledged,
        });
    }
    Ok(acknowledged)
}

/// Checks a revision condition against the stored entry.
///
/// `live` says whether a live value exists; `revision` is the revision of the value or
/// tombstone (`None`: nothing was ever written).
pub fn check_condition(
    domain: &Domain,
    condition: WriteCondition,
    live: bool,
    revision: Option<Revision>,
) -> Result<(), FenceError> {
    let holds = match condition {
        WriteCondition::Any => true,
        WriteCondition::Absent => !live,
        WriteCondition::Revision(expected) => revision == Some(expected),
    };
    if holds {
        Ok(())
    } else {
        Err(FenceError::RevisionMismatch {
            domain: domain.clone(),
            expected: condition,
            actual: revision,
        })
    }
}
