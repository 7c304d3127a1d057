//! Corrupt-state vectors: every request on a domain whose state at the resource is not Fence's
//! (a mark or an entry record another program overwrote) is refused with
//! [`FenceError::CorruptState`] naming the domain, not retryable, and changes nothing.
//!
//! fence-core's rule has no answer for a state it cannot read: every copy must fail closed
//! before deciding, whatever the request — a stale token must not be answered `Fenced` by a
//! copy that compared it with the part it could still read, and a newer one must not overwrite
//! the damage (which would hide it, and whatever was there).

use fence_core::{
    Capabilities, Domain, EqualTokenPolicy, FenceError, FencedStore, FencingToken, OpIdRetention,
    Revision, WriteCondition, WriteRequest,
};

use super::{op_id, token, MAX};

/// What a corrupt-state vector asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    Claim,
    Put(EqualTokenPolicy),
    Delete,
    PutWithOpId,
    PutIfAbsent,
    PutIfRevision,
    Read,
    HighWaterMark,
}

/// One corrupt-state vector: a request, with a token where it carries one.
#[derive(Clone, Copy, Debug)]
pub struct CorruptVector {
    ask: Ask,
    token: u64,
}

/// The corrupt-state vectors a store with `capabilities` can answer: claims, puts under either
/// policy, deletes, puts with an operation id or a condition, each with tokens 1, 2 (the
/// writer's), 3 and `u64::MAX`; then a read and a mark read, last, so that they see what every
/// request before them left.
pub fn corrupt_vectors(capabilities: &Capabilities) -> Vec<CorruptVector> {
    let remembers = capabilities.op_id_retention != OpIdRetention::None;
    let mut vectors = Vec::new();
    for token in [1, 2, 3, MAX] {
        for ask in [
            Ask::Claim,
            Ask::Put(EqualTokenPolicy::SameOwner),
            Ask::Put(EqualTokenPolicy::Strict),
            Ask::Delete,
            Ask::PutWithOpId,
            Ask::PutIfAbsent,
            Ask::PutIfRevision,
        ] {
            let answerable = match ask {
                Ask::Claim => capabilities.claim,
                Ask::Put(policy) => {
                    capabilities.strict_policy || policy == EqualTokenPolicy::SameOwner
                }
                Ask::Delete => capabilities.delete,
                Ask::PutWithOpId => remembers,
                Ask::PutIfAbsent | Ask::PutIfRevision => capabilities.revision_cas,
                Ask::Read | Ask::HighWaterMark => true,
            };
            if answerable {
                vectors.push(CorruptVector { ask, token });
            }
        }
    }
    vectors.push(CorruptVector {
        ask: Ask::Read,
        token: 0,
    });
    vectors.push(CorruptVector {
        ask: Ask::HighWaterMark,
        token: 0,
    });
    vectors
}

/// Runs `vectors` in order on `domain`, whose state was corrupted: `Err` lists every vector
/// answered otherwise than with a non-retryable `CorruptState` naming `domain`. `cached_mark` is
/// the mark `store` itself saw before the damage, if it may keep it: a token below it may be
/// refused as `Fenced` by that mark without asking the resource (a mark never goes down, so
/// the refusal is true and changes nothing); a client with no cache must ask, and be told.
pub async fn run_corrupt(
    store: &dyn FencedStore,
    domain: &Domain,
    vectors: &[CorruptVector],
    cached_mark: Option<u64>,
) -> Result<(), String> {
    let mut wrong = Vec::new();
    for vector in vectors {
        let answer = ask(store, domain, *vector).await;
        match answer {
            Err(FenceError::Fenced {
                presented, current, ..
            }) if cached_mark
                .is_some_and(|cached| current.get() == cached && presented.get() < cached) => {}
            Err(FenceError::CorruptState {
                domain: ref named, ..
            }) if named == domain => {
                if let Err(error) = &answer {
                    if error.is_retryable() {
                        wrong.push(format!("{vector:?}: {error} is marked retryable"));
                    }
                }
            }
            other => wrong.push(format!("{vector:?}: {other:?}")),
        }
    }
    if wrong.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} of {} requests on the corrupt state of `{domain}` were not refused as corrupt state:\n{}",
        wrong.len(),
        vectors.len(),
        wrong.join("\n")
    ))
}

/// The vector's request; `Ok` carries nothing: any answer but the refusal is wrong.
async fn ask(
    store: &dyn FencedStore,
    domain: &Domain,
    vector: CorruptVector,
) -> Result<(), FenceError> {
    let presented = || -> FencingToken { token(vector.token.max(1)) };
    let put = || WriteRequest::put(domain.clone(), presented(), format!("w{}", vector.token));
    let request = match vector.ask {
        Ask::Claim => return store.claim(domain, presented()).await.map(drop),
        Ask::Read => return store.read(domain).await.map(drop),
        Ask::HighWaterMark => return store.high_water_mark(domain).await.map(drop),
        Ask::Put(policy) => put().with_policy(policy),
        Ask::Delete => WriteRequest::delete(domain.clone(), presented()),
        Ask::PutWithOpId => put().with_op_id(op_id("corrupt")),
        Ask::PutIfAbsent => put().with_condition(WriteCondition::Absent),
        Ask::PutIfRevision => put().with_condition(WriteCondition::Revision(Revision::new(1))),
    };
    store.write(&request).await.map(drop)
}
