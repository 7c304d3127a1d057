//! The torture run on S3: a SeaweedFS of the test's own behind the fault proxy (cuts, delays,
//! black holes, SIGSTOP, kill -9 and restart on its data), tokens from leases on the shared
//! Redis: Redis elects, S3 fences.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_core::Domain;
use fence_s3::aws_sdk_s3;
use fence_s3::aws_sdk_s3::config::timeout::TimeoutConfig;
use fence_s3::S3Fence;
use fence_testkit::s3::{self as s3_support, WeedServer};
use fence_torture::{engine, ProxyFaults, Subject, Target};
use support::Weed;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_holds_under_torture() {
    let (Some(server), Some(redis)) = (
        WeedServer::start("torture").await,
        fence_testkit::redis::shared_fence("torture-s3").await,
    ) else {
        return;
    };
    let proxy = support::proxy_before(&server.endpoint()).await;
    let prefix = s3_support::unique_prefix("torture");
    // Each worker is its own process: its own client and cache of marks, so a stale worker
    // learns of a newer write from SeaweedFS's refusal of its conditional PUT, not from
    // what a shared client saw.
    let endpoint = format!("http://{}", proxy.address());
    let client = || async {
        let timeouts = TimeoutConfig::builder()
            .operation_attempt_timeout(Duration::from_secs(1))
            .operation_timeout(Duration::from_secs(3))
            .build();
        let config = s3_support::config(&endpoint, s3_support::ACCESS_KEY, s3_support::SECRET_KEY)
            .timeout_config(timeouts)
            .build();
        S3Fence::builder()
            .client(aws_sdk_s3::Client::from_conf(config))
            .bucket(s3_support::BUCKET)
            .prefix(prefix.clone())
            .connect()
            .await
            .unwrap()
    };
    let fence = client().await;
    let profile = support::profile(support::seed(31), Duration::from_millis(300), true);
    let mut workers = Vec::with_capacity(profile.workers);
    for _ in 0..profile.workers {
        workers.push(Subject::Register(Arc::new(client().await)));
    }
    let faults = ProxyFaults::new(proxy)
        .with_server(Arc::new(Weed(server)))
        .with_pauses();
    let target = Target::new(
        Arc::new(fence),
        Arc::new(redis.leases()),
        Domain::new("torture/s3").unwrap(),
    )
    .with_faults(Arc::new(faults))
    .with_clients_per_worker(workers)
    // A worker's own client still refuses from what it saw itself.
    .with_refusals_from_cache();
    let run = engine::run(&profile, &target).await;
    support::verify("s3", &run, true);
}
