//! The relay against the real Redis and a real local webhook server that deduplicates by
//! Idempotency-Key: fence-testkit's relay contract (exactly-once observed delivery, order,
//! dead letters, stuck sinks, zombie relays, concurrency), plus Redis's retention and sweeps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use fence_core::Domain;
use fence_outbox::{EntryStatus, OutboxStore};
use fence_redis::redis;
use fence_testkit::relay_contract;
use support::{
    all_settled, domain, fast_relay, outbox, pay, relay, token, wait_for, webhook, WebhookServer,
};

fence_testkit::relay_contract_tests!(|test| support::under_test(test, false));

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_exactly_once_despite_failures_and_a_relay_crash() {
    if let Some(o) = support::under_test("exactly-once", true).await {
        relay_contract::exactly_once_despite_failures_and_a_relay_crash(&o).await;
    }
}

#[tokio::test]
async fn delivered_entries_are_kept_for_the_retention_window_then_purged() {
    let Some(fence) = support::standalone("retention").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let outbox = outbox(&fence);
    let d = domain("order-r");
    pay(&outbox, &d, token(1), "a", &server.url("/ok"), "one")
        .await
        .unwrap();
    pay(&outbox, &d, token(1), "b", &server.url("/reject"), "dead")
        .await
        .unwrap();
    let retention = Duration::from_millis(3000);
    let config = fast_relay("relay")
        .retention(retention)
        .sweep_interval(Duration::from_millis(100));
    let handle = relay(&outbox, webhook(), config).spawn();
    let settled = wait_for(
        &outbox,
        std::slice::from_ref(&d),
        Duration::from_secs(10),
        |e| e.len() == 2 && all_settled(e),
    )
    .await;
    let at = match settled[0].status {
        EntryStatus::Delivered { at_ms, .. } => at_ms,
        ref other => panic!("{other:?}"),
    };
    // Inside the window (read right after settling, far inside 3 s) the delivered entry is
    // still there, with its key.
    let kept = outbox.entries(&d).await.unwrap();
    let read_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        read_at < at + 3000,
        "the read came {} ms after delivery, past the window: the machine stalled",
        read_at - at
    );
    assert_eq!(kept.len(), 2, "kept within the window");
    let index = outbox.fence().prefix().to_owned() + ":outbox:{p0}:index";
    let remaining = wait_for(
        &outbox,
        std::slice::from_ref(&d),
        Duration::from_secs(10),
        |e| e.len() == 1,
    )
    .await;
    assert!(
        matches!(remaining[0].status, EntryStatus::DeadLettered { .. }),
        "dead letters stay"
    );
    // Nothing pending or retained: the domain leaves the index and the sweeps stop adding it.
    let started = std::time::Instant::now();
    loop {
        let indexed: Vec<String> =
            redis::from_redis_value(fence.query(redis::cmd("HKEYS").arg(&index)).await.unwrap())
                .unwrap();
        if indexed.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still indexed: {indexed:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown().await.unwrap();
    println!(
        "retention: delivered at {at} ms, purged after the {retention:?} window; dead letter kept"
    );
    // A replay of the first transition is still a duplicate (op-id retention, 24 h by default).
    let replay = pay(&outbox, &d, token(1), "a", &server.url("/ok"), "one")
        .await
        .unwrap();
    assert!(replay.duplicate && outbox.entries(&d).await.unwrap().len() == 1);
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
