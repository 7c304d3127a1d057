//! etcd's KV as a fenced store when the link or the server fails mid-request: a cut
//! connection and a paused server make a write `Ambiguous`, and the write is learnable (a retry
//! with its op id replays, a read back shows it). A steady-state write is one txn (the domain's
//! last seen state is cached), so the fault lands on the write itself.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use fence_conformance::ambiguity;
use fence_conformance::proxy::TcpProxy;
use fence_conformance::services::{domain as d, put};
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
    let uncached = etcd.fence().with_cache_capacity(0);
    put(&uncached, &domain, 7, "u7").await.unwrap();
    assert_eq!(
        fence_conformance::services::value_of(&b, &domain)
            .await
            .as_deref(),
        Some("u7")
    );
}
