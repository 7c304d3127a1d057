//! Issued-only vectors: fence-core's rule with the issuer in the picture, run against a store
//! that accepts only the tokens its issuer handed out.
//!
//! A vector's state is reached through the issuer and the store: the issuer has issued none to
//! three tokens for the domain, and the mark is none, the first issued token (written right
//! after it was issued) or the newest. Its request is a claim, a put under either equal-token
//! policy, or a delete, with a token picked against what was issued: 1, the first, the one
//! before the newest, the newest, one above the newest, or `u64::MAX`. The expected answer is
//! `decide_write` / `decide_claim` with the adapter's declared step bound and the issuer as the
//! resource sees it (`IssuedUpTo` the newest for a counter, `LiveLease` for a lease issuer whose
//! only current token is the live lease's).

use std::sync::Arc;

use fence_core::raw::{OpMemory, TokenBounds};
use fence_core::{
    Capabilities, Domain, EqualTokenPolicy, FenceError, FencedStore, FencingToken, IssuerView,
    Mutation, TokenIssuer, WriteOutcome, WriteRequest,
};

use super::{check_claim, check_write, run_each, token, MAX};

/// The mark a vector's setup leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    None,
    /// Written by the first issued token, right after it was issued.
    First,
    /// Written by the newest issued token.
    Newest,
}

/// The token a vector presents, relative to what was issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pick {
    One,
    First,
    BeforeNewest,
    Newest,
    AboveNewest,
    Max,
}

/// What a vector asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    Claim,
    Put(EqualTokenPolicy),
    Delete,
}

/// One issued-only vector (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct IssuedVector {
    issued: usize,
    mark: Mark,
    pick: Pick,
    ask: Ask,
}

/// Every issued-only vector.
pub fn all_issued() -> Vec<IssuedVector> {
    let mut vectors = Vec::new();
    for issued in 0..=3 {
        for mark in [Mark::None, Mark::First, Mark::Newest] {
            let reachable = match mark {
                Mark::None => true,
                Mark::First => issued >= 1,
                // With one token issued, the newest is the first.
                Mark::Newest => issued >= 2,
            };
            if !reachable {
                continue;
            }
            for pick in [
                Pick::One,
                Pick::First,
                Pick::BeforeNewest,
                Pick::Newest,
                Pick::AboveNewest,
                Pick::Max,
            ] {
                let exists = match pick {
                    Pick::One | Pick::Max => true,
                    Pick::First | Pick::AboveNewest => issued >= 1,
                    Pick::BeforeNewest => issued >= 2,
                    // With one token issued, the newest is the first.
                    Pick::Newest => issued >= 2,
                };
                if !exists {
                    continue;
                }
                for ask in [
                    Ask::Claim,
                    Ask::Put(EqualTokenPolicy::SameOwner),
                    Ask::Put(EqualTokenPolicy::Strict),
                    Ask::Delete,
                ] {
                    vectors.push(IssuedVector {
                        issued,
                        mark,
                        pick,
                        ask,
                    });
                }
            }
        }
    }
    vectors
}

/// The issued-only vectors a store with `capabilities` can answer: no claims, strict policy or
/// deletes where it has none. None unless it accepts only issued tokens.
pub fn applicable_issued(capabilities: &Capabilities) -> Vec<IssuedVector> {
    if !capabilities.issued_only {
        return Vec::new();
    }
    all_issued()
        .into_iter()
        .filter(|v| match v.ask {
            Ask::Claim => capabilities.claim,
            Ask::Put(policy) => capabilities.strict_policy || policy == EqualTokenPolicy::SameOwner,
            Ask::Delete => capabilities.delete,
        })
        .collect()
}

/// Runs issued-only `vectors` against `store`, whose tokens `issuer` issues, the n-th on
/// `domains[n]` (fresh domains), at most `parallel` at a time. `view` is how the resource sees
/// the issuer given its newest token: [`IssuerView::IssuedUpTo`] for a counter,
/// [`IssuerView::LiveLease`] for a lease issuer that keeps every issued lease live until the
/// next issue for the domain. `Err` lists the vectors whose answer or effect differs from the
/// rule's.
pub async fn run_issued(
    store: Arc<dyn FencedStore>,
    issuer: Arc<dyn TokenIssuer>,
    view: fn(Option<FencingToken>) -> IssuerView,
    vectors: Vec<IssuedVector>,
    domains: Vec<Domain>,
    parallel: usize,
) -> Result<(), String> {
    let max_step = store.capabilities().max_token_step;
    run_each(vectors, domains, parallel, move |vector, domain| {
        let (store, issuer) = (store.clone(), issuer.clone());
        async move {
            let newest = set_up(store.as_ref(), issuer.as_ref(), &domain, vector).await?;
            let bounds = TokenBounds::new(max_step, view(newest.last().copied()));
            check_issued(store.as_ref(), &domain, vector, &newest, bounds).await
        }
    })
    .await
}

/// Issues the vector's tokens, writing the mark it asks for; returns the issued tokens.
async fn set_up(
    store: &dyn FencedStore,
    issuer: &dyn TokenIssuer,
    domain: &Domain,
    vector: IssuedVector,
) -> Result<Vec<FencingToken>, String> {
    let failed = |what: &str, e: FenceError| format!("setup: {what}: {e}");
    let write = |token: FencingToken| WriteRequest::put(domain.clone(), token, "setup");
    let mut issued = Vec::new();
    for n in 0..vector.issued {
        let token = issuer.issue(domain).await.map_err(|e| failed("issue", e))?;
        if let Some(previous) = issued.last() {
            if token <= *previous {
                return Err(format!("setup: issued {token} after {previous}"));
            }
        }
        issued.push(token);
        if n == 0 && vector.mark == Mark::First {
            expect_accepted(store.write(&write(token)).await, "the first issued token")?;
        }
    }
    if let (Mark::Newest, Some(&newest)) = (vector.mark, issued.last()) {
        expect_accepted(store.write(&write(newest)).await, "the newest issued token")?;
    }
    Ok(issued)
}

fn expect_accepted(answer: Result<WriteOutcome, FenceError>, what: &str) -> Result<(), String> {
    match answer {
        Ok(WriteOutcome::Accepted(_)) => Ok(()),
        other => Err(format!("setup: a put with {what} answered {other:?}")),
    }
}

/// The vector's request on the state the setup left, judged against the rule.
async fn check_issued(
    store: &dyn FencedStore,
    domain: &Domain,
    vector: IssuedVector,
    issued: &[FencingToken],
    bounds: TokenBounds,
) -> Result<(), String> {
    let before = store
        .read(domain)
        .await
        .map_err(|e| format!("read after the setup: {e}"))?;
    let mark = match vector.mark {
        Mark::None => None,
        Mark::First => issued.first().copied(),
        Mark::Newest => issued.last().copied(),
    };
    if before.high_water_mark != mark {
        return Err(format!("the setup reads back as {before:?}"));
    }
    let newest = issued.last().map_or(0, |t| t.get());
    let presented = token(match vector.pick {
        Pick::One => 1,
        Pick::First => issued.first().map_or(1, |t| t.get()),
        Pick::BeforeNewest => issued
            .len()
            .checked_sub(2)
            .and_then(|n| issued.get(n))
            .map_or(1, |t| t.get()),
        Pick::Newest => newest.max(1),
        Pick::AboveNewest => newest.saturating_add(1),
        Pick::Max => MAX,
    });
    let mutation = match vector.ask {
        Ask::Claim => return check_claim(store, domain, presented, &before, bounds).await,
        Ask::Put(_) => Mutation::Put(format!("w{presented}").into()),
        Ask::Delete => Mutation::Delete,
    };
    let policy = match vector.ask {
        Ask::Put(policy) => policy,
        _ => EqualTokenPolicy::SameOwner,
    };
    let request = WriteRequest::new(domain.clone(), presented, mutation).with_policy(policy);
    check_write(store, &request, &before, &OpMemory::new(), bounds).await
}
