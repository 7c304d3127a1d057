//! The conformance suite against `MemoryFence`, the reference resource: as a store and as a log.

use std::sync::Arc;

use fence_conformance::{LogHarness, NotApplicable, StoreHarness};
use fence_core::{FencedLog, FencedStore, MemoryFence};

/// A fresh in-memory resource per scenario, with a value limit so the size checks run.
struct Memory(Arc<MemoryFence>);

/// Memory holds its state in the process: there is no server to restart.
const NO_RESTART: &str = "state lives in the process: nothing to restart";

impl StoreHarness for Memory {
    fn store(&self) -> Arc<dyn FencedStore> {
        self.0.clone()
    }

    fn not_applicable(&self) -> NotApplicable {
        &[
            ("state_survives_restart", NO_RESTART),
            (
                "corrupt_state_is_refused_and_left_alone",
                "state is typed values in the process: nothing can hold a mark that is not a token",
            ),
        ]
    }
}

impl LogHarness for Memory {
    fn log(&self) -> Arc<dyn FencedLog> {
        self.0.clone()
    }

    fn not_applicable(&self) -> NotApplicable {
        &[("log_state_survives_restart", NO_RESTART)]
    }
}

async fn memory() -> Option<Memory> {
    Some(Memory(Arc::new(
        MemoryFence::new().with_max_value_bytes(64 * 1024),
    )))
}

mod store {
    fence_conformance::store_conformance!(super::memory);
}

mod log {
    fence_conformance::log_conformance!(super::memory);
}

#[test]
fn declared_capabilities_are_pinned() {
    use fence_core::{Capabilities, Fence, OpIdRetention, DEFAULT_OP_ID_RETENTION};
    let caps = MemoryFence::new()
        .with_max_value_bytes(64 * 1024)
        .capabilities();
    assert_eq!(
        caps,
        Capabilities::store()
            .with_append(true)
            .with_op_id_retention(OpIdRetention::PerDomain(DEFAULT_OP_ID_RETENTION))
            .with_max_value_bytes(Some(64 * 1024)),
        "a change here changes which conformance scenarios run"
    );
    assert!(
        !caps.survives_restart,
        "memory does not survive a restart, and says so"
    );
}

#[tokio::test]
async fn op_id_retention_is_bounded_as_declared() {
    let memory = MemoryFence::new().with_op_id_retention(3);
    let d = fence_conformance::services::domain;
    fence_conformance::retention::store_keeps_the_last_op_ids(&memory, &memory, &d("store")).await;
    fence_conformance::retention::log_keeps_the_last_op_ids(&memory, &memory, &d("log")).await;
}

#[allow(clippy::panic)]
mod leases {
    use std::sync::Arc;
    use std::time::Duration;

    use async_trait::async_trait;
    use fence_conformance::lease;
    use fence_core::{
        Domain, FenceError, Lease, LeaseGuard, LeaseLoss, LeaseManager, LeaseOptions, MemoryFence,
        MemoryLeases, OwnerId,
    };

    fn domain(name: &str) -> Domain {
        Domain::new(name).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn the_lease_story_on_memory() {
        let (store, leases) = (MemoryFence::new(), MemoryLeases::new());
        lease::expired_holder_is_fenced_by_the_next_owner(&store, &leases, None, &domain("story"))
            .await;
    }

    #[tokio::test]
    async fn the_holder_is_reported_on_memory() {
        lease::holder_is_reported(&MemoryLeases::new(), &domain("held")).await;
    }

    #[tokio::test]
    async fn ttls_out_of_range_are_refused_on_memory() {
        lease::ttls_out_of_range_are_refused(&MemoryLeases::new(), &domain("ttl")).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_guard_renews_waits_and_signals_loss_on_memory() {
        lease::guard_renews_waits_and_signals_loss(Arc::new(MemoryLeases::new()), &domain("g"))
            .await;
    }

    /// Leases whose renewals never answer, as a backend that went away.
    #[derive(Debug)]
    struct Unanswered(MemoryLeases);

    #[async_trait]
    impl LeaseManager for Unanswered {
        fn backend(&self) -> &'static str {
            "memory"
        }

        async fn acquire(
            &self,
            domain: &Domain,
            owner: &OwnerId,
            ttl: Duration,
        ) -> Result<Lease, FenceError> {
            self.0.acquire(domain, owner, ttl).await
        }

        async fn renew(&self, _lease: &Lease, _ttl: Duration) -> Result<Lease, FenceError> {
            std::future::pending().await
        }

        async fn release(&self, lease: &Lease) -> Result<(), FenceError> {
            self.0.release(lease).await
        }
    }

    #[tokio::test]
    async fn a_guard_whose_renewals_never_answer_signals_expiry_within_the_ttl() {
        let leases = Arc::new(Unanswered(MemoryLeases::new()));
        let ttl = Duration::from_millis(600);
        let guard = LeaseGuard::acquire(
            leases,
            &domain("silent"),
            &OwnerId::new("a").unwrap_or_else(|e| panic!("{e}")),
            LeaseOptions::new(ttl),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let started = std::time::Instant::now();
        let reason = tokio::time::timeout(ttl * 2, guard.lost())
            .await
            .unwrap_or_else(|_| panic!("no loss signal"));
        assert_eq!(reason, LeaseLoss::Expired);
        assert!(
            started.elapsed() <= ttl + Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
    }
}

mod admission {
    use std::num::NonZeroU64;
    use std::sync::Arc;

    use fence_conformance::services::domain;
    use fence_conformance::{admission, Namespace};
    use fence_core::{IssuerView, MemoryFence, MemoryIssuer};

    const STEP: u64 = 1000;

    fn step() -> NonZeroU64 {
        NonZeroU64::new(STEP).unwrap_or(NonZeroU64::MIN)
    }

    #[tokio::test]
    async fn runaway_tokens_are_refused_on_memory() {
        let store = MemoryFence::new().with_max_token_step(step());
        admission::runaway_tokens_are_refused(&store, &domain("step"), STEP).await;
        admission::log_runaway_tokens_are_refused(&store, &domain("log-step"), STEP).await;
    }

    // The forged writers race on worker threads: the contract is about interleavings.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn unissued_tokens_are_refused_on_memory() {
        let issuer = Arc::new(MemoryIssuer::new());
        let store = Arc::new(MemoryFence::new().issued_by(issuer.clone()));
        admission::unissued_tokens_are_refused(store.as_ref(), issuer.as_ref(), &domain("i")).await;
        admission::forged_tokens_never_land_under_concurrency(store, issuer.as_ref(), &domain("r"))
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn issued_vectors_agree_with_the_rule_on_memory() {
        let issuer = Arc::new(MemoryIssuer::new());
        let store = Arc::new(MemoryFence::new().issued_by(issuer.clone()));
        admission::issued_vectors_agree_with_the_rule(
            store,
            issuer,
            IssuerView::IssuedUpTo,
            &Namespace::new("issued_vectors"),
        )
        .await;
    }
}

#[tokio::test]
async fn a_forged_mark_is_recovered_on_memory() {
    let (store, issuer) = (
        fence_core::MemoryFence::new(),
        fence_core::MemoryIssuer::new(),
    );
    let d = fence_conformance::services::domain("recovered");
    fence_conformance::admission::forged_mark_is_recovered_by_a_reviewed_rebase(
        &store,
        &store,
        &issuer,
        fence_conformance::admission::RebaseFloor::Unchecked,
        &d,
    )
    .await;
}

#[tokio::test]
async fn a_retired_domain_is_forgotten_on_memory() {
    let store = fence_core::MemoryFence::new();
    fence_conformance::retirement::retirement_removes_the_domain_and_nothing_else(
        &store,
        &store,
        None,
        &fence_conformance::services::domain("retired"),
    )
    .await;
}
