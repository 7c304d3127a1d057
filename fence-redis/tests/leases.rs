//! Redis leases and the token issuer, end to end against real servers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_testkit::redis as support;

use std::sync::Arc;
use std::time::Duration;

use fence_core::{
    Domain, Fence, FenceError, FencedStore, LeaseManager, OwnerId, TokenIssuer, WriteRequest,
};
use fence_redis::redis::AsyncCommands;
use fence_redis::RedisFence;
use support::{shared_cluster_fence, shared_fence};

fn owner(name: &str) -> OwnerId {
    OwnerId::new(name).unwrap()
}

async fn lease_story(fence: RedisFence) {
    let leases = fence.leases();
    let domain = Domain::new("shard-7").unwrap();
    let a = leases
        .acquire(&domain, &owner("worker-a"), Duration::from_secs(4))
        .await
        .unwrap();
    fence.claim(&domain, a.token).await.unwrap();
    fence
        .write(&WriteRequest::put(domain.clone(), a.token, "by A"))
        .await
        .unwrap();
    assert!(matches!(
        leases
            .acquire(&domain, &owner("worker-b"), Duration::from_secs(5))
            .await,
        Err(FenceError::LeaseHeld { .. })
    ));

    // A pauses past its lease: B keeps trying until Redis expires it (an event, not a guess
    // at how long the writes above took).
    let started = std::time::Instant::now();
    let b = loop {
        match leases
            .acquire(&domain, &owner("worker-b"), Duration::from_secs(5))
            .await
        {
            Ok(b) => break b,
            Err(FenceError::LeaseHeld { .. }) => {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "A's lease never expired"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(other) => panic!("{other}"),
        }
    };
    assert!(b.token > a.token, "a new owner gets a greater token");
    fence.claim(&domain, b.token).await.unwrap();
    fence
        .write(&WriteRequest::put(domain.clone(), b.token, "by B"))
        .await
        .unwrap();

    // A wakes up: its lease is gone and its writes are fenced.
    assert!(matches!(
        leases.renew(&a, Duration::from_secs(5)).await,
        Err(FenceError::LeaseLost { .. })
    ));
    match fence
        .write(&WriteRequest::put(domain.clone(), a.token, "zombie"))
        .await
    {
        Err(FenceError::Fenced {
            presented, current, ..
        }) => assert_eq!((presented, current), (a.token, b.token)),
        other => panic!("stale owner's write: {other:?}"),
    }
    assert!(matches!(
        leases.release(&a).await,
        Err(FenceError::LeaseLost { .. })
    ));
    assert_eq!(
        fence_conformance::services::value_of(&fence, &domain)
            .await
            .as_deref(),
        Some("by B")
    );

    let b = leases.renew(&b, Duration::from_secs(5)).await.unwrap();
    leases.release(&b).await.unwrap();
    let c = leases
        .acquire(&domain, &owner("worker-a"), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(c.token > b.token, "release never resets the token sequence");
    let issued = fence.issuer().issue(&domain).await.unwrap();
    assert!(
        issued > c.token,
        "the issuer and the leases share one sequence"
    );
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
    let leases = Arc::new(fence.leases());
    let domain = Domain::new("contended").unwrap();
    for round in 0..5 {
        let start = Arc::new(tokio::sync::Barrier::new(8));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..8 {
            let (leases, domain, start) = (leases.clone(), domain.clone(), start.clone());
            tasks.spawn(async move {
                start.wait().await;
                leases
                    .acquire(&domain, &owner(&format!("w{i}")), Duration::from_secs(5))
                    .await
            });
        }
        let mut winners = Vec::new();
        while let Some(result) = tasks.join_next().await {
            match result.unwrap() {
                Ok(lease) => winners.push(lease),
                Err(FenceError::LeaseHeld { .. }) => {}
                Err(other) => panic!("{other}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        // Losers issued nothing: the winner's token is the round number (one issue a round).
        let lease = winners.remove(0);
        assert_eq!(lease.token.get(), round + 1, "round {round}: {lease:?}");
        leases.release(&lease).await.unwrap();
    }
}

#[tokio::test]
async fn issuer_is_strictly_increasing_and_refuses_to_wrap_or_read_garbage() {
    let Some(fence) = shared_fence("issuer").await else {
        return;
    };
    let issuer = fence.issuer();
    let domain = Domain::new("issued").unwrap();
    let mut last = issuer.issue(&domain).await.unwrap();
    for _ in 0..50 {
        let next = issuer.issue(&domain).await.unwrap();
        assert!(next > last);
        last = next;
    }
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
fn fence_redis_prefix(fence: &RedisFence) -> String {
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
