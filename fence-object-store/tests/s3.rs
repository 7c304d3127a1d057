//! object_store's Amazon S3 client against real S3 servers: the whole conformance suite on
//! SeaweedFS (a `weed mini` per scenario, so the restart scenario can kill -9 it), objects
//! fenced by fence-s3 and by this crate read and written by the other on the same bucket, and
//! the probe refusing what cannot fence (s3rver, which ignores conditions; LocalFileSystem,
//! which cannot compare-and-swap).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};

use fence_conformance::services::{domain, put};
use fence_core::{BackendErrorKind, Fence, FenceError, FencedStore, FencingToken, WriteRequest};
use fence_object_store::object_store::path::Path;
use fence_object_store::object_store::{self as object_store, ObjectStoreExt};
use fence_object_store::{ObjectStoreFence, ObjectStoreFenceError};
use fence_testkit::s3 as s3_support;
use s3_support::WeedServer;
use support::{amazon, fence, Harness};

const PREFIX: &str = "conformance/";

async fn seaweed() -> Option<Harness> {
    let server = Arc::new(WeedServer::start("object-store-conformance").await?);
    let endpoint = server.endpoint();
    let holder_endpoint = endpoint.clone();
    let restarted = server.clone();
    Some(Harness {
        fence: Mutex::new(fence(amazon(&endpoint), PREFIX)),
        // A new client with an empty version cache: S3 itself decides every stale token.
        holder: Box::new(move || fence(amazon(&holder_endpoint), PREFIX)),
        restart: Some(Box::new(move || {
            let server = restarted.clone();
            Box::pin(async move {
                server.kill_and_restart().await;
                fence(amazon(&server.endpoint()), PREFIX)
            })
        })),
        not_applicable: &[],
        // SeaweedFS makes losers of a contended conditional write wait in ~1 s steps.
        race_writers: 4,
        race_rounds: 6,
    })
}

mod seaweedfs {
    fence_conformance::store_conformance!(super::seaweed);
}

/// fence-s3 and this crate share one format, key layout and decision: an object either one
/// fenced is read, fenced and refused by the other, with the same marks and revisions.
#[tokio::test]
async fn objects_move_between_fence_s3_and_fence_object_store() {
    let Some((s3, _)) = s3_support::shared_fence("interchange").await else {
        return;
    };
    let endpoint = s3_support::shared_endpoint().expect("the shared SeaweedFS");
    let ours = fence(amazon(&endpoint), s3.prefix());
    let d = domain("table/_commit");
    assert_eq!(s3.object_key(&d).unwrap(), ours.object_key(&d).unwrap());

    put(&s3, &d, 5, "manifest-1").await.unwrap();
    let read = ours.read(&d).await.unwrap();
    assert_eq!(read.high_water_mark, Some(FencingToken::new(5).unwrap()));
    assert_eq!(
        read.value().map(|v| v.to_vec()),
        Some(b"manifest-1".to_vec())
    );
    fence_conformance::services::assert_fenced(put(&ours, &d, 4, "stale").await, 4, 5);
    let accepted = put(&ours, &d, 6, "manifest-2").await.unwrap();
    assert_eq!(accepted.accepted().revision.get(), 2);

    let back = s3.read(&d).await.unwrap();
    assert_eq!(
        back.value().map(|v| v.to_vec()),
        Some(b"manifest-2".to_vec())
    );
    fence_conformance::services::assert_fenced(put(&s3, &d, 5, "stale").await, 5, 6);
    s3.write(&WriteRequest::delete(
        d.clone(),
        FencingToken::new(7).unwrap(),
    ))
    .await
    .unwrap();
    let tombstone = ours.read(&d).await.unwrap();
    assert_eq!(
        tombstone.high_water_mark,
        Some(FencingToken::new(7).unwrap())
    );
    assert!(tombstone.value().is_none(), "{tombstone:?}");
}

fn refusal(error: FenceError) -> ObjectStoreFenceError {
    match error {
        FenceError::Backend { kind, source, .. } => {
            assert_eq!(kind, BackendErrorKind::Rejected, "{source}");
            *source
                .downcast::<ObjectStoreFenceError>()
                .unwrap_or_else(|e| panic!("another error: {e}"))
        }
        other => panic!("expected a refusal of the backend, got {other:?}"),
    }
}

/// s3rver accepts create-only and compare-and-swap writes whose condition is false: refused
/// at connect, and no write goes through it.
#[tokio::test]
async fn a_server_that_ignores_conditions_is_refused() {
    let Some(server) = s3_support::S3rver::start() else {
        return;
    };
    // s3rver's own default keys.
    let builder = ObjectStoreFence::builder(support::amazon_with_keys(
        server.endpoint(),
        "S3RVER",
        "S3RVER",
    ));
    match refusal(builder.clone().connect().await.unwrap_err()) {
        ObjectStoreFenceError::ConditionsIgnored { detail, .. } => {
            assert!(detail.contains("create-only"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    // A fence built without the probe runs it before its first write: refused the same way,
    // and the domain's object never written.
    let fence = builder.build().unwrap();
    let refused = put(&fence, &domain("d"), 1, "v").await.unwrap_err();
    assert!(
        matches!(
            refusal(refused),
            ObjectStoreFenceError::ConditionsIgnored { .. }
        ),
        "the first write did not run the probe"
    );
    let key = fence.object_key(&domain("d")).unwrap();
    let head = fence.store().head(&Path::parse(&key).unwrap()).await;
    assert!(
        matches!(head, Err(object_store::Error::NotFound { .. })),
        "a domain's object was written through a store that ignores conditions: {head:?}"
    );
    // Nor anything else under the fence's prefix: the probes removed their objects.
    let left: Vec<_> = futures_util::TryStreamExt::try_collect(
        fence
            .store()
            .list(Some(&Path::from(fence.prefix().trim_end_matches('/')))),
    )
    .await
    .unwrap();
    assert!(left.is_empty(), "objects left under the prefix: {left:?}");
}

/// object_store's LocalFileSystem creates an object only if absent but cannot replace one only
/// if unchanged: refused, naming what it lacks, with nothing written but the probe's object.
#[tokio::test]
async fn a_store_without_compare_and_swap_is_refused() {
    let dir = fence_testkit::data_root("object-store-local").join(fence_testkit::unique_suffix());
    std::fs::create_dir_all(&dir).unwrap();
    let local =
        fence_object_store::object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let fence = ObjectStoreFence::builder(Arc::new(local)).build().unwrap();
    let refused = put(&fence, &domain("d"), 1, "v").await.unwrap_err();
    match refusal(refused) {
        ObjectStoreFenceError::ConditionsUnsupported { detail, .. } => {
            assert!(detail.contains("only if unchanged"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    let fenced_object = dir.join("fence").join("d");
    assert!(!fenced_object.exists(), "a domain's object was written");
}

#[tokio::test]
async fn commit_pointer_and_retirement_on_seaweedfs() {
    let Some(endpoint) = s3_support::shared_endpoint() else {
        fence_conformance::services::unavailable("the shared SeaweedFS (run scripts/test)");
        return;
    };
    let fence = fence(amazon(&endpoint), &s3_support::unique_prefix("pointer"));
    let table = format!("orders-{}", fence_testkit::unique_suffix());
    support::commit_pointer_and_retirement(&fence, &table).await;
}

/// A claim rewrites the object at its version and keeps what fence-s3 wrote with it: content
/// type and user metadata come back from object_store's read as attributes and go out again.
#[tokio::test]
async fn a_claim_keeps_the_content_type_and_metadata_fence_s3_wrote() {
    let Some((s3, _)) = s3_support::shared_fence("interchange-options").await else {
        return;
    };
    let endpoint = s3_support::shared_endpoint().expect("the shared SeaweedFS");
    let ours = fence(amazon(&endpoint), s3.prefix());
    let d = domain("report.csv");
    let csv = fence_s3::ObjectOptions::new()
        .content_type("text/csv")
        .metadata("source", "erp");
    s3.write_with(
        &WriteRequest::put(d.clone(), FencingToken::new(3).unwrap(), "a,b\n"),
        &csv,
    )
    .await
    .unwrap();
    ours.claim(&d, FencingToken::new(4).unwrap()).await.unwrap();
    let head = s3_support::client(&endpoint)
        .head_object()
        .bucket(s3_support::BUCKET)
        .key(s3.object_key(&d).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_type(), Some("text/csv"));
    assert_eq!(
        head.metadata()
            .and_then(|m| m.get("source"))
            .map(String::as_str),
        Some("erp")
    );
    let read = s3.read(&d).await.unwrap();
    assert_eq!(read.high_water_mark, Some(FencingToken::new(4).unwrap()));
    assert_eq!(read.value().map(|v| v.to_vec()), Some(b"a,b\n".to_vec()));
}
