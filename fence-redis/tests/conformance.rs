//! The whole conformance suite against real Redis: a dedicated standalone server and a
//! dedicated 3-master cluster per scenario (AOF, `appendfsync always`), so the restart scenario
//! can SIGKILL and restart them without disturbing other tests.
#![allow(clippy::expect_used)]

use fence_testkit::redis as support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fence_conformance::{StatePart, StoreHarness};
use fence_core::{BoxError, Domain, Fence, FencedStore, Observed};
use fence_redis::{redis, RedisFence};
use fence_testkit::redis::RawRedis;
use support::{RedisCluster, RedisServer};

/// Races of 10 workers × 200 operations on every backend shape.
const RACE_ROUNDS: usize = 200;

fn fence(build: fence_redis::RedisFenceBuilder) -> Observed<RedisFence> {
    build
        .prefix("conformance")
        .durable(true)
        .max_value_bytes(64 * 1024)
        .build()
        .expect("valid configuration")
}

fn unreachable() -> Arc<dyn FencedStore> {
    // Port 1: nothing listens; a request that reached I/O would fail with a backend error.
    Arc::new(fence(RedisFence::builder().url("redis://127.0.0.1:1")))
}

struct Standalone {
    server: RedisServer,
    fence: Mutex<Observed<RedisFence>>,
}

#[async_trait]
impl StoreHarness for Standalone {
    fn store(&self) -> Arc<dyn FencedStore> {
        Arc::new(self.fence.lock().expect("lock").clone())
    }

    async fn restart(&self) -> Result<bool, BoxError> {
        self.server.kill_and_restart();
        *self.fence.lock().expect("lock") = fence(RedisFence::builder().url(self.server.url()));
        Ok(true)
    }

    fn unreachable_store(&self) -> Option<Arc<dyn FencedStore>> {
        Some(unreachable())
    }

    async fn corrupt(&self, domain: &Domain, part: StatePart) -> Result<bool, BoxError> {
        let fence = self.fence.lock().expect("lock").clone();
        let mut raw = RawRedis::Standalone(fence_testkit::redis::raw(&self.server.url()).await);
        Ok(corrupt(&mut raw, &fence, domain, part).await)
    }

    fn race_rounds(&self) -> usize {
        RACE_ROUNDS
    }
}

/// Overwrites one field of `domain`'s state hash, going around Fence: the mark with a token
/// that is not canonical, or the entry's revision with one that is not a number.
async fn corrupt(raw: &mut RawRedis, fence: &RedisFence, domain: &Domain, part: StatePart) -> bool {
    let (field, value) = match part {
        StatePart::Mark => ("hwm", "007"),
        StatePart::Entry => ("rev", "1e3"),
        _ => return false,
    };
    let mut hset = redis::cmd("HSET");
    hset.arg(fence.state_key(domain)).arg(field).arg(value);
    raw.query(&hset).await;
    true
}

async fn standalone() -> Option<Standalone> {
    let server = RedisServer::start("conformance", &[])?;
    let fence = Mutex::new(fence(RedisFence::builder().url(server.url())));
    Some(Standalone { server, fence })
}

struct Cluster {
    cluster: RedisCluster,
    fence: Observed<RedisFence>,
}

#[async_trait]
impl StoreHarness for Cluster {
    fn store(&self) -> Arc<dyn FencedStore> {
        Arc::new(self.fence.clone())
    }

    /// The same fence goes on after every node was killed and restarted: as an application
    /// would, it retries a read until the cluster answers (within 30 s), and must then find
    /// the cluster again by itself.
    async fn restart(&self) -> Result<bool, BoxError> {
        self.cluster.kill_and_restart();
        let probe = fence_core::Domain::new("conformance-restart-probe")?;
        fence_conformance::wait::until_async(
            "the fence answers after the whole cluster restarted",
            std::time::Duration::from_secs(30),
            || async { self.fence.high_water_mark(&probe).await.is_ok() },
        )
        .await;
        Ok(true)
    }

    fn unreachable_store(&self) -> Option<Arc<dyn FencedStore>> {
        Some(unreachable())
    }

    async fn corrupt(&self, domain: &Domain, part: StatePart) -> Result<bool, BoxError> {
        let mut raw = RawRedis::cluster(self.cluster.urls()).await;
        Ok(corrupt(&mut raw, &self.fence, domain, part).await)
    }

    fn race_rounds(&self) -> usize {
        RACE_ROUNDS
    }
}

async fn cluster() -> Option<Cluster> {
    let cluster = RedisCluster::start("conformance-cluster")?;
    let fence = fence(RedisFence::builder().cluster(cluster.urls()));
    Some(Cluster { cluster, fence })
}

mod standalone {
    fence_conformance::store_conformance!(super::standalone);
}

mod cluster {
    fence_conformance::store_conformance!(super::cluster);
}

#[test]
fn declared_capabilities_are_pinned() {
    use fence_core::{Capabilities, OpIdRetention};
    let caps = fence(RedisFence::builder().url("redis://127.0.0.1:1")).capabilities();
    assert_eq!(
        caps,
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::Window(std::time::Duration::from_secs(
                24 * 60 * 60
            )))
            .with_max_value_bytes(Some(64 * 1024))
            .with_survives_restart(true),
        "a change here changes which conformance scenarios run"
    );
    assert!(caps.write && caps.delete && caps.read && caps.claim && !caps.append);
    assert!(caps.revision_cas && caps.strict_policy && caps.op_id_replay());
}
