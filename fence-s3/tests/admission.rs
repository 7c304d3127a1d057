//! The bounded step on real SeaweedFS: decided between the read and the conditional write, and
//! confirmed on a fresh read when it was decided on a cached mark.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::num::NonZeroU64;

use fence_conformance::admission;
use fence_conformance::services::{domain, put, unavailable};
use fence_core::{FencedStore, Observed};
use fence_s3::S3Fence;
use fence_testkit::s3::{counted_client, shared_endpoint, unique_prefix, RequestCounter, BUCKET};

const STEP: u64 = 1000;

/// A fence on the shared server under `prefix` (each call: a client of its own, with its own
/// cache), and its request counter.
async fn counted_fence_under(prefix: &str) -> Option<(Observed<S3Fence>, RequestCounter)> {
    let Some(endpoint) = shared_endpoint() else {
        unavailable("SeaweedFS")?;
        return None;
    };
    let (client, counter) = counted_client(&endpoint);
    let fence = S3Fence::builder()
        .client(client)
        .bucket(BUCKET)
        .prefix(prefix)
        .max_token_step(NonZeroU64::new(STEP).unwrap())
        .connect()
        .await
        .expect("probe the shared SeaweedFS");
    counter.take();
    Some((fence, counter))
}

async fn fence_under(prefix: &str) -> Option<Observed<S3Fence>> {
    counted_fence_under(prefix).await.map(|(fence, _)| fence)
}

async fn fence(test: &str) -> Option<Observed<S3Fence>> {
    fence_under(&unique_prefix(test)).await
}

#[tokio::test]
async fn runaway_tokens_are_refused() {
    let Some(fence) = fence("step").await else {
        return;
    };
    admission::runaway_tokens_are_refused(&fence, &domain("step"), STEP).await;
}

#[tokio::test]
async fn a_step_decided_on_a_cached_mark_is_confirmed_fresh() {
    let prefix = unique_prefix("cache");
    let (Some(writer), Some((prefix_twin, twin_requests))) = (
        fence_under(&prefix).await,
        counted_fence_under(&prefix).await,
    ) else {
        return;
    };
    // Two clients of one prefix: the second caches the mark at STEP, then the first moves it.
    let d = domain("cached");
    put(&writer, &d, STEP, "first").await.unwrap();
    put(&prefix_twin, &d, STEP, "cached").await.unwrap();
    put(&writer, &d, 2 * STEP, "moved").await.unwrap();
    // 3 * STEP is too far from the cached mark, within the step of the real one: the twin
    // reads the object afresh (its cache said too far), then writes on what it read.
    twin_requests.take();
    put(&prefix_twin, &d, 3 * STEP, "within the step")
        .await
        .unwrap();
    assert_eq!(
        twin_requests.take(),
        2,
        "one fresh read to confirm the step, one conditional write"
    );
    let stored = writer.read(&d).await.unwrap();
    assert_eq!(
        stored.value().map(|v| v.to_vec()),
        Some(b"within the step".to_vec())
    );
    assert_eq!(
        stored.high_water_mark,
        Some(fence_core::FencingToken::new(3 * STEP).unwrap())
    );
    // And the step bites on the real mark: two steps beyond it is refused.
    assert!(matches!(
        put(&prefix_twin, &d, 5 * STEP, "runaway").await,
        Err(fence_core::FenceError::TokenTooFar { .. })
    ));
}

#[tokio::test]
async fn adopting_with_a_runaway_token_is_refused_before_any_request() {
    let Some((fence, counter)) = counted_fence_under(&unique_prefix("adopt")).await else {
        return;
    };
    let refused = fence
        .adopt(&domain("foreign"), fence_core::FencingToken::MAX)
        .await;
    assert!(
        matches!(
            refused,
            Err(fence_core::FenceError::TokenTooFar { current: None, .. })
        ),
        "{refused:?}"
    );
    assert_eq!(counter.take(), 0, "requests sent for a refused adopt");
}

/// The step bound is this client's configuration: S3 has no place to hold it, so another
/// client of the same objects built without it is not bound (the README says so), and a
/// runaway token it writes then fences the bounded client too. This shows the limit.
#[tokio::test]
async fn the_step_bound_binds_only_the_clients_configured_with_it() {
    let prefix = unique_prefix("unbound");
    let Some(bounded) = fence_under(&prefix).await else {
        return;
    };
    // Another process on the same objects, its fence built without the bound.
    let (unbounded, _) = fence_testkit::s3::another_process(&bounded);
    let d = domain("unbound");
    put(&bounded, &d, 1, "first").await.unwrap();
    assert!(matches!(
        put(&bounded, &d, u64::MAX, "runaway").await,
        Err(fence_core::FenceError::TokenTooFar { .. })
    ));
    // The client without the bound writes u64::MAX: S3 accepts it.
    put(&unbounded, &d, u64::MAX, "runaway").await.unwrap();
    let stored = bounded.read(&d).await.unwrap();
    assert_eq!(stored.high_water_mark, Some(fence_core::FencingToken::MAX));
    // From then on every holder of an issued token is fenced, the bounded client included.
    fence_conformance::services::assert_fenced(put(&bounded, &d, 2, "second").await, 2, u64::MAX);
}
