//! The relay against the real Redis and a real local webhook server that deduplicates by
//! Idempotency-Key: fence-testkit's relay contract (exactly-once observed delivery, order,
//! dead letters, stuck sinks, zombie relays, concurrency), plus Redis's retention and sweeps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use fence_conformance::relay as relay_contract;
use fence_core::Domain;
use fence_outbox::OutboxStore;
use fence_redis::redis;
use support::{
    all_settled, domain, fast_relay, outbox, pay, relay, token, wait_for, webhook, WebhookServer,
};

fence_conformance::relay_contract_tests!(|test| support::under_test(test, false));

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_exactly_once_despite_failures_and_a_relay_crash() {
    if let Some(o) = support::under_test("exactly-once", true).await {
        relay_contract::exactly_once_despite_failures_and_a_relay_crash(&o).await;
    }
}

#[tokio::test]
async fn the_sweep_finds_a_domain_whose_index_hint_was_lost() {
    let Some(fence) = support::cluster("sweep").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let outbox = outbox(&fence);
    let domains: Vec<Domain> = (0..6).map(|i| domain(&format!("lost-{i}"))).collect();
    for d in &domains {
        pay(&outbox, d, token(1), "a", &server.url("/ok"), d.as_str())
            .await
            .unwrap();
    }
    // As if every writer crashed between the transition and the index hint.
    let index = outbox.fence().prefix().to_owned() + ":outbox:{p0}:index";
    fence.query(redis::cmd("DEL").arg(&index)).await.unwrap();
    assert!(outbox.candidates(0, false).await.unwrap().is_empty());
    let found = outbox.candidates(0, true).await.unwrap();
    assert_eq!(
        found.len(),
        6,
        "the sweep walks every cluster master: {found:?}"
    );
    let handle = relay(&outbox, webhook(), fast_relay("relay")).spawn();
    wait_for(&outbox, &domains, Duration::from_secs(10), |e| {
        e.len() == 6 && all_settled(e)
    })
    .await;
    handle.shutdown().await.unwrap();
    assert_eq!(server.applied().len(), 6);
}
