//! etcd's KV as a fenced store when the link or the server fails mid-request: a cut
//! connection and a paused server make a write `Ambiguous`, and the write is learnable (a retry
//! with its op id replays, a read back shows it). A steady-state write is one txn (the domain's
//! last seen state is cached), so the fault lands on the write itself.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use fence_conformance::ambiguity;
use fence_conformance::proxy::TcpProxy;
use fence_conformance::services::{domain as d, put, token};
use fence_core::{
    Fence, FenceError, FencedStore, OperationId, Revision, WriteCondition, WriteRequest,
};
use fence_testkit::etcd::{address, shared_endpoints, unique_prefix, EtcdServer};

#[tokio::test]
async fn a_cut_connection_is_ambiguous_and_learnable() {
    let Some(endpoints) = shared_endpoints() else {
        return;
    };
    let proxy = TcpProxy::start(address(&endpoints[0]).parse().unwrap())
        .await
        .unwrap();
    let etcd = support::connect(
        &format!("http://{}", proxy.address()),
        &unique_prefix("cut"),
    )
    .await;
    ambiguity::cut_connections_are_ambiguous_and_learnable(&etcd.fence(), &proxy, &d("cut")).await;
}

#[tokio::test]
async fn a_paused_server_makes_a_write_ambiguous_and_its_retry_applies_once() {
    let Some(server) = EtcdServer::start("paused") else {
        return;
    };
    let etcd = support::connect(&server.endpoint(), "/paused").await;
    let fence = etcd.fence();
    ambiguity::paused_write_is_ambiguous_and_a_retry_applies_once(
        &fence,
        &d("ambiguous"),
        || server.signal("STOP"),
        || server.signal("CONT"),
        Duration::from_secs(10),
    )
    .await;
}

/// The cache only saves a read: a fence whose cached state is old is corrected by etcd's
/// compare, and a stale token is refused as by a fence with no cache.
#[tokio::test]
async fn a_stale_cache_is_corrected_by_the_compare() {
    let Some(etcd) = support::shared("stale_cache").await else {
        return;
    };
    let (a, b) = (etcd.fence(), etcd.fence());
    let domain = d("shared");
    put(&a, &domain, 1, "a1").await.unwrap();
    put(&b, &domain, 5, "b5").await.unwrap();
    // `a` still remembers the state after its own write: its compare fails, it decides again.
    let stale = put(&a, &domain, 3, "a3").await;
    fence_conformance::services::assert_fenced(stale, 3, 5);
    let newer = put(&a, &domain, 6, "a6").await.unwrap();
    assert_eq!(newer.accepted().revision.get(), 3);
    let uncached = etcd.fence_builder().cache_capacity(0).build();
    put(&uncached, &domain, 7, "u7").await.unwrap();
    assert_eq!(
        fence_conformance::services::value_of(&b, &domain)
            .await
            .as_deref(),
        Some("u7")
    );
}

/// A steady-state write compares the domain's state key only (one compare, one put), so another
/// tool's key added to a cached domain's folder is neither seen nor touched by it; every read of
/// the folder (a read, an uncached fence's first write) fails closed on it.
#[tokio::test]
async fn a_foreign_key_added_after_caching_fails_closed_at_the_next_read() {
    let Some(etcd) = support::shared("foreign_after").await else {
        return;
    };
    let fence = etcd.fence();
    let domain = d("cached");
    put(&fence, &domain, 1, "v1").await.unwrap();
    let mut kv = etcd.client().kv_client();
    let foreign = format!("{}/store/cached/extra", etcd.prefix());
    kv.put(foreign.clone(), "someone else's", None)
        .await
        .unwrap();
    put(&fence, &domain, 2, "v2").await.unwrap();
    let read = fence.read(&domain).await;
    assert!(
        matches!(read, Err(FenceError::CorruptState { .. })),
        "{read:?}"
    );
    let uncached = put(&etcd.fence(), &domain, 3, "v3").await;
    assert!(
        matches!(uncached, Err(FenceError::CorruptState { .. })),
        "{uncached:?}"
    );
    let kept = kv.get(foreign, None).await.unwrap();
    assert_eq!(kept.kvs()[0].value(), b"someone else's");
}

/// Answers the cache suggests (a claim already held, a replay, a revision mismatch) are
/// decided again on etcd's state, and that round is no lost race: one attempt suffices.
#[tokio::test]
async fn cached_answers_are_confirmed_without_using_up_attempts() {
    let Some(etcd) = support::shared("cached_answers").await else {
        return;
    };
    let fence = etcd.fence_builder().max_attempts(1).build();
    let domain = d("one-attempt");
    let op = OperationId::new("op-1").unwrap();
    let request = WriteRequest::put(domain.clone(), token(3), "v").with_op_id(op);
    assert!(!fence.write(&request).await.unwrap().is_duplicate());
    assert!(fence.write(&request).await.unwrap().is_duplicate());
    fence.claim(&domain, token(3)).await.unwrap();
    let mismatch = fence
        .write(
            &WriteRequest::put(domain.clone(), token(3), "w")
                .with_condition(WriteCondition::Revision(Revision::new(7))),
        )
        .await;
    assert!(
        matches!(mismatch, Err(FenceError::RevisionMismatch { .. })),
        "{mismatch:?}"
    );
    // Another writer moved the mark: the cached fence is refused with etcd's mark.
    put(&etcd.fence(), &domain, 9, "newer").await.unwrap();
    fence_conformance::services::assert_fenced(put(&fence, &domain, 4, "stale").await, 4, 9);
}
