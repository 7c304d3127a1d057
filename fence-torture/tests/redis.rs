//! The torture run on real Redis: a standalone server of the test's own behind the fault proxy
//! (cuts, delays, black holes, SIGSTOP, kill -9 and restart on its AOF), and a Redis Cluster of
//! the test's own whose nodes are all killed and restarted; leases and tokens from Redis.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fence_conformance::proxy::TcpProxy;
use fence_core::Domain;
use fence_redis::RedisFence;
use fence_testkit::redis::{RedisCluster, RedisServer};
use fence_torture::{engine, FaultKind, Faults, ProxyFaults, ServerProcess, Target};

struct Standalone(RedisServer);

impl ServerProcess for Standalone {
    fn kill_and_restart(&self) {
        self.0.kill_and_restart();
    }

    fn signal(&self, signal: &str) {
        self.0.signal(signal);
    }
}

const TTL: Duration = Duration::from_millis(250);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standalone_redis_holds_under_torture() {
    let Some(server) = RedisServer::start("torture", &[]) else {
        return;
    };
    let proxy = Arc::new(
        TcpProxy::start(format!("127.0.0.1:{}", server.port).parse().unwrap())
            .await
            .unwrap(),
    );
    let fence = RedisFence::builder()
        .url(format!("redis://127.0.0.1:{}", proxy.port()))
        .response_timeout(Duration::from_millis(400))
        .connection_timeout(Duration::from_millis(400))
        .connect()
        .await
        .unwrap();
    let faults: Arc<ProxyFaults> = Arc::new(
        ProxyFaults::new(proxy)
            .with_server(Arc::new(Standalone(server)))
            .with_pauses(),
    );
    // Redis answers in microseconds, so a bounded run's few faults can all land between
    // operations (seen: seed 21, 9 cuts, nothing ambiguous). Such a run, if it holds, proves
    // little: the next seed follows on a fresh domain, at most three runs, each checked in full.
    let first = support::seed(21);
    for attempt in 0..3u64 {
        let target = Target::new(
            Arc::new(fence.clone()),
            Arc::new(fence.leases()),
            Domain::new(format!("torture/redis-{attempt}")).unwrap(),
        )
        .with_faults(faults.clone());
        let profile = support::profile(first + attempt, TTL, true);
        let run = engine::run(&profile, &target).await;
        let report = fence_torture::check(&run.history);
        if attempt < 2 && report.holds() && report.ambiguity.total == 0 {
            println!(
                "redis: seed {} made nothing ambiguous; the next seed runs",
                first + attempt
            );
            continue;
        }
        support::verify("redis", &run, true);
        return;
    }
}

/// Kills every node of the cluster and starts them again (their AOF keeps the marks).
struct ClusterRestarts(RedisCluster);

#[async_trait]
impl Faults for ClusterRestarts {
    fn kinds(&self) -> Vec<FaultKind> {
        vec![FaultKind::Restart]
    }

    async fn inject(&self, _: FaultKind) {
        let cluster: &RedisCluster = &self.0;
        tokio::task::block_in_place(|| cluster.kill_and_restart());
    }

    async fn heal(&self, _: FaultKind) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster_holds_under_torture() {
    let Some(cluster) = RedisCluster::start("torture") else {
        return;
    };
    let fence = RedisFence::builder()
        .cluster(cluster.urls())
        .response_timeout(Duration::from_millis(1500))
        .connect()
        .await
        .unwrap();
    let target = Target::new(
        Arc::new(fence.clone()),
        Arc::new(fence.leases()),
        Domain::new("torture/cluster").unwrap(),
    )
    .with_faults(Arc::new(ClusterRestarts(cluster)));
    // A restart of the whole cluster takes seconds: the full profile spaces them out.
    let gap = if support::is_full() {
        (Duration::from_secs(4), Duration::from_secs(8))
    } else {
        (Duration::from_millis(600), Duration::from_millis(1500))
    };
    let profile = support::profile(support::seed(22), TTL, false)
        .faults(gap, (Duration::ZERO, Duration::ZERO));
    let run = engine::run(&profile, &target).await;
    support::verify("redis-cluster", &run, false);
    assert!(
        run.injected.faults.contains_key(&FaultKind::Restart),
        "the cluster was never restarted"
    );
}
