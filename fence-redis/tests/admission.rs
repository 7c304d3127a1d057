//! Issued-only acceptance and the bounded step on real Redis, standalone and Cluster: the
//! checks run in the fence's own script, next to the domain's token sequence.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::num::NonZeroU64;
use std::sync::Arc;

use fence_conformance::admission;
use fence_conformance::services::{domain, unavailable};
use fence_redis::{RedisFence, RedisFenceBuilder};
use fence_testkit::redis::{shared_cluster, shared_url, unique_prefix};

const STEP: u64 = 1000;

async fn on_servers(
    test: &str,
    configure: fn(RedisFenceBuilder) -> RedisFenceBuilder,
) -> Vec<RedisFence> {
    let (Some(url), Some(nodes)) = (shared_url(), shared_cluster()) else {
        unavailable("Redis (standalone and Cluster)");
        return Vec::new();
    };
    let standalone = RedisFence::builder().url(url);
    let cluster = RedisFence::builder().cluster(nodes);
    let mut fences = Vec::new();
    for builder in [standalone, cluster] {
        let fence = configure(builder.prefix(unique_prefix(test)))
            .connect()
            .await
            .expect("connect to the shared Redis");
        fences.push(fence);
    }
    fences
}

#[tokio::test]
async fn runaway_tokens_are_refused() {
    let step = |b: RedisFenceBuilder| b.max_token_step(NonZeroU64::new(STEP).unwrap());
    for fence in on_servers("step", step).await {
        admission::runaway_tokens_are_refused(&fence, &domain("step"), STEP).await;
    }
}

#[tokio::test]
async fn unissued_tokens_are_refused() {
    for fence in on_servers("issued", RedisFenceBuilder::issued_only).await {
        admission::unissued_tokens_are_refused(&fence, &fence.issuer(), &domain("issued")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_tokens_never_land_under_concurrency() {
    for fence in on_servers("forged", RedisFenceBuilder::issued_only).await {
        let issuer = fence.issuer();
        admission::forged_tokens_never_land_under_concurrency(
            Arc::new(fence),
            &issuer,
            &domain("r"),
        )
        .await;
    }
}

#[tokio::test]
async fn lease_tokens_are_issued_tokens() {
    for fence in on_servers("leased", RedisFenceBuilder::issued_only).await {
        let leases = fence.leases();
        let d = domain("leased");
        let owner = fence_core::OwnerId::new("worker-a").unwrap();
        let lease = fence_core::LeaseManager::acquire(
            &leases,
            &d,
            &owner,
            std::time::Duration::from_secs(30),
        )
        .await
        .unwrap();
        let accepted =
            fence_conformance::services::put(&fence, &d, lease.token.get(), "leased").await;
        assert!(accepted.is_ok(), "the lease's token: {accepted:?}");
        let forged =
            fence_conformance::services::put(&fence, &d, lease.token.get() + 1, "forged").await;
        assert!(
            matches!(forged, Err(fence_core::FenceError::Unissued { .. })),
            "a token above the lease's: {forged:?}"
        );
    }
}

#[tokio::test]
async fn a_forged_mark_is_recovered_by_a_reviewed_rebase() {
    for fence in on_servers("rebase", |b| b).await {
        let issuer = fence.issuer();
        admission::forged_mark_is_recovered_by_a_reviewed_rebase(
            &fence,
            &fence,
            &issuer,
            admission::RebaseFloor::LastIssued,
            &domain("recovered"),
        )
        .await;
    }
}

/// A sequence lost to an unclean restart or an old snapshot (its mark kept): every token is
/// refused until the issuer issues again, floored above the mark it sees.
#[tokio::test]
async fn a_lost_sequence_refuses_tokens_until_the_issuer_reconciles() {
    let Some(url) = shared_url() else {
        unavailable("Redis");
        return;
    };
    let fence = RedisFence::builder()
        .url(url.clone())
        .prefix(unique_prefix("lost-seq"))
        .issued_only()
        .connect()
        .await
        .unwrap();
    let d = domain("lost");
    let lose = lose_sequence(&url, &fence, &d);
    admission::lost_issuer_state_refuses_tokens_until_reconciled(&fence, &fence.issuer(), &d, lose)
        .await;
}

#[tokio::test]
async fn a_rebase_without_the_sequence_needs_a_declaration() {
    let Some(url) = shared_url() else {
        unavailable("Redis");
        return;
    };
    let fence = RedisFence::builder()
        .url(url.clone())
        .prefix(unique_prefix("rebase-lost"))
        .connect()
        .await
        .unwrap();
    let d = domain("lost");
    let lose = lose_sequence(&url, &fence, &d);
    admission::rebase_without_issuer_state_needs_a_declaration(
        &fence,
        &fence,
        &fence.issuer(),
        &d,
        lose,
    )
    .await;
}

/// Deletes the domain's token sequence, as a restore from an older snapshot would lose it.
async fn lose_sequence(url: &str, fence: &RedisFence, d: &fence_core::Domain) {
    use fence_redis::redis::AsyncCommands;
    let seq = format!("{}:{{{}}}:seq", fence.prefix(), d.escaped());
    let mut raw = fence_testkit::redis::raw(url).await;
    let deleted: u32 = raw.del(&seq).await.unwrap();
    assert_eq!(deleted, 1, "the sequence key {seq}");
}
