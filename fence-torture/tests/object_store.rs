//! The torture run through object_store (fence-object-store), each worker its own client and
//! version cache, tokens from leases on the shared Redis:
//! - `InMemory`, one store shared by every worker's client: workers frozen past their lease,
//!   no other faults;
//! - S3 (`AmazonS3`) on a SeaweedFS of the test's own behind the fault proxy: cuts, delays,
//!   black holes, SIGSTOP, kill -9 and restart on its data;
//! - Azure Blob (`MicrosoftAzure`) on an Azurite of the test's own behind the fault proxy:
//!   cuts, delays and black holes. Azurite keeps its blob index in memory and saves it now and
//!   then, so a kill -9 loses acknowledged writes (a property of the emulator, not of Azure):
//!   the server is not killed here, and this run proves nothing about Azure's durability.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_core::{Domain, Observed};
use fence_object_store::object_store::aws::AmazonS3Builder;
use fence_object_store::object_store::{ClientOptions, ObjectStore, RetryConfig};
use fence_object_store::ObjectStoreFence;
use fence_testkit::azurite::{self, AzuriteServer};
use fence_testkit::s3::{self as s3_support, WeedServer};
use fence_torture::{engine, Faults, ProxyFaults, Subject, Target};
use support::Weed;

/// Answers within a second, and no resends by object_store (what `from_env` builds): every
/// fault on a write reaches the fence as a lost answer to resolve (with resends, object_store
/// absorbs most short faults and a refused resend is reported as refused; see the crate's
/// README). A black-holed request is given up after a second instead of waiting minutes.
fn client_limits() -> (ClientOptions, RetryConfig) {
    let options = ClientOptions::new()
        .with_timeout(Duration::from_secs(1))
        .with_connect_timeout(Duration::from_millis(500))
        .with_allow_http(true);
    let retry = RetryConfig {
        max_retries: 0,
        retry_timeout: Duration::from_secs(3),
        ..RetryConfig::default()
    };
    (options, retry)
}

/// Runs the bounded (or full) profile on one domain with `workers` clients built by `client`.
async fn run_on(
    backend: &str,
    seed: u64,
    client: impl Fn() -> Arc<dyn ObjectStore>,
    faults: Option<Arc<dyn Faults>>,
    prefix: &str,
) {
    let Some(redis) = fence_testkit::redis::shared_fence(&format!("torture-{backend}")).await
    else {
        return;
    };
    let fence = |store| -> Observed<ObjectStoreFence> {
        ObjectStoreFence::builder(store)
            .prefix(prefix)
            .build()
            .expect("valid configuration")
    };
    let profile = support::profile(
        support::seed(seed),
        Duration::from_millis(300),
        faults.is_some(),
    );
    // Each worker is its own process: a stale worker learns of a newer write from the store's
    // refusal of its conditional put, not from what a shared client saw.
    let workers = (0..profile.workers)
        .map(|_| Subject::Register(Arc::new(fence(client()))))
        .collect();
    let expect_faults = faults.is_some();
    let mut target = Target::new(
        Arc::new(fence(client())),
        Arc::new(redis.leases()),
        Domain::new(format!("torture/{backend}")).unwrap(),
    );
    if let Some(faults) = faults {
        target = target.with_faults(faults);
    }
    let target = target
        .with_clients_per_worker(workers)
        // A worker's own client still refuses from what it saw itself.
        .with_refusals_from_cache();
    let run = engine::run(&profile, &target).await;
    support::verify(backend, &run, expect_faults);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_memory_through_object_store_holds_under_torture() {
    let store: Arc<dyn ObjectStore> =
        Arc::new(fence_object_store::object_store::memory::InMemory::new());
    run_on(
        "object_store-memory",
        43,
        || store.clone(),
        None,
        "torture/",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_through_object_store_holds_under_torture() {
    let Some(server) = WeedServer::start("torture-object-store").await else {
        return;
    };
    let proxy = support::proxy_before(&server.endpoint()).await;
    let endpoint = format!("http://{}", proxy.address());
    let client = || -> Arc<dyn ObjectStore> {
        let (options, retry) = client_limits();
        Arc::new(
            AmazonS3Builder::new()
                .with_endpoint(&endpoint)
                .with_bucket_name(s3_support::BUCKET)
                .with_region("us-east-1")
                .with_access_key_id(s3_support::ACCESS_KEY)
                .with_secret_access_key(s3_support::SECRET_KEY)
                .with_client_options(options)
                .with_retry(retry)
                .build()
                .expect("an S3 client"),
        )
    };
    let faults = ProxyFaults::new(proxy)
        .with_server(Arc::new(Weed(server)))
        .with_pauses();
    let prefix = s3_support::unique_prefix("torture-object-store");
    run_on(
        "object_store-s3",
        37,
        client,
        Some(Arc::new(faults)),
        &prefix,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn azure_through_object_store_holds_under_network_faults() {
    let Some(server) = AzuriteServer::start("torture-object-store") else {
        return;
    };
    let proxy = support::proxy_before(&server.endpoint()).await;
    let endpoint = format!("http://{}/{}", proxy.address(), azurite::ACCOUNT);
    let client = || -> Arc<dyn ObjectStore> {
        let (options, retry) = client_limits();
        Arc::new(
            azurite::azure_builder(&endpoint)
                .with_client_options(options)
                .with_retry(retry)
                .build()
                .expect("an Azure Blob client"),
        )
    };
    run_on(
        "object_store-azure",
        41,
        client,
        Some(Arc::new(ProxyFaults::new(proxy))),
        "torture/",
    )
    .await;
    drop(server);
}
