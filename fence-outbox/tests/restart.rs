//! The outbox across a Redis crash: the server is killed with SIGKILL while the relay delivers,
//! and restarted from its AOF. No entry is lost, none is applied twice, order holds, and a stale
//! worker is still fenced after the restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use fence_core::{Domain, Fence};
use fence_outbox::EntryStatus;
use fence_redis::RedisFence;
use support::{domain, fast_relay, outbox, pay, relay, token, wait_for, webhook, WebhookServer};

#[tokio::test]
async fn a_redis_crash_mid_delivery_loses_and_duplicates_nothing() {
    let Some(server) = support::redis_support::RedisServer::start("outbox-restart", &[]) else {
        return;
    };
    let fence = RedisFence::builder()
        .url(server.url())
        .prefix("outbox-restart")
        .connect()
        .await
        .unwrap();
    let outbox = outbox(&fence);
    let receiver = WebhookServer::start().await;
    let domains: Vec<Domain> = (0..4).map(|i| domain(&format!("order-{i}"))).collect();
    for (i, d) in domains.iter().enumerate() {
        for n in 0..5 {
            let path = if (i + n) % 3 == 0 { "/lost/1" } else { "/ok" };
            let payload = format!("{d}#{n}");
            pay(
                &outbox,
                d,
                token(1),
                &format!("pay-{n}"),
                &receiver.url(path),
                &payload,
            )
            .await
            .unwrap();
        }
    }
    // A newer worker claims order-0 before the crash; its mark must survive it.
    fence.claim(&domains[0], token(2)).await.unwrap();

    let handle = relay(&outbox, webhook(), fast_relay("relay")).spawn();
    let started = std::time::Instant::now();
    while receiver.applied().len() < 6 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the relay did not start delivering"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = receiver.applied().len();
    server.kill_and_restart();
    println!("restart: redis-server killed with SIGKILL after {before} of 20 effects were applied, and restarted");

    let entries = wait_for(&outbox, &domains, Duration::from_secs(60), |e| {
        e.len() == 20
            && e.iter()
                .all(|e| matches!(e.status, EntryStatus::Delivered { .. }))
    })
    .await;
    let report = handle.shutdown().await.unwrap();
    let applied = receiver.applied();
    println!(
        "restart: {} applied, {} requests; relay {report:?}",
        applied.len(),
        receiver.total_requests()
    );
    assert_eq!(applied.len(), 20, "every entry applied exactly once");
    for d in &domains {
        let prefix = format!("{}:", d.escaped());
        let observed: Vec<_> = applied
            .iter()
            .filter(|a| a.key.starts_with(&prefix))
            .map(|a| String::from_utf8_lossy(&a.payload).into_owned())
            .collect();
        let expected: Vec<_> = (0..5).map(|n| format!("{d}#{n}")).collect();
        assert_eq!(observed, expected, "order of {d}");
    }
    let redelivered = entries
        .iter()
        .filter(|e| receiver.requests_for(e.key.as_str()) > 1)
        .count();
    assert!(
        redelivered > 0,
        "lost answers were retried and deduplicated"
    );
    let stale = pay(
        &outbox,
        &domains[0],
        token(1),
        "late",
        &receiver.url("/ok"),
        "zombie",
    )
    .await;
    assert!(
        stale.is_err_and(|e| e.is_fenced()),
        "the mark survived the crash"
    );
    assert_eq!(outbox.entries(&domains[0]).await.unwrap().len(), 5);
}
