//! S3-specific behaviour against SeaweedFS: one request per steady-state write, ETag ABA,
//! restarts, races over many keys, multipart with the condition, ambiguous timeouts, and the
//! commit-pointer pattern.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_testkit::s3 as support;

use fence_conformance::services::{assert_fenced, domain as d, put, token as t};

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::config::timeout::TimeoutConfig;
use fence_conformance::race;
use fence_core::{Domain, EqualTokenPolicy, Fence, FencedStore, Observed, Revision, WriteRequest};
use fence_s3::{Immutable, S3Fence};
use support::{shared_fence, WeedServer};

#[tokio::test]
async fn a_steady_state_write_is_one_request() {
    let Some((fence, requests)) = shared_fence("requests").await else {
        return;
    };
    let domain = d("report");
    put(&fence, &domain, 1, "v0").await.unwrap();
    let first = requests.take();
    println!(
        "requests: first write of a new object: {first} (a read answering 404, then the create)"
    );
    assert_eq!(first, 2, "the first write reads (404) then creates");
    for i in 1..=10 {
        put(&fence, &domain, 1, &format!("v{i}")).await.unwrap();
        let count = requests.take();
        println!("requests: steady-state write {i}: {count}");
        assert_eq!(count, 1, "steady-state write {i}");
    }
    // A stale token the cache already shows as stale costs no request at all.
    fence.claim(&domain, t(2)).await.unwrap();
    requests.take();
    assert_fenced(put(&fence, &domain, 1, "stale").await, 1, 2);
    let stale = requests.take();
    println!("requests: stale write refused from the cache: {stale}");
    assert_eq!(stale, 0);

    // A cold fence (empty cache) on an existing object: one ranged read, one conditional write.
    let cold = S3Fence::builder()
        .client(aws_sdk_s3::Client::from_conf(
            support::config(
                &support::shared_endpoint().unwrap(),
                support::ACCESS_KEY,
                support::SECRET_KEY,
            )
            .interceptor(requests.clone())
            .build(),
        ))
        .bucket(support::BUCKET)
        .prefix(fence.prefix())
        .connect()
        .await
        .unwrap();
    requests.take();
    put(&cold, &domain, 2, "from a cold cache").await.unwrap();
    let cold_count = requests.take();
    println!("requests: write from a cold cache on an existing object: {cold_count}");
    assert_eq!(cold_count, 2);
    let (used, bound) = cold.cache_usage();
    assert_eq!((used, bound), (1, fence_s3::DEFAULT_CACHE_CAPACITY));
}

#[tokio::test]
async fn identical_payloads_never_share_an_etag_so_a_stale_cas_fails() {
    let Some((stale, requests)) = shared_fence("aba").await else {
        return;
    };
    let newer = S3Fence::builder()
        .client(support::client(&support::shared_endpoint().unwrap()))
        .bucket(support::BUCKET)
        .prefix(stale.prefix())
        .build()
        .unwrap();
    let domain = d("report");
    put(&stale, &domain, 41, "identical bytes").await.unwrap();
    let etag_41 = head_etag(&stale, &domain).await;
    // The newer owner reads, then writes the SAME payload with 42.
    put(&newer, &domain, 42, "identical bytes").await.unwrap();
    let etag_42 = head_etag(&stale, &domain).await;
    assert_ne!(
        etag_41, etag_42,
        "same payload, different write: the ETags must differ"
    );
    // The stale writer still caches 41's ETag; its If-Match must fail, then it learns it is fenced.
    requests.take();
    assert_fenced(put(&stale, &domain, 41, "identical bytes").await, 41, 42);
    assert_eq!(
        requests.take(),
        2,
        "one refused conditional PUT, one re-read"
    );
    let snapshot = newer.read(&domain).await.unwrap();
    assert_eq!(
        (snapshot.written_by(), snapshot.revision()),
        (Some(t(42)), Some(Revision::new(2)))
    );
}

async fn head_etag(fence: &Observed<S3Fence>, domain: &Domain) -> String {
    let client = support::client(&support::shared_endpoint().unwrap());
    let head = client
        .head_object()
        .bucket(support::BUCKET)
        .key(fence.object_key(domain).unwrap())
        .send()
        .await
        .unwrap();
    head.e_tag().unwrap().to_owned()
}

#[tokio::test]
async fn deleted_objects_keep_the_mark_so_a_stale_recreate_fails() {
    let Some((fence, _)) = shared_fence("delete").await else {
        return;
    };
    let domain = d("invoice");
    put(&fence, &domain, 3, "v").await.unwrap();
    fence
        .write(&WriteRequest::delete(domain.clone(), t(4)))
        .await
        .unwrap();
    // A different process with an empty cache tries to recreate with the old token.
    let zombie = S3Fence::builder()
        .client(support::client(&support::shared_endpoint().unwrap()))
        .bucket(support::BUCKET)
        .prefix(fence.prefix())
        .build()
        .unwrap();
    assert_fenced(put(&zombie, &domain, 3, "zombie").await, 3, 4);
    let snapshot = zombie.read(&domain).await.unwrap();
    assert!(snapshot.value().is_none());
    assert_eq!(snapshot.high_water_mark, Some(t(4)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_on_many_keys_keep_every_final_state_exact() {
    let Some((fence, _)) = shared_fence("race-many").await else {
        return;
    };
    let mut races = tokio::task::JoinSet::new();
    for key in 0..6 {
        let fence = fence.clone();
        races.spawn(async move {
            let domain = Domain::new(format!("key-{key}")).unwrap();
            // Every racer has its own client and cache, as separate processes would.
            let clients = move || -> Arc<dyn FencedStore> { Arc::new(second_instance(&fence)) };
            race::store_race(
                &clients,
                &domain,
                &race::mixed_tokens(3),
                5,
                EqualTokenPolicy::SameOwner,
            )
            .await
        });
    }
    while let Some(result) = races.join_next().await {
        result
            .unwrap()
            .unwrap_or_else(|failure| panic!("{failure}"));
    }
}

#[tokio::test]
async fn multipart_writes_complete_with_the_same_condition() {
    let Some((fence, _)) = shared_fence("multipart").await else {
        return;
    };
    let endpoint = support::shared_endpoint().unwrap();
    let prefix = fence.prefix().to_owned();
    let small_parts = |client| {
        S3Fence::builder()
            .client(client)
            .bucket(support::BUCKET)
            .prefix(&prefix)
            .part_size(5 << 20)
            .multipart_threshold(5 << 20)
            .build()
            .unwrap()
    };
    let writer = small_parts(support::client(&endpoint));
    let other = small_parts(support::client(&endpoint));
    let domain = d("big");
    let big = |fill: u8| vec![fill; (11 << 20) + 123];

    writer
        .write(&WriteRequest::put(domain.clone(), t(1), big(b'a')))
        .await
        .unwrap();
    let read = other.read(&domain).await.unwrap();
    assert_eq!(read.value().map(|v| v.len()), Some((11 << 20) + 123));
    assert!(read.value().unwrap().iter().all(|&b| b == b'a'));

    // Another owner writes in between; the writer's cached ETag is now stale. Its next multipart
    // write must not complete over the newer version: CompleteMultipartUpload carries If-Match.
    other
        .write(&WriteRequest::put(domain.clone(), t(2), "small"))
        .await
        .unwrap();
    let outcome = writer
        .write(&WriteRequest::put(domain.clone(), t(3), big(b'c')))
        .await
        .unwrap();
    assert_eq!(
        outcome.accepted().revision,
        Revision::new(3),
        "the lost race was re-read, not overwritten"
    );
    assert_eq!(outcome.accepted().previous_high_water_mark, Some(t(2)));

    // A stale multipart write is fenced.
    assert_fenced(
        other
            .write(&WriteRequest::put(domain.clone(), t(2), big(b'z')))
            .await,
        2,
        3,
    );
    let read = other.read(&domain).await.unwrap();
    assert!(read.value().unwrap().iter().all(|&b| b == b'c'));
}

#[tokio::test]
async fn commit_pointer_fences_multi_object_state() {
    let Some((fence, _)) = shared_fence("pointer").await else {
        return;
    };
    let domain = d("dataset");
    // The owner writes immutable parts, then the fenced manifest pointing at them.
    for part in ["part-1", "part-2"] {
        let created = fence
            .put_immutable(&domain, part, format!("{part} by owner 8").into())
            .await
            .unwrap();
        assert!(matches!(created, Immutable::Created(_)));
    }
    put(&fence, &domain, 8, "part-1,part-2").await.unwrap();
    // A stale writer can add data objects, never move the manifest to them, nor overwrite a part.
    let zombie_part = fence
        .put_immutable(&domain, "part-z", "zombie".into())
        .await
        .unwrap();
    assert!(matches!(zombie_part, Immutable::Created(_)));
    let again = fence
        .put_immutable(&domain, "part-1", "overwrite?".into())
        .await
        .unwrap();
    assert!(matches!(again, Immutable::AlreadyExists(_)));
    // The stale writer is another process: refused on what SeaweedFS holds (its own read of
    // the object), not on what this client saw.
    let (zombie, requests) = support::another_process(&fence);
    assert_fenced(put(&zombie, &domain, 7, "part-z").await, 7, 8);
    assert!(requests.take() > 0, "the refusal never reached SeaweedFS");
    let manifest = fence.read(&domain).await.unwrap();
    assert_eq!(
        manifest.value().map(|v| v.to_vec()),
        Some(b"part-1,part-2".to_vec())
    );
    let part = fence.get_immutable(&domain, "part-1").await.unwrap();
    assert_eq!(
        part.map(|b| b.to_vec()),
        Some(b"part-1 by owner 8".to_vec())
    );
}

#[tokio::test]
async fn stale_write_after_a_restart_is_still_rejected() {
    let Some(server) = WeedServer::start("restart").await else {
        return;
    };
    let make = |endpoint: &str| {
        S3Fence::builder()
            .client(support::client(endpoint))
            .bucket(support::BUCKET)
            .build()
            .unwrap()
    };
    let fence = make(&server.endpoint());
    let domain = d("report-q3");
    put(&fence, &domain, 7, "draft by A").await.unwrap();
    fence.claim(&domain, t(8)).await.unwrap();
    put(&fence, &domain, 8, "final by B").await.unwrap();
    println!(
        "restart: A wrote with 7, B claimed and wrote with 8 (weed pid {})",
        server.pid()
    );
    server.kill_and_restart().await;
    println!(
        "restart: SeaweedFS killed with SIGKILL and started again (pid {})",
        server.pid()
    );
    let fence = make(&server.endpoint()); // a fresh process: nothing cached
    let stale = put(&fence, &domain, 7, "zombie by A").await;
    println!(
        "restart: A's stale write with 7 -> {}",
        stale
            .as_ref()
            .map_or_else(|e| e.to_string(), |o| format!("{o:?}"))
    );
    assert_fenced(stale, 7, 8);
    let snapshot = fence.read(&domain).await.unwrap();
    assert_eq!(
        snapshot.value().map(|v| v.to_vec()),
        Some(b"final by B".to_vec())
    );
    assert_eq!(
        (snapshot.written_by(), snapshot.high_water_mark),
        (Some(t(8)), Some(t(8)))
    );
}

#[tokio::test]
async fn a_timeout_after_send_is_ambiguous_and_a_retry_never_applies_twice() {
    let Some(server) = WeedServer::start("ambiguous").await else {
        return;
    };
    let config = support::config(&server.endpoint(), support::ACCESS_KEY, support::SECRET_KEY)
        .timeout_config(
            TimeoutConfig::builder()
                // Long enough for start-up and the probe on a loaded machine; the paused
                // write below runs into it.
                .operation_attempt_timeout(Duration::from_secs(3))
                .build(),
        );
    let fence = S3Fence::builder()
        .client(aws_sdk_s3::Client::from_conf(config.build()))
        .bucket(support::BUCKET)
        .connect()
        .await
        .unwrap();
    // A first write, so the paused one is a compare-and-set on an existing object.
    let domain = d("ambiguous");
    put(&fence, &domain, 1, "before").await.unwrap();
    fence_conformance::ambiguity::paused_write_is_ambiguous_and_a_retry_applies_once(
        &fence,
        &domain,
        || server.signal("STOP"),
        || server.signal("CONT"),
        Duration::from_secs(6),
    )
    .await;
}

/// Another process's fence: its own client and its own cache, on the same objects.
fn second_instance(fence: &Observed<S3Fence>) -> Observed<S3Fence> {
    S3Fence::builder()
        .client(support::client(&support::shared_endpoint().unwrap()))
        .bucket(support::BUCKET)
        .prefix(fence.prefix())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_claim_the_cache_would_confirm_is_decided_at_the_resource() {
    let Some((a, _)) = shared_fence("claim-cache").await else {
        return;
    };
    let b = second_instance(&a);
    fence_conformance::services::claims_are_decided_at_the_resource(&a, &b, &d("job-5")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_connection_is_ambiguous_and_both_ways_of_learning_the_outcome_work() {
    let Some(endpoint) = support::shared_endpoint() else {
        return;
    };
    let upstream = endpoint.trim_start_matches("http://").parse().unwrap();
    let proxy = fence_conformance::proxy::TcpProxy::start(upstream)
        .await
        .unwrap();
    let fence = S3Fence::builder()
        .client(support::client(&format!("http://{}", proxy.address())))
        .bucket(support::BUCKET)
        .prefix(support::unique_prefix("cut"))
        .connect()
        .await
        .unwrap();
    fence_conformance::ambiguity::cut_connections_are_ambiguous_and_learnable(
        &fence,
        &proxy,
        &d("cut"),
    )
    .await;
}

#[tokio::test]
async fn the_last_op_ids_are_replayed_by_any_client_and_older_ones_are_new_again() {
    let Some(endpoint) = support::shared_endpoint() else {
        return;
    };
    let prefix = support::unique_prefix("retention");
    let fence = || {
        S3Fence::builder()
            .client(support::client(&endpoint))
            .bucket(support::BUCKET)
            .prefix(&prefix)
            .op_id_retention(2)
            .build()
            .unwrap()
    };
    fence_conformance::retention::store_keeps_the_last_op_ids(&fence(), &fence(), &d("kept")).await;
}

#[tokio::test]
async fn a_retired_domain_leaves_no_objects() {
    let Some((fence, _)) = shared_fence("retire").await else {
        return;
    };
    let domain = d("retired");
    for part in ["part-1", "part-2"] {
        let created = fence
            .put_immutable(&domain, part, "data".into())
            .await
            .unwrap();
        assert!(matches!(created, Immutable::Created(_)), "{created:?}");
    }
    fence_conformance::retirement::retirement_removes_the_domain_and_nothing_else(
        &fence, &fence, None, &domain,
    )
    .await;
    // Gone: creating the same immutable object again creates it.
    let again = fence
        .put_immutable(&domain, "part-1", "data".into())
        .await
        .unwrap();
    assert!(matches!(again, Immutable::Created(_)), "{again:?}");
}
