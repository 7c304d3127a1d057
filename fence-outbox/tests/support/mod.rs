//! Test support: the shared Redis servers `scripts/test` starts, a real local webhook server,
//! and relay helpers.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

#[cfg(feature = "kafka")]
pub mod kafka;
/// fence-redis's test support: the shared servers, and dedicated servers a test can kill.
#[path = "../../../fence-redis/tests/support/mod.rs"]
pub mod redis_support;
pub mod webhook_server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fence_core::{Domain, FencingToken, LeaseManager, OperationId, OwnerId};
use fence_outbox::redis::{OutboxScript, RedisOutbox, Transition};
use fence_outbox::{
    DestinationRule, Effect, EffectKinds, OutboxConfig, OutboxEntry, Relay, RelayConfig,
    RetryPolicy, Sink, SinkError, WebhookSink,
};
use fence_redis::RedisFence;
use tokio::sync::Notify;

pub use fence_conformance::services::{domain, token, unavailable};
#[allow(unused_imports)]
pub use webhook_server::WebhookServer;

/// A unique key prefix per test.
pub fn unique_prefix(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // Short enough for a Redis key prefix (64 bytes) and a Kafka topic name.
    format!(
        "fo:{test}:{}.{}.{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fence on the shared standalone Redis, or `None` (loud skip) when it is absent.
pub async fn standalone(test: &str) -> Option<RedisFence> {
    let url = redis_support::shared_url()?;
    Some(
        RedisFence::builder()
            .url(&url)
            .prefix(unique_prefix(test))
            .connect()
            .await
            .expect("connect to the shared Redis"),
    )
}

/// A fence on the shared Redis Cluster, or `None` (loud skip) when it is absent.
pub async fn cluster(test: &str) -> Option<RedisFence> {
    let nodes = redis_support::shared_cluster()?;
    Some(
        RedisFence::builder()
            .cluster(nodes)
            .prefix(unique_prefix(test))
            .connect()
            .await
            .expect("connect to the shared Redis Cluster"),
    )
}

/// The kinds the tests use.
pub fn kinds() -> EffectKinds {
    EffectKinds::new()
        .register("send-receipt-email", DestinationRule::HttpUrl)
        .and_then(|k| k.register("charge-card", DestinationRule::HttpUrl))
        .and_then(|k| k.register("enqueue", DestinationRule::Opaque))
        .expect("valid kinds")
}

pub fn outbox(fence: &RedisFence) -> RedisOutbox {
    RedisOutbox::with_config(fence.clone(), OutboxConfig::new(kinds()))
}

pub fn op(name: &str) -> OperationId {
    OperationId::new(name).expect("valid op id")
}

/// Marks `order` with `status` and records one receipt effect to `url`.
pub async fn pay(
    outbox: &RedisOutbox,
    domain: &Domain,
    token: FencingToken,
    op_id: &str,
    url: &str,
    payload: &str,
) -> Result<fence_outbox::redis::Recorded, fence_outbox::OutboxError> {
    let script = OutboxScript::hset();
    let transition = Transition::new(domain.clone(), token, op(op_id))
        .key("order")
        .arg("status")
        .arg(format!("paid by {token}"))
        .effect(Effect::new("send-receipt-email", url, payload.to_owned()));
    outbox.transition(&script, &transition).await
}

/// A relay config with test-sized timings.
pub fn fast_relay(owner: &str) -> RelayConfig {
    RelayConfig::new("test", OwnerId::new(owner).unwrap())
        // Timeouts with room for a loaded 2-core machine: exact attempt counts must not depend
        // on a healthy request answering within a few hundred milliseconds.
        .lease_ttl(Duration::from_millis(4000))
        .poll_interval(Duration::from_millis(20))
        .delivery_timeout(Duration::from_millis(1500))
        .retry(RetryPolicy::new(
            6,
            Duration::from_millis(20),
            Duration::from_millis(100),
        ))
}

pub fn relay(outbox: &RedisOutbox, sink: Arc<dyn Sink>, config: RelayConfig) -> Relay {
    let leases: Arc<dyn LeaseManager> = Arc::new(outbox.fence().leases());
    Relay::new(Arc::new(outbox.clone()), sink, leases, config).expect("valid relay config")
}

pub fn webhook() -> Arc<dyn Sink> {
    Arc::new(
        WebhookSink::new()
            .expect("webhook sink")
            .timeout(Duration::from_millis(1200)),
    )
}

/// Waits until `check` holds on `domain`'s entries, or fails after `limit`.
pub async fn wait_for(
    outbox: &RedisOutbox,
    domains: &[Domain],
    limit: Duration,
    check: impl Fn(&[OutboxEntry]) -> bool,
) -> Vec<OutboxEntry> {
    let started = Instant::now();
    loop {
        let mut all = Vec::new();
        let mut failed = None;
        for d in domains {
            // A restarting server refuses a while: keep polling until the deadline.
            match outbox.entries(d).await {
                Ok(entries) => all.extend(entries),
                Err(error) => failed = Some(error),
            }
        }
        if failed.is_none() && check(&all) {
            return all;
        }
        assert!(
            started.elapsed() < limit,
            "condition not reached within {limit:?}; last error {failed:?}; entries: {all:#?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub fn relay_result(
    outbox: &RedisOutbox,
    sink: Arc<dyn Sink>,
    config: RelayConfig,
) -> Result<Relay, fence_outbox::OutboxError> {
    let leases: Arc<dyn LeaseManager> = Arc::new(outbox.fence().leases());
    Relay::new(Arc::new(outbox.clone()), sink, leases, config)
}

/// Deletes the test relay group's partition-0 lease, as its TTL would.
pub async fn expire_relay_lease(fence: &RedisFence) {
    let lease_domain = fast_relay("x").lease_domain().unwrap();
    // fence-redis keeps a lease at `<prefix>:{<domain>}:lease`.
    let lease_key = fence
        .user_key(&lease_domain, "x")
        .unwrap()
        .replace(":u:x", ":lease");
    fence
        .query(fence_redis::redis::cmd("DEL").arg(&lease_key))
        .await
        .unwrap();
}

/// A sink that delivers, and after `left` successes hangs forever before returning, so the
/// relay can be killed between the delivery and its mark.
pub struct CrashAfterDeliveries {
    inner: Arc<dyn Sink>,
    left: std::sync::atomic::AtomicUsize,
    crashed: Arc<Notify>,
}

impl CrashAfterDeliveries {
    pub fn new(inner: Arc<dyn Sink>, left: usize, crashed: Arc<Notify>) -> Self {
        CrashAfterDeliveries {
            inner,
            left: std::sync::atomic::AtomicUsize::new(left),
            crashed,
        }
    }
}

#[async_trait]
impl Sink for CrashAfterDeliveries {
    async fn deliver(&self, entry: &OutboxEntry) -> Result<(), SinkError> {
        self.inner.deliver(entry).await?;
        if self.left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.crashed.notify_one();
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

/// A sink that pauses inside `deliver` until released, like a relay stuck in GC.
pub struct PausingSink {
    inner: Arc<dyn Sink>,
    entered: Arc<Notify>,
    release: Arc<Notify>,
}

impl PausingSink {
    pub fn new(inner: Arc<dyn Sink>, entered: Arc<Notify>, release: Arc<Notify>) -> Self {
        PausingSink {
            inner,
            entered,
            release,
        }
    }
}

#[async_trait]
impl Sink for PausingSink {
    async fn deliver(&self, entry: &OutboxEntry) -> Result<(), SinkError> {
        self.entered.notify_one();
        self.release.notified().await;
        self.inner.deliver(entry).await
    }
}
