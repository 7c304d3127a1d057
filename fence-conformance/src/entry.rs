//! Scenarios for fenced entry points that are not trait methods: a Redis fenced script, an
//! outbox transition. Each applies a mutation of its own under a token; the suite checks the
//! same rule as for writes (stale refused and not applied, equal per policy, claims fence
//! first, op-id replay before the token rule, races) by counting what was applied at the
//! resource.

use std::sync::Arc;

use async_trait::async_trait;
use fence_core::{Domain, EqualTokenPolicy, Fence, FenceError, FencingToken, OperationId};
use tokio::task::JoinSet;

use crate::scenario::{claimed, ensure, fenced, t};
use crate::{Failure, Namespace, ScenarioResult, Verdict};

/// What one run of the entry point reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ran {
    /// True when the op id had already run: nothing was applied again.
    pub duplicate: bool,
    /// The mark before the (first) run.
    pub previous: Option<FencingToken>,
}

/// One run of an entry point.
#[derive(Clone, Debug)]
pub struct Call {
    /// The domain.
    pub domain: Domain,
    /// The token.
    pub token: FencingToken,
    /// The op id (a harness whose entry point requires one gets one in every call).
    pub op_id: Option<OperationId>,
    /// The equal-token policy.
    pub policy: EqualTokenPolicy,
}

/// What an entry point provides so the suite can drive it on its real backend.
#[async_trait]
pub trait EntryHarness: Send + Sync {
    /// Runs the entry point once: its mutation adds one to what [`EntryHarness::applied`]
    /// counts, unless it is refused or replayed.
    async fn run(&self, call: &Call) -> Result<Ran, FenceError>;

    /// How many times the mutation was applied on `domain`, read at the resource.
    async fn applied(&self, domain: &Domain) -> Result<u64, FenceError>;

    /// The fence the entry point runs under (claims, marks).
    fn fence(&self) -> Arc<dyn Fence>;

    /// Whether every call must carry an op id (outbox transitions do).
    fn requires_op_id(&self) -> bool {
        false
    }
}

fn call(
    h: &dyn EntryHarness,
    domain: &Domain,
    token: u64,
    op: &str,
    policy: EqualTokenPolicy,
) -> Result<Call, Failure> {
    let op_id = if h.requires_op_id() || !op.is_empty() {
        let name = if op.is_empty() {
            format!("auto-{}", fence_core::raw::random_u64())
        } else {
            op.to_owned()
        };
        Some(OperationId::new(name)?)
    } else {
        None
    };
    Ok(Call {
        domain: domain.clone(),
        token: t(token)?,
        op_id,
        policy,
    })
}

async fn expect_applied(h: &dyn EntryHarness, domain: &Domain, count: u64) -> Result<(), Failure> {
    let applied = h.applied(domain).await?;
    ensure!(
        applied == count,
        "`{domain}`: expected the mutation applied {count} times, found {applied}"
    );
    Ok(())
}

fn ran(what: &str, result: Result<Ran, FenceError>) -> Result<Ran, Failure> {
    match result {
        Ok(ran) if !ran.duplicate => Ok(ran),
        other => Err(Failure::new(format!(
            "{what}: expected a run, got {other:?}"
        ))),
    }
}

/// A newer token runs; an older one is fenced and applies nothing.
pub async fn entry_newer_runs_older_fenced(h: &dyn EntryHarness, ns: &Namespace) -> ScenarioResult {
    let d = ns.domain("d")?;
    let same = EqualTokenPolicy::SameOwner;
    let first = ran("token 2", h.run(&call(h, &d, 2, "", same)?).await)?;
    ensure!(
        first.previous.is_none(),
        "first run's previous mark: {first:?}"
    );
    fenced("token 1", h.run(&call(h, &d, 1, "", same)?).await, 1, 2)?;
    expect_applied(h, &d, 1).await?;
    let mark = h.fence().high_water_mark(&d).await?;
    ensure!(mark == Some(t(2)?), "mark after a run with 2: {mark:?}");
    Ok(Verdict::Passed)
}

/// The equal token runs again under the same-owner policy and is fenced under strict.
pub async fn entry_equal_token_policy(h: &dyn EntryHarness, ns: &Namespace) -> ScenarioResult {
    let d = ns.domain("d")?;
    ran(
        "token 3",
        h.run(&call(h, &d, 3, "", EqualTokenPolicy::SameOwner)?)
            .await,
    )?;
    ran(
        "token 3 again",
        h.run(&call(h, &d, 3, "", EqualTokenPolicy::SameOwner)?)
            .await,
    )?;
    fenced(
        "token 3, strict",
        h.run(&call(h, &d, 3, "", EqualTokenPolicy::Strict)?).await,
        3,
        3,
    )?;
    ran(
        "token 4, strict",
        h.run(&call(h, &d, 4, "", EqualTokenPolicy::Strict)?).await,
    )?;
    expect_applied(h, &d, 3).await?;
    Ok(Verdict::Passed)
}

/// A claim fences older holders before the new owner's first run.
pub async fn entry_claim_fences_before_first_run(
    h: &dyn EntryHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let d = ns.domain("d")?;
    let same = EqualTokenPolicy::SameOwner;
    claimed("claim 5", h.fence().claim(&d, t(5)?).await)?;
    fenced(
        "token 4 after the claim",
        h.run(&call(h, &d, 4, "", same)?).await,
        4,
        5,
    )?;
    expect_applied(h, &d, 0).await?;
    let run = ran("token 5", h.run(&call(h, &d, 5, "", same)?).await)?;
    ensure!(
        run.previous == Some(t(5)?),
        "previous mark after the claim: {run:?}"
    );
    expect_applied(h, &d, 1).await?;
    Ok(Verdict::Passed)
}

/// A retried op id replays its first run, before the token rule, and applies nothing again.
pub async fn entry_op_id_replay_returns_first_run(
    h: &dyn EntryHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let d = ns.domain("d")?;
    let same = EqualTokenPolicy::SameOwner;
    let first = ran("op a", h.run(&call(h, &d, 1, "a", same)?).await)?;
    // A replay answered with an error is a wrong answer too, not a failed operation.
    let retry = h.run(&call(h, &d, 1, "a", same)?).await;
    let expected = Ran {
        duplicate: true,
        previous: first.previous,
    };
    ensure!(
        matches!(&retry, Ok(ran) if *ran == expected),
        "retry of op a: expected a duplicate of {first:?}, got {retry:?}"
    );
    expect_applied(h, &d, 1).await?;
    ran(
        "a newer owner's op b",
        h.run(&call(h, &d, 2, "b", same)?).await,
    )?;
    let late = h.run(&call(h, &d, 1, "a", same)?).await;
    ensure!(
        matches!(&late, Ok(ran) if ran.duplicate),
        "late retry of op a after a newer owner ran: expected a duplicate, got {late:?}"
    );
    fenced(
        "new op c with token 1",
        h.run(&call(h, &d, 1, "c", same)?).await,
        1,
        2,
    )?;
    expect_applied(h, &d, 2).await?;
    Ok(Verdict::Passed)
}

/// Domains do not fence each other.
pub async fn entry_domains_are_independent(h: &dyn EntryHarness, ns: &Namespace) -> ScenarioResult {
    let (a, b) = (ns.domain("{a}")?, ns.domain("%7Ba%7D")?);
    let same = EqualTokenPolicy::SameOwner;
    ran("token 9 on a", h.run(&call(h, &a, 9, "", same)?).await)?;
    ran("token 1 on b", h.run(&call(h, &b, 1, "", same)?).await)?;
    expect_applied(h, &a, 1).await?;
    expect_applied(h, &b, 1).await?;
    Ok(Verdict::Passed)
}

/// Racers with mixed tokens run at once: every applied run saw a mark no greater than its
/// token, the greatest token always runs, the count applied equals the runs reported, and the
/// final mark is the greatest token.
pub async fn entry_concurrent_runs_with_mixed_tokens(
    h: &'static dyn EntryHarness,
    ns: &Namespace,
) -> ScenarioResult {
    let d = ns.domain("race")?;
    let tokens = crate::race::mixed_tokens(8);
    let mut racers = JoinSet::new();
    for (i, &token) in tokens.iter().enumerate() {
        let call = call(
            h,
            &d,
            token,
            &format!("racer-{i}"),
            EqualTokenPolicy::SameOwner,
        )?;
        racers.spawn(async move { (call.token, h.run(&call).await) });
    }
    let (mut runs, mut greatest_ran) = (0u64, false);
    let greatest = tokens.iter().copied().max().unwrap_or(1);
    while let Some(joined) = racers.join_next().await {
        let (token, result) = joined.map_err(|e| Failure::new(format!("racer panicked: {e}")))?;
        match result {
            Ok(ran) => {
                ensure!(
                    !ran.duplicate,
                    "a racer with a fresh op id was replayed: {ran:?}"
                );
                ensure!(
                    ran.previous.is_none_or(|p| p <= token),
                    "ran with {token} over a greater mark {:?}",
                    ran.previous
                );
                runs += 1;
                greatest_ran |= token.get() == greatest;
            }
            Err(FenceError::Fenced { current, .. }) => {
                ensure!(current > token, "fenced {token} by a mark of {current}");
            }
            Err(other) => return Err(other.into()),
        }
    }
    ensure!(greatest_ran, "the greatest token {greatest} never ran");
    expect_applied(h, &d, runs).await?;
    let mark = h.fence().high_water_mark(&d).await?;
    ensure!(
        mark == Some(t(greatest)?),
        "final mark {mark:?}, expected {greatest}"
    );
    Ok(Verdict::Passed)
}

/// Generates one `#[tokio::test]` per entry-point scenario (see [`crate::store_conformance!`]);
/// `$make` is an async fn returning `Option<&'static H>` with `H: EntryHarness` (leak the
/// harness: racers share it across tasks).
#[macro_export]
macro_rules! entry_conformance {
    ($make:path) => {
        $crate::__entry_tests!($make;
            entry_newer_runs_older_fenced,
            entry_equal_token_policy,
            entry_claim_fences_before_first_run,
            entry_op_id_replay_returns_first_run,
            entry_domains_are_independent,
            entry_concurrent_runs_with_mixed_tokens,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __entry_tests {
    ($make:path; $($name:ident),* $(,)?) => {
        $(
            #[$crate::__private::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let Some(harness) = $make().await else {
                    return;
                };
                let harness: &'static dyn $crate::entry::EntryHarness = harness;
                let namespace = $crate::Namespace::new(stringify!($name));
                let result = $crate::entry::$name(harness, &namespace).await;
                // Entry scenarios declare nothing not applicable: every one runs.
                $crate::report(env!("CARGO_PKG_NAME"), stringify!($name), &namespace, result, &[]);
            }
        )*
    };
}
