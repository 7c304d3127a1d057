//! The contract of lease backends and token issuers, run by each against its real server:
//! an expired holder's writes are fenced by the next owner's token, renew and release act
//! only for the current owner, acquisitions race to exactly one winner, and the issuer shares
//! the leases' sequence. Each function panics (failing the calling test) on a breach.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fence_core::{
    Domain, FenceError, FencedStore, Lease, LeaseGuard, LeaseLoss, LeaseManager, LeaseOptions,
    OwnerId, TokenIssuer, WriteRequest,
};

use crate::services::value_of;

fn owner(name: &str) -> OwnerId {
    OwnerId::new(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The lease story on the fresh `domain`: A holds the lease and writes; B is refused until the
/// backend expires A's lease (a short TTL, by the backend's clock); B's token is greater and
/// fences A's late write; A can neither renew nor release; a released lease lets a new owner
/// in with a still greater token; `issuer` (when given) continues the same sequence.
pub async fn expired_holder_is_fenced_by_the_next_owner(
    store: &dyn FencedStore,
    leases: &dyn LeaseManager,
    issuer: Option<&dyn TokenIssuer>,
    domain: &Domain,
) {
    // A's TTL has room for its claim and write on a loaded machine before B tries.
    let (short, long) = (Duration::from_secs(4), Duration::from_secs(30));
    let a = leases
        .acquire(domain, &owner("worker-a"), short)
        .await
        .unwrap_or_else(|e| panic!("A acquires: {e}"));
    store
        .claim(domain, a.token)
        .await
        .unwrap_or_else(|e| panic!("A claims: {e}"));
    store
        .write(&WriteRequest::put(domain.clone(), a.token, "by A"))
        .await
        .unwrap_or_else(|e| panic!("A writes: {e}"));
    let refused = leases.acquire(domain, &owner("worker-b"), long).await;
    assert!(
        matches!(refused, Err(FenceError::LeaseHeld { .. })),
        "B while A holds: {refused:?}"
    );

    // A pauses past its lease: B keeps trying until the backend expires it (an event, not a
    // guess at how long the writes above took).
    let started = Instant::now();
    let b = loop {
        match leases.acquire(domain, &owner("worker-b"), long).await {
            Ok(b) => break b,
            Err(FenceError::LeaseHeld { .. }) => {
                assert!(
                    started.elapsed() < Duration::from_secs(15),
                    "A's lease never expired"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(other) => panic!("B acquires: {other}"),
        }
    };
    assert!(b.token > a.token, "a new owner gets a greater token");
    store
        .claim(domain, b.token)
        .await
        .unwrap_or_else(|e| panic!("B claims: {e}"));
    store
        .write(&WriteRequest::put(domain.clone(), b.token, "by B"))
        .await
        .unwrap_or_else(|e| panic!("B writes: {e}"));

    // A wakes up: its lease is gone and its writes are fenced.
    let renewed = leases.renew(&a, long).await;
    assert!(
        matches!(renewed, Err(FenceError::LeaseLost { .. })),
        "A renews after B took over: {renewed:?}"
    );
    match store
        .write(&WriteRequest::put(domain.clone(), a.token, "zombie"))
        .await
    {
        Err(FenceError::Fenced {
            presented, current, ..
        }) => assert_eq!((presented, current), (a.token, b.token)),
        other => panic!("stale owner's write: {other:?}"),
    }
    let released = leases.release(&a).await;
    assert!(
        matches!(released, Err(FenceError::LeaseLost { .. })),
        "A releases B's lease: {released:?}"
    );
    assert_eq!(value_of(store, domain).await.as_deref(), Some("by B"));

    let b = leases
        .renew(&b, long)
        .await
        .unwrap_or_else(|e| panic!("B renews: {e}"));
    leases
        .release(&b)
        .await
        .unwrap_or_else(|e| panic!("B releases: {e}"));
    let c = leases
        .acquire(domain, &owner("worker-a"), long)
        .await
        .unwrap_or_else(|e| panic!("A acquires again after the release: {e}"));
    assert!(c.token > b.token, "release never resets the token sequence");
    if let Some(issuer) = issuer {
        let issued = issuer
            .issue(domain)
            .await
            .unwrap_or_else(|e| panic!("issue: {e}"));
        assert!(
            issued > c.token,
            "the issuer and the leases share one sequence"
        );
    }
}

/// How a backend's tokens follow each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenSequence {
    /// One counter per domain: each acquisition takes the next number, losers take none.
    Consecutive,
    /// A cluster-wide revision (etcd): strictly increasing, with gaps.
    Increasing,
}

/// Eight owners race for the fresh `domain`'s lease, five rounds: exactly one wins each
/// round, and every winner's token is greater than the last; under
/// [`TokenSequence::Consecutive`] losers issue nothing (the winners' tokens are consecutive).
pub async fn concurrent_acquires_have_exactly_one_winner(
    leases: Arc<dyn LeaseManager>,
    domain: &Domain,
    sequence: TokenSequence,
) {
    let mut first = None;
    let mut last = None;
    for round in 0..5_u64 {
        let start = Arc::new(tokio::sync::Barrier::new(8));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..8 {
            let (leases, domain, start) = (leases.clone(), domain.clone(), start.clone());
            tasks.spawn(async move {
                start.wait().await;
                leases
                    .acquire(&domain, &owner(&format!("w{i}")), Duration::from_secs(30))
                    .await
            });
        }
        let mut winners = Vec::new();
        while let Some(result) = tasks.join_next().await {
            match result.unwrap_or_else(|e| panic!("{e}")) {
                Ok(lease) => winners.push(lease),
                Err(FenceError::LeaseHeld { .. }) => {}
                Err(other) => panic!("round {round}: {other}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let lease = winners.remove(0);
        assert!(
            last.is_none_or(|last| lease.token > last),
            "round {round}: {lease:?} after {last:?}"
        );
        last = Some(lease.token);
        let first = *first.get_or_insert(lease.token.get());
        if sequence == TokenSequence::Consecutive {
            assert_eq!(
                lease.token.get(),
                first + round,
                "round {round}: losers consumed tokens: {lease:?}"
            );
        }
        leases
            .release(&lease)
            .await
            .unwrap_or_else(|e| panic!("release: {e}"));
    }
}

/// The issuer on the fresh `domain`: strictly increasing over many issues.
pub async fn issuer_is_strictly_increasing(issuer: &dyn TokenIssuer, domain: &Domain) {
    let mut last = issuer
        .issue(domain)
        .await
        .unwrap_or_else(|e| panic!("issue: {e}"));
    for _ in 0..50 {
        let next = issuer
            .issue(domain)
            .await
            .unwrap_or_else(|e| panic!("issue: {e}"));
        assert!(next > last, "{next} after {last}");
        last = next;
    }
}

/// How a test sets an issuer's stored counter for a domain, going around Fence: `None` deletes
/// the counter (a lost or restored-from-an-old-backup row), `Some(last)` sets the last issued
/// token.
pub type SetCounter<'a> = &'a (dyn Fn(Option<u64>) -> fence_core::BoxFuture<'static, ()> + Sync);

/// An issuer whose counter lives beside the marks, on the fresh `domain`: a counter row lost
/// and recreated is floored at the domain's mark (for an issue and a lease alike), so no
/// token the resource has seen is issued again; at the last token the issuer is
/// `TokenExhausted` and leaves the counter as it was (checked by the next issue).
pub async fn issuer_is_floored_at_the_mark_and_exhausts_cleanly(
    fence: &dyn fence_core::Fence,
    issuer: &dyn TokenIssuer,
    leases: &dyn LeaseManager,
    domain: &Domain,
    set_counter: SetCounter<'_>,
) {
    let issue = || async {
        issuer
            .issue(domain)
            .await
            .unwrap_or_else(|e| panic!("issue: {e}"))
            .get()
    };
    let token = |n: u64| fence_core::FencingToken::new(n).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(issue().await, 1);
    fence
        .claim(domain, token(12))
        .await
        .unwrap_or_else(|e| panic!("claim: {e}"));
    set_counter(None).await;
    assert_eq!(issue().await, 13, "floored above the mark 12");
    fence
        .claim(domain, token(20))
        .await
        .unwrap_or_else(|e| panic!("claim: {e}"));
    let lease = leases
        .acquire(domain, &owner("after"), Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}"));
    assert_eq!(lease.token.get(), 21, "the lease's token is floored too");
    set_counter(Some(u64::MAX - 1)).await;
    assert_eq!(issue().await, u64::MAX);
    for _ in 0..2 {
        let exhausted = issuer.issue(domain).await;
        assert!(
            matches!(exhausted, Err(FenceError::TokenExhausted { .. })),
            "{exhausted:?}"
        );
    }
}

/// The lease guard on `leases` (fresh `domain`): it keeps the lease across several TTLs by
/// renewing it in the background, with one token; a second owner's acquire with a wait
/// deadline is `LeaseHeld` once the deadline passes, and gets the lease soon after the first
/// releases, with a greater token; a lease revoked behind the guard's back (an operator's
/// release) is signalled lost (`Refused`) within the TTL.
pub async fn guard_renews_waits_and_signals_loss(leases: Arc<dyn LeaseManager>, domain: &Domain) {
    let ttl = Duration::from_secs(1);
    let a = LeaseGuard::acquire(leases.clone(), domain, &owner("a"), LeaseOptions::new(ttl))
        .await
        .unwrap_or_else(|e| panic!("A acquires: {e}"));
    tokio::time::sleep(ttl * 3).await;
    assert!(!a.is_lost(), "A's guard renewed its lease: {a:?}");
    let first = a.token();

    let started = Instant::now();
    let waited = Duration::from_millis(500);
    let refused = LeaseGuard::acquire(
        leases.clone(),
        domain,
        &owner("b"),
        LeaseOptions::new(ttl).wait(waited),
    )
    .await;
    assert!(
        matches!(refused, Err(FenceError::LeaseHeld { .. })),
        "B while A's guard holds: {refused:?}"
    );
    assert!(started.elapsed() >= waited, "B waited its deadline");

    let b = acquired_after_release(
        Arc::new(CountingAcquires {
            inner: leases.clone(),
            acquires: AtomicUsize::new(0),
        }),
        domain,
        ttl,
        Duration::from_millis(200),
        a.release(),
        Duration::from_secs(2),
    )
    .await;
    assert!(b.token() > first, "a new holder gets a greater token");

    // An operator revokes B's lease: the guard's next renewal is refused.
    leases
        .release(&b.lease())
        .await
        .unwrap_or_else(|e| panic!("revoke: {e}"));
    let reason = tokio::time::timeout(ttl * 2, b.lost())
        .await
        .unwrap_or_else(|_| panic!("the revoked lease was not signalled lost"));
    assert_eq!(reason, LeaseLoss::Refused);
    assert!(b.is_lost());
}

/// A waiting acquirer is woken by the release, not by polling (for backends that override
/// [`LeaseManager::wait_for_release`] with a notification): while A holds the fresh `domain`
/// for 3 s after B's first attempt, B's guard, waiting up to 10 s, tries to acquire at most
/// three times (once before the release, once after, and one spare for a spurious wake-up) and
/// gets the lease within a second of the release: a waiter polling even every 750 ms tries at
/// least five times.
pub async fn waiting_is_notified(leases: Arc<dyn LeaseManager>, domain: &Domain) {
    let counting = Arc::new(CountingAcquires {
        inner: leases.clone(),
        acquires: AtomicUsize::new(0),
    });
    let long = Duration::from_secs(30);
    let a = leases
        .acquire(domain, &owner("a"), long)
        .await
        .unwrap_or_else(|e| panic!("A acquires: {e}"));
    let b = acquired_after_release(
        counting.clone(),
        domain,
        long,
        Duration::from_secs(3),
        leases.release(&a),
        Duration::from_secs(1),
    )
    .await;
    let attempts = counting.acquires.load(Ordering::SeqCst);
    assert!(
        attempts <= 3,
        "B tried {attempts} times over a 3 s hold: it polled instead of being notified"
    );
    b.release()
        .await
        .unwrap_or_else(|e| panic!("B releases: {e}"));
}

/// B's guard (TTL `ttl`) waits up to 10 s for `domain`; once B has tried and is waiting, A
/// keeps its lease for `hold`, then releases it by `release`, and B must hold the lease within
/// `within` of the release.
async fn acquired_after_release(
    waiter: Arc<CountingAcquires>,
    domain: &Domain,
    ttl: Duration,
    hold: Duration,
    release: impl std::future::Future<Output = Result<(), FenceError>>,
    within: Duration,
) -> LeaseGuard {
    let waiting = tokio::spawn({
        let (domain, waiter) = (domain.clone(), waiter.clone());
        async move {
            let options = LeaseOptions::new(ttl).wait(Duration::from_secs(10));
            LeaseGuard::acquire(waiter, &domain, &owner("b"), options).await
        }
    });
    crate::wait::until("B tried once and waits", Duration::from_secs(10), || {
        waiter.acquires.load(Ordering::SeqCst) >= 1
    })
    .await;
    // A holds on while B waits: the time in which a polling waiter would try again.
    tokio::time::sleep(hold).await;
    let released = Instant::now();
    release.await.unwrap_or_else(|e| panic!("A releases: {e}"));
    let b = waiting
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("B acquires after the release: {e}"));
    assert!(
        released.elapsed() < within,
        "B got the lease {:?} after the release",
        released.elapsed()
    );
    b
}

/// Counts acquisitions on the way to the backend.
#[derive(Debug)]
struct CountingAcquires {
    inner: Arc<dyn LeaseManager>,
    acquires: AtomicUsize,
}

#[async_trait::async_trait]
impl LeaseManager for CountingAcquires {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn wait_for_release(&self, domain: &Domain, within: Duration) {
        self.inner.wait_for_release(domain, within).await;
    }

    async fn acquire(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        self.acquires.fetch_add(1, Ordering::SeqCst);
        self.inner.acquire(domain, owner, ttl).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        self.inner.renew(lease, ttl).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), FenceError> {
        self.inner.release(lease).await
    }
}

/// `holder` reports the live lease of the fresh `domain` as the backend sees it: none before
/// the first acquisition, the holder's owner and token with a remaining time within the TTL
/// while it runs, the new owner after a release and re-acquisition, none once released.
pub async fn holder_is_reported(leases: &dyn LeaseManager, domain: &Domain) {
    let holder = |what: &'static str| async move {
        leases
            .holder(domain)
            .await
            .unwrap_or_else(|e| panic!("holder {what}: {e}"))
    };
    assert_eq!(holder("before any lease").await, None);
    let ttl = Duration::from_secs(30);
    let a = leases
        .acquire(domain, &owner("inspected-a"), ttl)
        .await
        .unwrap_or_else(|e| panic!("A acquires: {e}"));
    let seen = holder("while A holds it")
        .await
        .unwrap_or_else(|| panic!("no holder reported while A holds the lease"));
    assert_eq!((seen.owner.as_str(), seen.token), ("inspected-a", a.token));
    // Every lease backend knows when its lease ends, and operators need it (`fence inspect`).
    let remaining = seen
        .remaining
        .unwrap_or_else(|| panic!("A's lease reported no remaining time"));
    assert!(
        remaining <= ttl && remaining > Duration::from_secs(20),
        "A's lease of {ttl:?} reported {remaining:?} remaining"
    );
    leases
        .release(&a)
        .await
        .unwrap_or_else(|e| panic!("A releases: {e}"));
    let b = leases
        .acquire(domain, &owner("inspected-b"), ttl)
        .await
        .unwrap_or_else(|e| panic!("B acquires: {e}"));
    let seen = holder("while B holds it").await;
    assert_eq!(
        seen.map(|h| (h.owner.as_str().to_owned(), h.token)),
        Some(("inspected-b".to_owned(), b.token))
    );
    leases
        .release(&b)
        .await
        .unwrap_or_else(|e| panic!("B releases: {e}"));
    assert_eq!(holder("after B released").await, None);
}

/// The holder gives up first even when its clock runs slow by the drift bound
/// ([`fence_core::raw::MAX_CLOCK_DRIFT`]): right after an acquisition and after a renewal, the
/// time its [`Lease::valid_until`] leaves, counted on a clock that slow, is within what the
/// server says is left of the lease (plus `granularity`, the unit the backend reports it in:
/// etcd reports whole seconds). A lease manager of a remote server that counts the whole TTL
/// from its own clock fails this (the model `fence-model`'s `lease_guard` found it). Not for
/// in-process managers, whose holder and server share one clock.
pub async fn the_holder_gives_up_first_under_the_drift_bound(
    leases: &dyn LeaseManager,
    domain: &Domain,
    granularity: Duration,
) {
    // Long enough that the drift bound's share (2 s) outweighs every reporting unit.
    let ttl = Duration::from_secs(200);
    let acquired = leases
        .acquire(domain, &owner("drifting"), ttl)
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}"));
    let renewed = leases
        .renew(&acquired, ttl)
        .await
        .unwrap_or_else(|e| panic!("renew: {e}"));
    for (what, lease) in [("acquired", &acquired), ("renewed", &renewed)] {
        let seen = leases
            .holder(domain)
            .await
            .unwrap_or_else(|e| panic!("holder after it was {what}: {e}"))
            .unwrap_or_else(|| panic!("no holder reported after the lease was {what}"));
        let server_left = seen
            .remaining
            .unwrap_or_else(|| panic!("no remaining time reported after the lease was {what}"))
            + granularity;
        let believed = lease.valid_until.saturating_duration_since(Instant::now());
        let on_a_slow_clock = believed.div_f64(1.0 - fence_core::raw::MAX_CLOCK_DRIFT);
        assert!(
            on_a_slow_clock <= server_left,
            "the lease {what} with {ttl:?}: its holder believes it for {believed:?} more \
             ({on_a_slow_clock:?} of the server's time on a clock {} % slow), the server \
             holds it {server_left:?} more",
            fence_core::raw::MAX_CLOCK_DRIFT * 100.0
        );
    }
    leases
        .release(&renewed)
        .await
        .unwrap_or_else(|e| panic!("release: {e}"));
}

/// A TTL of zero, or above `i64::MAX` ms, is refused with [`FenceError::InvalidInput`] by
/// `acquire` and by `renew`, before any I/O: no lease is taken and the held one is unchanged.
pub async fn ttls_out_of_range_are_refused(leases: &dyn LeaseManager, domain: &Domain) {
    let refused = |what: &str, result: Result<Lease, FenceError>| match result {
        Err(FenceError::InvalidInput(_)) => {}
        other => panic!("{what}: expected an invalid-input error, got {other:?}"),
    };
    let holder = owner("ttl-bounds");
    for ttl in [Duration::ZERO, Duration::MAX] {
        refused(
            &format!("acquire for {ttl:?}"),
            leases.acquire(domain, &holder, ttl).await,
        );
    }
    let lease = leases
        .acquire(domain, &holder, Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("acquire for 30 s: {e}"));
    for ttl in [Duration::ZERO, Duration::MAX] {
        refused(
            &format!("renew for {ttl:?}"),
            leases.renew(&lease, ttl).await,
        );
    }
    // The refused renewals changed nothing: the lease is still held and renewable.
    leases
        .renew(&lease, Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("renew after the refused ones: {e}"));
    leases
        .release(&lease)
        .await
        .unwrap_or_else(|e| panic!("release: {e}"));
}
