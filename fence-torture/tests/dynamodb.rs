//! The torture run on DynamoDB (moto in the test command) behind the fault proxy (cuts, delays,
//! black holes; moto is shared and in memory, so neither paused nor restarted here): leases
//! whose expiry a contender judges by an unchanged record version (the workers share one lease
//! manager, and so its sightings), tokens from the item's counter, and the item as the fenced
//! store, each worker through a client of its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_conformance::proxy::TcpProxy;
use fence_core::Domain;
use fence_dynamodb::DynamoDb;
use fence_testkit::dynamodb::{client_with_timeout, shared};
use fence_torture::{engine, ProxyFaults, Subject, Target};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamodb_holds_under_torture() {
    let Some(table) = shared("torture").await else {
        return;
    };
    let endpoint = fence_testkit::dynamodb::shared_endpoint().unwrap();
    let proxy = Arc::new(
        TcpProxy::start(endpoint.trim_start_matches("http://").parse().unwrap())
            .await
            .unwrap(),
    );
    // Requests through the proxy give up after 2 s: a black hole costs no more.
    let through_proxy = || {
        let client = client_with_timeout(
            &format!("http://{}", proxy.address()),
            Duration::from_secs(2),
        );
        DynamoDb::new(client, table.table(), table.namespace()).unwrap()
    };
    let dynamodb = through_proxy();
    let profile = support::profile(support::seed(81), Duration::from_secs(1), true);
    // Each worker its own client, as separate processes: a stale write is refused by
    // DynamoDB, not by the cache of a client that saw the newer one.
    let workers = (0..profile.workers)
        .map(|_| Subject::Register(Arc::new(through_proxy().fence())))
        .collect();
    let faults = ProxyFaults::new(proxy.clone());
    let target = Target::new(
        Arc::new(dynamodb.fence()),
        Arc::new(dynamodb.leases()),
        Domain::new("torture/dynamodb").unwrap(),
    )
    .with_faults(Arc::new(faults))
    .with_clients_per_worker(workers);
    let run = engine::run(&profile, &target).await;
    support::verify("dynamodb", &run, true);
}
