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

pub use fence_conformance::relay_kit::*;
pub use fence_conformance::services::{domain, token, unavailable};
pub use fence_conformance::webhook::WebhookServer;
pub use fence_testkit::redis::{
    self as redis_support, shared_cluster_fence as cluster, shared_fence as standalone,
    unique_prefix,
};

use std::sync::Arc;
use std::time::{Duration, Instant};

use fence_core::{Domain, FencingToken, LeaseManager, Observed};
use fence_outbox::{Effect, OutboxConfig, OutboxEntry, Relay, RelayConfig, Sink};
use fence_outbox_redis::{OutboxScript, RedisOutbox, RedisTransition};
use fence_redis::RedisFence;

pub fn outbox(fence: &Observed<RedisFence>) -> RedisOutbox {
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

/// Waits until `check` holds on the entries of `domains`, or fails after `limit`.
pub async fn wait_for(
    outbox: &RedisOutbox,
    domains: &[Domain],
    limit: Duration,
    check: impl Fn(&[OutboxEntry]) -> bool,
) -> Vec<OutboxEntry> {
    let o = RedisUnderTest {
        outbox: outbox.clone(),
    };
    fence_conformance::relay::wait_for(&o, domains, limit, check).await
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
pub async fn expire_relay_lease(fence: &Observed<RedisFence>) {
    let lease_domain = fast_relay("x").lease_domain().unwrap();
    fence_testkit::redis::expire_lease(fence, &lease_domain).await;
}

/// The Redis outbox as fence-testkit's relay contract drives it.
pub struct RedisUnderTest {
    pub outbox: RedisOutbox,
}

/// A fresh outbox on the shared standalone Redis (or the cluster).
pub async fn under_test(test: &str, cluster: bool) -> Option<RedisUnderTest> {
    let test = &test[..test.len().min(20)]; // the key prefix has room for a short name
    let fence = if cluster {
        self::cluster(test).await?
    } else {
        standalone(test).await?
    };
    Some(RedisUnderTest {
        outbox: outbox(&fence),
    })
}

#[async_trait::async_trait]
impl fence_conformance::relay::OutboxUnderTest for RedisUnderTest {
    async fn pay(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: &str,
        url: &str,
        payload: &str,
    ) -> Result<usize, fence_outbox::OutboxError> {
        let recorded = pay(&self.outbox, domain, token, op_id, url, payload).await?;
        Ok(if recorded.duplicate { 0 } else { 1 })
    }

    async fn entries(
        &self,
        domain: &Domain,
    ) -> Result<Vec<OutboxEntry>, fence_outbox::OutboxError> {
        self.outbox.entries(domain).await
    }

    async fn dead_letters(
        &self,
        domain: &Domain,
    ) -> Result<Vec<OutboxEntry>, fence_outbox::OutboxError> {
        self.outbox.dead_letters(domain).await
    }

    async fn discard_dead_letter(
        &self,
        domain: &Domain,
        seq: u64,
    ) -> Result<bool, fence_outbox::OutboxError> {
        self.outbox.discard_dead_letter(domain, seq).await
    }

    fn relay(
        &self,
        sink: Arc<dyn Sink>,
        config: RelayConfig,
    ) -> Result<Relay, fence_outbox::OutboxError> {
        relay_result(&self.outbox, sink, config)
    }

    fn store(&self) -> Result<Arc<dyn fence_outbox::OutboxStore>, fence_outbox::OutboxError> {
        Ok(Arc::new(self.outbox.clone()))
    }

    async fn expire_relay_lease(&self) {
        expire_relay_lease(self.outbox.fence()).await;
    }

    /// Nothing pending or retained: the domain leaves the partition's index, and the sweeps
    /// stop adding it.
    async fn check_purged(&self, _domain: &Domain) {
        let fence = self.outbox.fence();
        let index = fence.prefix().to_owned() + ":outbox:{p0}:index";
        let started = Instant::now();
        loop {
            let value = fence
                .query(fence_redis::redis::cmd("HKEYS").arg(&index))
                .await
                .unwrap();
            let indexed: Vec<String> = fence_redis::redis::from_redis_value(value).unwrap();
            if indexed.is_empty() {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "still indexed: {indexed:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
