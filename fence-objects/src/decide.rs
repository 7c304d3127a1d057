//! The decisions on an object's header: fence-core's rule applied to what the envelope says,
//! and the header a write or a claim leaves. One copy for every client of the format, so an
//! object written by one is decided the same way by the other.

use bytes::Bytes;
use fence_core::raw::cas::Step;
use fence_core::raw::pipeline::{self, ClaimDecision, Current, Decision};
use fence_core::raw::{EntryHead, OpMemory, TokenBounds};
use fence_core::{
    Claimed, Domain, Entry, FenceError, FencingToken, Mutation, Snapshot, WriteOutcome,
    WriteRequest,
};

use crate::envelope::{fresh_nonce, Header};

/// A write's step on the object's header (`None`: no object): the rule's answer, and the
/// header to commit when it applies. `from_cache` says the header came from the cache: a
/// cached mark is never above the real one, so `Fenced` and a replay found there are true, but
/// a cached revision or mark may be behind, so a mismatch or a step too far is read fresh
/// (`Step::Reload`). `retention` is how many operation ids the header keeps.
pub fn write_step(
    request: &WriteRequest,
    current: Option<&Header>,
    from_cache: bool,
    bounds: TokenBounds,
    retention: usize,
) -> Result<Step<WriteOutcome, Header>, FenceError> {
    let head = current.and_then(|h| h.head);
    let state = Current::new(
        current.map(|h| h.hwm),
        head.is_some_and(EntryHead::is_live),
        head.map(EntryHead::revision),
    );
    let no_ops = OpMemory::new();
    let ops = current.map_or(&no_ops, |h| &h.ops);
    let (accepted, remember) = match pipeline::decide_write(request, state, ops, bounds) {
        Ok(Decision::Replay(first)) => return Ok(Step::Done(WriteOutcome::Duplicate(first))),
        Ok(Decision::Apply { outcome, remember }) => (outcome, remember),
        Err(FenceError::RevisionMismatch { .. } | FenceError::TokenTooFar { .. }) if from_cache => {
            return Ok(Step::Reload)
        }
        Err(refused) => return Err(refused),
    };
    let mut ops = ops.clone();
    if let Some(record) = remember {
        ops.remember(record, retention);
    }
    let (token, revision) = (accepted.token, accepted.revision);
    let head = match request.mutation() {
        Mutation::Delete => EntryHead::Tombstone { token, revision },
        _ => EntryHead::Value { token, revision },
    };
    Ok(Step::Commit {
        change: Header {
            hwm: token,
            head: Some(head),
            nonce: fresh_nonce(),
            ops,
        },
        outcome: WriteOutcome::Accepted(accepted),
    })
}

/// A claim's step on the object's header (`None`: no object). A claim confirms ownership: the
/// cache can prove `Fenced` (its mark is never above the real one) but not that the mark is
/// still this token, nor that a step is too far, so those are read fresh.
pub fn claim_step(
    domain: &Domain,
    token: FencingToken,
    current: Option<&Header>,
    from_cache: bool,
    bounds: TokenBounds,
) -> Result<Step<Claimed, Header>, FenceError> {
    let mark = current.map(|h| h.hwm);
    let decision = match pipeline::decide_claim(domain, mark, token, bounds) {
        Ok(decision) => decision,
        Err(FenceError::TokenTooFar { .. }) if from_cache => return Ok(Step::Reload),
        Err(refused) => return Err(refused),
    };
    let header = match (decision, current) {
        (ClaimDecision::Held(_), _) if from_cache => return Ok(Step::Reload),
        (ClaimDecision::Held(claimed), _) => return Ok(Step::Done(claimed)),
        (ClaimDecision::Raise(_), Some(header)) => Header {
            hwm: token,
            nonce: fresh_nonce(),
            ..header.clone()
        },
        (ClaimDecision::Raise(_), None) => Header {
            hwm: token,
            head: None,
            nonce: fresh_nonce(),
            ops: OpMemory::new(),
        },
    };
    Ok(Step::Commit {
        change: header,
        outcome: decision.claimed(),
    })
}

/// What a read of an object shows: its header, and `payload` (the bytes after the header).
pub fn snapshot(header: &Header, payload: Bytes) -> Snapshot {
    let entry = match header.head {
        None => Entry::Absent,
        Some(EntryHead::Value { token, revision }) => Entry::Value {
            value: payload,
            token,
            revision,
        },
        Some(EntryHead::Tombstone { token, revision }) => Entry::Tombstone { token, revision },
    };
    Snapshot::new(Some(header.hwm), entry)
}
