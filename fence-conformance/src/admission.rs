//! The contract of the bounds policies (see [`fence_core::raw::TokenBounds`]), run by every adapter
//! that declares them against its real server: a token too far above the mark, or one the
//! domain's issuer never issued, is refused with its own error, changes nothing, and never
//! hides a stale token's `Fenced`; a forged token racing a legitimate owner never lands. Each
//! function panics (failing the calling test) on a breach.

use std::sync::Arc;

use fence_core::{
    AppendRequest, Bytes, Domain, Entry, Fence, FenceError, FencedLog, FencedStore, FencingToken,
    IssuerView, OwnerId, Rebase, Rebaser, Record, TokenIssuer, WriteOutcome, WriteRequest,
};
use tokio::task::JoinSet;

use crate::services::{assert_fenced, mark_of, put, token, value_of};
use crate::Namespace;

/// `store` refuses tokens more than `max_step` (at least 2) above the mark on the fresh
/// `domain`: a first token above `max_step` (the step counts from zero), `u64::MAX` by write and
/// by claim; a token exactly `max_step` above is accepted; a stale token is still `Fenced`.
pub async fn runaway_tokens_are_refused(store: &dyn FencedStore, domain: &Domain, max_step: u64) {
    assert_eq!(
        store.capabilities().max_token_step.map(|step| step.get()),
        Some(max_step),
        "the store must declare the step it enforces"
    );
    refuses_runaway_tokens(store, domain, max_step).await;
}

/// [`runaway_tokens_are_refused`] where the resource holds the step, not the client: `store`
/// was built without one (it declares none), and still refuses what the resource's setting
/// refuses.
pub async fn runaway_tokens_are_refused_by_the_resource(
    store: &dyn FencedStore,
    domain: &Domain,
    max_step: u64,
) {
    assert_eq!(
        store.capabilities().max_token_step,
        None,
        "the client must be built without a step: the resource's setting is under test"
    );
    refuses_runaway_tokens(store, domain, max_step).await;
}

async fn refuses_runaway_tokens(store: &dyn FencedStore, domain: &Domain, max_step: u64) {
    assert!(max_step >= 2, "the scenario needs a step of at least 2");
    let too_far =
        |result: Result<WriteOutcome, FenceError>, current: Option<u64>, what: &str| match result {
            Err(FenceError::TokenTooFar {
                current: c,
                max_step: m,
                ..
            }) if c.map(FencingToken::get) == current && m.get() == max_step => {}
            other => panic!("{what}: expected TokenTooFar above {current:?}, got {other:?}"),
        };
    too_far(
        put(store, domain, max_step + 1, "runaway").await,
        None,
        "a first token above the step",
    );
    assert_eq!(
        mark_of(store, domain).await,
        None,
        "a refused first token left a mark"
    );

    put(store, domain, max_step, "first")
        .await
        .unwrap_or_else(|e| panic!("a first token within the step: {e}"));
    too_far(
        put(store, domain, u64::MAX, "forged").await,
        Some(max_step),
        "u64::MAX",
    );
    match store.claim(domain, FencingToken::MAX).await {
        Err(FenceError::TokenTooFar { .. }) => {}
        other => panic!("a claim of u64::MAX: expected TokenTooFar, got {other:?}"),
    }
    assert_fenced(
        put(store, domain, max_step - 1, "stale").await,
        max_step - 1,
        max_step,
    );

    let next = 2 * max_step;
    put(store, domain, next, "second")
        .await
        .unwrap_or_else(|e| panic!("a token exactly one step above the mark: {e}"));
    too_far(
        put(store, domain, next + max_step + 1, "runaway").await,
        Some(next),
        "one more than a step above",
    );
    assert_eq!(value_of(store, domain).await.as_deref(), Some("second"));
    let mark = store
        .high_water_mark(domain)
        .await
        .unwrap_or_else(|e| panic!("mark: {e}"));
    assert_eq!(mark, Some(token(next)), "refused tokens moved the mark");
}

/// `store` accepts on the fresh `domain` only tokens `issuer` issued for it (the issuer the
/// store sees: for etcd, the live lease's token): nothing before the first issue; an issued
/// token is accepted, one above it is refused with `Unissued` by write and by claim; a newer
/// issued token is accepted and fences the older one (`Fenced`, not `Unissued`).
pub async fn unissued_tokens_are_refused(
    store: &dyn FencedStore,
    issuer: &dyn TokenIssuer,
    domain: &Domain,
) {
    assert!(
        store.capabilities().issued_only,
        "the store must declare that it accepts only issued tokens"
    );
    refuses_unissued_tokens(store, issuer, domain).await;
}

/// Every issued-only decision vector ([`crate::vectors::all_issued`]: none to three tokens
/// issued, marks by the first or the newest, claims, puts under either policy and deletes with
/// tokens picked against what was issued, up to `u64::MAX`) is answered by `store` as fence-core's
/// rule answers it with `issuer` in view, and a refusal changes nothing. `view` is how the
/// resource sees the issuer given its newest token ([`IssuerView::IssuedUpTo`] for a counter,
/// [`IssuerView::LiveLease`] for a lease issuer); each vector runs on a fresh domain of `ns`.
pub async fn issued_vectors_agree_with_the_rule(
    store: Arc<dyn FencedStore>,
    issuer: Arc<dyn TokenIssuer>,
    view: fn(Option<FencingToken>) -> IssuerView,
    ns: &Namespace,
) {
    let vectors = crate::vectors::applicable_issued(&store.capabilities());
    assert!(
        !vectors.is_empty(),
        "the store must declare that it accepts only issued tokens"
    );
    let count = vectors.len();
    let domains = (0..count)
        .map(|n| ns.domain(&format!("iv{n}")))
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|e| panic!("vector domains: {e}"));
    if let Err(disagreements) =
        crate::vectors::run_issued(store, issuer, view, vectors, domains, 8).await
    {
        panic!("{disagreements}");
    }
    println!("issued-only decision vectors: {count} agree with fence-core's rule");
}

/// [`unissued_tokens_are_refused`] where the resource holds the setting, not the client:
/// `store` was built without it (it declares it not), and still refuses unissued tokens.
pub async fn unissued_tokens_are_refused_by_the_resource(
    store: &dyn FencedStore,
    issuer: &dyn TokenIssuer,
    domain: &Domain,
) {
    assert!(
        !store.capabilities().issued_only,
        "the client must be built without issued-only: the resource's setting is under test"
    );
    refuses_unissued_tokens(store, issuer, domain).await;
}

async fn refuses_unissued_tokens(
    store: &dyn FencedStore,
    issuer: &dyn TokenIssuer,
    domain: &Domain,
) {
    let unissued =
        |result: Result<WriteOutcome, FenceError>, presented: u64, what: &str| match result {
            Err(FenceError::Unissued { presented: p, .. }) if p.get() == presented => {}
            other => panic!("{what}: expected Unissued for {presented}, got {other:?}"),
        };
    unissued(put(store, domain, 1, "early").await, 1, "before any issue");
    let first = issue(issuer, domain).await;
    put(store, domain, first, "first")
        .await
        .unwrap_or_else(|e| panic!("the issued token {first}: {e}"));
    unissued(
        put(store, domain, first + 1, "forged").await,
        first + 1,
        "one above the issued token",
    );
    unissued(
        put(store, domain, u64::MAX, "forged").await,
        u64::MAX,
        "u64::MAX",
    );
    match store.claim(domain, FencingToken::MAX).await {
        Err(FenceError::Unissued { .. }) => {}
        other => panic!("a claim of u64::MAX: expected Unissued, got {other:?}"),
    }
    assert_eq!(value_of(store, domain).await.as_deref(), Some("first"));

    let second = issue(issuer, domain).await;
    store
        .claim(domain, token(second))
        .await
        .unwrap_or_else(|e| panic!("a claim of the issued token {second}: {e}"));
    put(store, domain, second, "second")
        .await
        .unwrap_or_else(|e| panic!("the issued token {second}: {e}"));
    assert_fenced(put(store, domain, first, "stale").await, first, second);
    let mark = store
        .high_water_mark(domain)
        .await
        .unwrap_or_else(|e| panic!("mark: {e}"));
    assert_eq!(mark, Some(token(second)), "refused tokens moved the mark");
}

/// Forged tokens race a legitimate owner on the fresh `domain`: eight tasks write tokens
/// `issuer` never issued (above its newest, up to `u64::MAX`) while the owner of a freshly
/// issued token writes. Every forged write is refused (`Unissued`, or `TokenTooFar` under a
/// step bound), the owner's writes are all accepted, and the mark ends at the owner's token.
pub async fn forged_tokens_never_land_under_concurrency(
    store: Arc<dyn FencedStore>,
    issuer: &dyn TokenIssuer,
    domain: &Domain,
) {
    assert!(
        store.capabilities().issued_only,
        "the store must declare that it accepts only issued tokens"
    );
    // TokenTooFar is a right refusal only where a step bound is configured too.
    let stepped = store.capabilities().max_token_step.is_some();
    let owner = issue(issuer, domain).await;
    let mut tasks = JoinSet::new();
    for forger in 0..8u64 {
        let (store, domain) = (store.clone(), domain.clone());
        let forged = match forger {
            0 => u64::MAX,
            n => owner.saturating_add(n * 1_000_003),
        };
        tasks.spawn(async move {
            let mut refusals = Vec::new();
            for attempt in 0..5 {
                let request =
                    WriteRequest::put(domain.clone(), token(forged), format!("forged {attempt}"));
                refusals.push((forged, store.write(&request).await));
            }
            refusals
        });
    }
    let owner_store = store.clone();
    let owner_domain = domain.clone();
    tasks.spawn(async move {
        let mut accepted = Vec::new();
        for n in 0..5 {
            let request =
                WriteRequest::put(owner_domain.clone(), token(owner), format!("owner {n}"));
            accepted.push((owner, owner_store.write(&request).await));
        }
        accepted
    });
    while let Some(joined) = tasks.join_next().await {
        for (presented, result) in joined.unwrap_or_else(|e| panic!("racing task: {e}")) {
            match (presented == owner, result) {
                (true, Ok(WriteOutcome::Accepted(_))) => {}
                (false, Err(FenceError::Unissued { .. })) => {}
                (false, Err(FenceError::TokenTooFar { .. })) if stepped => {}
                (is_owner, other) => {
                    panic!("token {presented} (owner: {is_owner}) got {other:?}")
                }
            }
        }
    }
    let mark = store
        .high_water_mark(domain)
        .await
        .unwrap_or_else(|e| panic!("mark: {e}"));
    assert_eq!(mark, Some(token(owner)), "a forged token moved the mark");
    assert_eq!(
        value_of(store.as_ref(), domain).await.as_deref(),
        Some("owner 4")
    );
}

/// The log form of [`runaway_tokens_are_refused`]: `log` refuses claims and appends more than
/// `max_step` (at least 2) above the mark on the fresh `domain`, and commits nothing for them.
pub async fn log_runaway_tokens_are_refused(log: &dyn FencedLog, domain: &Domain, max_step: u64) {
    assert!(max_step >= 2, "the scenario needs a step of at least 2");
    assert_eq!(
        log.capabilities().max_token_step.map(|step| step.get()),
        Some(max_step),
        "the log must declare the step it enforces"
    );
    let append = |token_value: u64, value: &str| {
        AppendRequest::new(
            domain.clone(),
            token(token_value),
            vec![Record::new(value.to_owned())],
        )
    };
    match log.append(&append(max_step + 1, "runaway")).await {
        Err(FenceError::TokenTooFar { current: None, .. }) => {}
        other => panic!("a first token above the step: expected TokenTooFar, got {other:?}"),
    }
    log.claim(domain, token(max_step))
        .await
        .unwrap_or_else(|e| panic!("a claim within the step: {e}"));
    match log.claim(domain, FencingToken::MAX).await {
        Err(FenceError::TokenTooFar {
            current: Some(c), ..
        }) if c.get() == max_step => {}
        other => panic!("a claim of u64::MAX: expected TokenTooFar, got {other:?}"),
    }
    match log.append(&append(u64::MAX, "forged")).await {
        Err(FenceError::TokenTooFar { .. }) => {}
        other => panic!("an append with u64::MAX: expected TokenTooFar, got {other:?}"),
    }
    log.append(&append(2 * max_step, "kept"))
        .await
        .unwrap_or_else(|e| panic!("an append one step above the mark: {e}"));
    let committed: Vec<(u64, Bytes)> = log
        .read_log(domain)
        .await
        .unwrap_or_else(|e| panic!("reading the log: {e}"))
        .into_iter()
        .map(|entry| (entry.token.get(), entry.record.value))
        .collect();
    assert_eq!(
        committed,
        vec![(2 * max_step, Bytes::from_static(b"kept"))],
        "refused appends left records"
    );
}

/// Where a resource puts a re-based mark, as [`forged_mark_is_recovered_by_a_reviewed_rebase`]
/// checks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RebaseFloor {
    /// The resource does not see the issuer: the mark is the requested one.
    Unchecked,
    /// A counter issuer the resource sees: a request below its last token lands exactly on it.
    LastIssued,
    /// An issuer whose floor is above its last token for the domain (etcd: the cluster's
    /// revision): a request below the last token lands at or above it.
    AtOrAboveLastIssued,
}

/// An operator recovers the fresh `domain` (and `<domain>-claimed`, forged by a claim alone)
/// after a forged `u64::MAX` was accepted (the store has no token bounds). A re-base from a mark
/// other than the reviewed one is refused and changes nothing. The reviewed re-base asks for
/// the older owner's token where the resource sees `issuer` (`floor`), else for the newest
/// owner's; the mark lands where `floor` says, keeps the value with its writer token lowered to
/// the new mark, is recorded with who and why, and fences every older holder; the newest owner
/// writes on if the mark landed on its token; the issuer's next token is accepted.
pub async fn forged_mark_is_recovered_by_a_reviewed_rebase(
    store: &dyn FencedStore,
    rebaser: &dyn Rebaser,
    issuer: &dyn TokenIssuer,
    floor: RebaseFloor,
    domain: &Domain,
) {
    let old = issue(issuer, domain).await;
    put(store, domain, old, "old owner")
        .await
        .unwrap_or_else(|e| panic!("old owner: {e}"));
    let owner = forge_over_an_owner(store, issuer, domain).await;
    assert_fenced(
        put(store, domain, owner, "owner again").await,
        owner,
        u64::MAX,
    );

    let refused = rebaser
        .rebase(domain, &rebase_request(owner, u64::MAX - 1))
        .await;
    assert!(
        matches!(refused, Err(FenceError::RebaseRefused { .. })),
        "a re-base from a mark the operator did not review: {refused:?}"
    );
    assert_eq!(
        mark_of(store, domain).await,
        Some(FencingToken::MAX),
        "a refused re-base moved the mark"
    );

    let requested = if floor == RebaseFloor::Unchecked {
        owner
    } else {
        old
    };
    let record = rebaser
        .rebase(domain, &rebase_request(requested, u64::MAX))
        .await
        .unwrap_or_else(|e| panic!("the reviewed re-base: {e}"));
    let landed = record.to.get();
    if floor == RebaseFloor::AtOrAboveLastIssued {
        assert!(
            landed >= owner,
            "the re-base landed at {landed}, below the newest token {owner}"
        );
    } else {
        assert_eq!(
            landed, owner,
            "where the re-base landed (requested {requested})"
        );
    }
    assert_eq!(
        (record.from, record.operator.as_str()),
        (FencingToken::MAX, "ops:alice"),
        "the returned record"
    );
    let snapshot = store
        .read(domain)
        .await
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(
        snapshot.high_water_mark,
        Some(token(landed)),
        "the re-based mark"
    );
    match snapshot.entry {
        Entry::Value {
            value,
            token: writer,
            ..
        } => assert_eq!(
            (value.as_ref(), writer.get()),
            (&b"forged"[..], landed),
            "the entry"
        ),
        other => panic!("the entry after the re-base: {other:?}"),
    }
    assert_fenced(put(store, domain, old, "old again").await, old, landed);
    if landed == owner {
        put(store, domain, owner, "owner after the re-base")
            .await
            .unwrap_or_else(|e| panic!("the newest owner after the re-base: {e}"));
    } else {
        assert_fenced(put(store, domain, owner, "owner").await, owner, landed);
    }
    let next = issue(issuer, domain).await;
    assert!(
        next > landed,
        "the issuer's next token {next} is not above the new mark {landed}"
    );
    put(store, domain, next, "next owner")
        .await
        .unwrap_or_else(|e| panic!("the next owner: {e}"));
    let again = rebaser
        .rebase(domain, &rebase_request(requested, u64::MAX))
        .await;
    assert!(
        matches!(again, Err(FenceError::RebaseRefused { .. })),
        "the same re-base again: {again:?}"
    );
    let records = rebaser
        .rebases(domain)
        .await
        .unwrap_or_else(|e| panic!("rebases: {e}"));
    assert_eq!(records.len(), 1, "recorded re-bases: {records:?}");
    assert_eq!(
        (
            records[0].from,
            records[0].to.get(),
            records[0].reason.as_str()
        ),
        (FencingToken::MAX, landed, REBASE_REASON),
        "the recorded re-base"
    );

    // A domain forged by a claim alone: no entry to lower, and none appears.
    let claimed = Domain::new(format!("{domain}-claimed")).unwrap_or_else(|e| panic!("{e}"));
    let holder = issue(issuer, &claimed).await;
    store
        .claim(&claimed, token(holder))
        .await
        .unwrap_or_else(|e| panic!("claim: {e}"));
    store
        .claim(&claimed, FencingToken::MAX)
        .await
        .unwrap_or_else(|e| panic!("the forged claim: {e}"));
    let record = rebaser
        .rebase(&claimed, &rebase_request(holder, u64::MAX))
        .await
        .unwrap_or_else(|e| panic!("the re-base of a claimed domain: {e}"));
    let snapshot = store
        .read(&claimed)
        .await
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(
        snapshot.high_water_mark,
        Some(record.to),
        "the re-based mark"
    );
    assert!(
        matches!(snapshot.entry, Entry::Absent),
        "{:?}",
        snapshot.entry
    );
    let next = issue(issuer, &claimed).await;
    put(store, &claimed, next, "after the re-base")
        .await
        .unwrap_or_else(|e| panic!("the next owner of a re-based claimed domain: {e}"));
}

/// A forged mark on the fresh `domain` whose issuer state the resource lost (by `lose`): a
/// re-base is refused (the missing state may be a lost sequence whose next tokens repeat
/// issued ones) and changes nothing, until the operator declares the issuer elsewhere; then
/// the mark is the requested one.
pub async fn rebase_without_issuer_state_needs_a_declaration(
    store: &dyn FencedStore,
    rebaser: &dyn Rebaser,
    issuer: &dyn TokenIssuer,
    domain: &Domain,
    lose: impl std::future::Future<Output = ()>,
) {
    let owner = forge_over_an_owner(store, issuer, domain).await;
    lose.await;
    let refused = rebaser
        .rebase(domain, &rebase_request(owner, u64::MAX))
        .await;
    match &refused {
        Err(FenceError::RebaseRefused { detail, .. }) if detail.contains("no issuer state") => {}
        other => panic!("a re-base without issuer state: {other:?}"),
    }
    assert_eq!(
        mark_of(store, domain).await,
        Some(FencingToken::MAX),
        "a refused re-base moved the mark"
    );
    let declared = rebase_request(owner, u64::MAX).issuer_elsewhere();
    let record = rebaser
        .rebase(domain, &declared)
        .await
        .unwrap_or_else(|e| panic!("the declared re-base: {e}"));
    assert_eq!(record.to.get(), owner, "the declared re-base's mark");
    assert_eq!(mark_of(store, domain).await, Some(token(owner)));
}

/// An owner's write with a freshly issued token, then a forged `u64::MAX` over it; returns the
/// owner's token.
async fn forge_over_an_owner(
    store: &dyn FencedStore,
    issuer: &dyn TokenIssuer,
    domain: &Domain,
) -> u64 {
    let owner = issue(issuer, domain).await;
    put(store, domain, owner, "owner")
        .await
        .unwrap_or_else(|e| panic!("owner: {e}"));
    put(store, domain, u64::MAX, "forged")
        .await
        .unwrap_or_else(|e| panic!("the forged write: {e}"));
    owner
}

const REBASE_REASON: &str = "INC-7: a forged u64::MAX";

fn rebase_request(to: u64, expected: u64) -> Rebase {
    let operator = OwnerId::new("ops:alice").unwrap_or_else(|e| panic!("{e}"));
    Rebase::new(token(to), token(expected), operator, REBASE_REASON)
        .unwrap_or_else(|e| panic!("re-base request: {e}"))
}

/// The issuer's state at the resource is lost while the mark is kept (a restore from an older
/// snapshot, an unclean restart, a row or key deleted by hand), by `lose` on the fresh
/// `domain`: every token is refused, the last holder's too, until `issuer` issues again, which
/// it does above the mark it sees; the stale holder stays fenced.
pub async fn lost_issuer_state_refuses_tokens_until_reconciled(
    store: &dyn FencedStore,
    issuer: &dyn TokenIssuer,
    domain: &Domain,
    lose: impl std::future::Future<Output = ()>,
) {
    let first = issue(issuer, domain).await;
    put(store, domain, first, "first")
        .await
        .unwrap_or_else(|e| panic!("the issued token {first}: {e}"));
    lose.await;
    match put(store, domain, first, "after the loss").await {
        Err(FenceError::Unissued { .. }) => {}
        other => panic!("a write after the issuer's state was lost: {other:?}"),
    }
    let next = issue(issuer, domain).await;
    assert!(
        next > first,
        "the reconciled issuer issued {next}, not above the mark {first}"
    );
    put(store, domain, next, "reconciled")
        .await
        .unwrap_or_else(|e| panic!("the reconciled token {next}: {e}"));
    assert_fenced(put(store, domain, first, "stale").await, first, next);
}

async fn issue(issuer: &dyn TokenIssuer, domain: &Domain) -> u64 {
    issuer
        .issue(domain)
        .await
        .unwrap_or_else(|e| panic!("issuing a token for `{domain}`: {e}"))
        .get()
}
