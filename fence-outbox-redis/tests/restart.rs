//! The outbox across a Redis crash: the server is killed with SIGKILL while the relay delivers,
//! and restarted from its AOF. No entry is lost, none is applied twice, order holds, and a stale
//! worker is still fenced after the restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fence_outbox::{OutboxEntry, Sink, SinkError};
use tokio::sync::Notify;

use fence_core::{Domain, Fence};
use fence_outbox::EntryStatus;
use fence_redis::RedisFence;
use support::{domain, fast_relay, outbox, pay, relay, token, wait_for, webhook, WebhookServer};

/// Delivers; on the `left`-th delivery, holds after the receiver applied it until resumed.
struct HoldAfterDelivery {
    inner: Arc<dyn Sink>,
    left: AtomicUsize,
    delivered: Arc<Notify>,
    resume: Arc<Notify>,
}

#[async_trait]
impl Sink for HoldAfterDelivery {
    async fn deliver(&self, entry: &OutboxEntry) -> Result<(), SinkError> {
        self.inner.deliver(entry).await?;
        if self.left.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.delivered.notify_one();
            self.resume.notified().await;
        }
        Ok(())
    }
}

// Multi-threaded: the relay's tasks keep running while the test thread restarts Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
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

    // The 6th delivery is held after the receiver applied it and before the relay can mark it:
    // the kill lands exactly there, mid-delivery.
    let (delivered, resume) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let sink = Arc::new(HoldAfterDelivery {
        inner: webhook(),
        left: AtomicUsize::new(6),
        delivered: delivered.clone(),
        resume: resume.clone(),
    });
    let handle = relay(&outbox, sink, fast_relay("relay")).spawn();
    tokio::time::timeout(Duration::from_secs(20), delivered.notified())
        .await
        .expect("the relay did not reach its 6th delivery");
    let before = receiver.applied().len();
    server.kill_and_restart();
    resume.notify_one();
    println!("restart: redis-server killed with SIGKILL while the relay held its 6th delivery ({before} of 20 effects applied) unmarked, and restarted");

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
