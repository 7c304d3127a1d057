//! Test support for the Redis outbox: fence-testkit's servers and relay helpers, plus the
//! writer-side helpers of this backend.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    // Each test binary uses its own part of this module.
    unused_imports
)]

pub use fence_conformance::services::{domain, token, unavailable};
pub use fence_testkit::outbox::*;
pub use fence_testkit::redis::{
    self as redis_support, shared_cluster_fence as cluster, shared_fence as standalone,
    unique_prefix,
};
pub use fence_testkit::webhook::WebhookServer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fence_core::{Domain, FencingToken, LeaseManager};
use fence_outbox::{Effect, OutboxConfig, OutboxEntry, Relay, RelayConfig, Sink};
use fence_outbox_redis::{OutboxScript, RedisOutbox, RedisTransition};
use fence_redis::RedisFence;

pub fn outbox(fence: &RedisFence) -> RedisOutbox {
    RedisOutbox::with_config(fence.clone(), OutboxConfig::new(kinds()))
}

/// Marks `order` with `status` and records one receipt effect to `url`.
pub async fn pay(
    outbox: &RedisOutbox,
    domain: &Domain,
    token: FencingToken,
    op_id: &str,
    url: &str,
    payload: &str,
) -> Result<fence_outbox_redis::RedisRecorded, fence_outbox::OutboxError> {
    let script = OutboxScript::hset();
    let transition = RedisTransition::new(domain.clone(), token, op(op_id))
        .key("order")
        .arg("status")
        .arg(format!("paid by {token}"))
        .effect(Effect::new("send-receipt-email", url, payload.to_owned()));
    outbox.transition(&script, &transition).await
}

pub fn relay(outbox: &RedisOutbox, sink: Arc<dyn Sink>, config: RelayConfig) -> Relay {
    relay_result(outbox, sink, config).expect("valid relay config")
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
    fence_testkit::redis::expire_lease(fence, &lease_domain).await;
}
