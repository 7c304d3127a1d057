//! Redis leases and the token issuer, end to end against real servers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_testkit::redis as support;

use std::sync::Arc;
use std::time::Duration;

use fence_conformance::lease;
use fence_core::{Domain, Fence, FenceError, LeaseManager, Observed, OwnerId, TokenIssuer};
use fence_redis::redis::AsyncCommands;
use fence_redis::RedisFence;
use support::{shared_cluster_fence, shared_fence};

fn owner(name: &str) -> OwnerId {
    OwnerId::new(name).unwrap()
}

async fn lease_story(fence: Observed<RedisFence>) {
    let (leases, issuer) = (fence.leases(), fence.issuer());
    let domain = Domain::new("shard-7").unwrap();
    lease::expired_holder_is_fenced_by_the_next_owner(&fence, &leases, Some(&issuer), &domain)
        .await;
}

#[tokio::test]
async fn lease_expiry_new_owner_stale_owner_rejected() {
    let Some(fence) = shared_fence("lease").await else {
        return;
    };
    lease_story(fence).await;
}

#[tokio::test]
async fn lease_expiry_new_owner_stale_owner_rejected_on_cluster() {
    let Some(fence) = shared_cluster_fence("lease").await else {
        return;
    };
    lease_story(fence).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acquires_have_exactly_one_winner() {
    let Some(fence) = shared_fence("lease-race").await else {
        return;
    };
    let domain = Domain::new("contended").unwrap();
    lease::concurrent_acquires_have_exactly_one_winner(
        Arc::new(fence.leases()),
        &domain,
        lease::TokenSequence::Consecutive,
    )
    .await;
}

#[tokio::test]
async fn the_holder_is_reported() {
    let Some(fence) = shared_fence("holder").await else {
        return;
    };
    lease::holder_is_reported(&fence.leases(), &Domain::new("held").unwrap()).await;
    let Some(cluster) = shared_cluster_fence("holder").await else {
        return;
    };
    lease::holder_is_reported(&cluster.leases(), &Domain::new("held").unwrap()).await;
}

#[tokio::test]
async fn the_holder_gives_up_first_under_the_drift_bound() {
    let Some(fence) = shared_fence("drift").await else {
        return;
    };
    // PTTL: milliseconds.
    let unit = std::time::Duration::from_millis(1);
    let domain = Domain::new("drift").unwrap();
    lease::the_holder_gives_up_first_under_the_drift_bound(&fence.leases(), &domain, unit).await;
    let Some(cluster) = shared_cluster_fence("drift").await else {
        return;
    };
    lease::the_holder_gives_up_first_under_the_drift_bound(&cluster.leases(), &domain, unit).await;
}

#[tokio::test]
async fn ttls_out_of_range_are_refused() {
    let Some(fence) = shared_fence("ttl").await else {
        return;
    };
    lease::ttls_out_of_range_are_refused(&fence.leases(), &Domain::new("ttl").unwrap()).await;
}

#[tokio::test]
async fn issuer_is_strictly_increasing_and_refuses_to_wrap_or_read_garbage() {
    let Some(fence) = shared_fence("issuer").await else {
        return;
    };
    let issuer = fence.issuer();
    let domain = Domain::new("issued").unwrap();
    lease::issuer_is_strictly_increasing(&issuer, &domain).await;
    let url = support::shared_url().unwrap();
    let mut raw = support::raw(&url).await;
    let prefix = fence_redis_prefix(&fence);
    let seq = format!("{prefix}:{{issued}}:seq");
    let _: () = raw.set(&seq, "18446744073709551614").await.unwrap();
    assert_eq!(issuer.issue(&domain).await.unwrap().get(), u64::MAX);
    assert!(matches!(
        issuer.issue(&domain).await,
        Err(FenceError::TokenExhausted { .. })
    ));
    let _: () = raw.set(&seq, "12abc").await.unwrap();
    assert!(matches!(
        issuer.issue(&domain).await,
        Err(FenceError::CorruptState { .. })
    ));
    let leases = fence.leases();
    assert!(matches!(
        leases
            .acquire(&domain, &owner("x"), Duration::from_secs(1))
            .await,
        Err(FenceError::CorruptState { .. })
    ));
}

/// The prefix a fence was built with, read back from a key it names.
fn fence_redis_prefix(fence: &Observed<RedisFence>) -> String {
    let key = fence.user_key(&Domain::new("x").unwrap(), "k").unwrap();
    key.split(":{").next().unwrap().to_owned()
}

#[tokio::test]
async fn a_recreated_sequence_never_issues_a_token_at_or_below_the_mark() {
    let Some(fence) = shared_fence("floor").await else {
        return;
    };
    let domain = Domain::new("recreated").unwrap();
    let issuer = fence.issuer();
    let leases = fence.leases();
    assert_eq!(issuer.issue(&domain).await.unwrap().get(), 1);
    // The resource accepted 12 (a claim by an owner whose token came from elsewhere, or from
    // before the counter was lost); then the counter is deleted, as a restore or a flush does.
    fence
        .claim(&domain, fence_core::FencingToken::new(12).unwrap())
        .await
        .unwrap();
    let sequence = format!("{}:{{recreated}}:seq", fence.prefix());
    let mut raw = support::raw(&support::shared_url().unwrap()).await;
    let deleted: i64 = raw.del(&sequence).await.unwrap();
    assert_eq!(deleted, 1);
    let issued = issuer.issue(&domain).await.unwrap();
    assert_eq!(issued.get(), 13, "floored above the mark 12, not 1");
    fence.claim(&domain, issued).await.unwrap();
    let _: i64 = raw.del(&sequence).await.unwrap();
    let lease = leases
        .acquire(&domain, &owner("after-flush"), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(lease.token.get(), 14, "the lease's token is floored too");
    fence.claim(&domain, lease.token).await.unwrap();
    // A sequence behind the mark for any other reason is floored the same way.
    let _: () = raw.set(&sequence, "3").await.unwrap();
    assert_eq!(issuer.issue(&domain).await.unwrap().get(), 15);
    // Corrupt fence state is not guessed past: the issuer fails closed.
    let other = Domain::new("corrupt-state").unwrap();
    let state = format!("{}:{{corrupt-state}}:state", fence.prefix());
    let _: () = raw.hset(&state, "fence", "1").await.unwrap();
    let _: () = raw.hset(&state, "hwm", "not-a-token").await.unwrap();
    assert!(matches!(
        issuer.issue(&other).await,
        Err(FenceError::CorruptState { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_renews_waits_and_signals_loss() {
    let Some(fence) = shared_fence("lease-guard").await else {
        return;
    };
    lease::guard_renews_waits_and_signals_loss(
        Arc::new(fence.leases()),
        &Domain::new("g").unwrap(),
    )
    .await;
}

#[tokio::test]
async fn a_retired_domain_leaves_no_keys() {
    let (Some(fence), Some(cluster)) = (
        shared_fence("retire").await,
        shared_cluster_fence("retire").await,
    ) else {
        return;
    };
    let domain = Domain::new("retired").unwrap();
    let mut raw = support::raw(&support::shared_url().unwrap()).await;
    // A user key of the domain (what fenced scripts and the outbox write) goes with it.
    let user = fence.user_key(&domain, "rows").unwrap();
    let _: () = raw.set(&user, "mine").await.unwrap();
    fence_conformance::retirement::retirement_removes_the_domain_and_nothing_else(
        &fence,
        &fence,
        Some(&fence.leases()),
        &domain,
    )
    .await;
    let left: Vec<String> = raw
        .keys(format!("{}:{{retired}}:*", fence.prefix()))
        .await
        .unwrap();
    assert_eq!(left, Vec::<String>::new(), "keys outlived the domain");
    let other: Vec<String> = raw
        .keys(format!("{}:{{retired-kept}}:*", fence.prefix()))
        .await
        .unwrap();
    assert!(!other.is_empty(), "the other domain's keys went too");

    fence_conformance::retirement::retirement_removes_the_domain_and_nothing_else(
        &cluster,
        &cluster,
        Some(&cluster.leases()),
        &domain,
    )
    .await;
}
