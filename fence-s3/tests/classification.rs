//! How every S3 answer is classified, against a scripted loopback endpoint (real servers cannot
//! be made to answer 409, 500 or 503 on demand), and a capability probe against endpoints that
//! honour only one of the two conditions. Fencing itself is tested against SeaweedFS.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_testkit::s3 as support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use fence_conformance::services::{domain as d, put};
use fence_core::{BackendErrorKind, FenceError, Observed};
use fence_s3::{S3Fence, S3FenceError};
use support::scripted::{endpoint, Reply, Request};

/// How an honest server answers the capability probe; `None` for other requests.
fn honest_probe(request: &Request, created: &AtomicBool) -> Option<Reply> {
    if request.method == "HEAD" && !request.target.contains("probe") {
        return Some(Reply::ok()); // HeadBucket
    }
    if !request.target.contains("probe") {
        return None;
    }
    Some(match request.method.as_str() {
        "PUT" if request.has_header("if-none-match") => {
            if created.swap(true, Ordering::SeqCst) {
                Reply::error(412, "PreconditionFailed")
            } else {
                Reply::ok()
            }
        }
        "PUT" if request.has_header("if-match") => Reply::error(412, "PreconditionFailed"),
        "DELETE" => Reply {
            status: 204,
            headers: Vec::new(),
            body: String::new(),
        },
        _ => Reply::ok(),
    })
}

/// A fence on an endpoint that passes the probe, reads the domain's object as absent, and
/// answers every write of it with `put(request, n)` (`n` counts the writes from 0).
async fn fence_answering(
    put_reply: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static,
) -> Observed<S3Fence> {
    let created = AtomicBool::new(false);
    let puts = Arc::new(AtomicUsize::new(0));
    let url = endpoint(move |request| {
        if let Some(reply) = honest_probe(request, &created) {
            return reply;
        }
        match request.method.as_str() {
            "PUT" => put_reply(request, puts.fetch_add(1, Ordering::SeqCst)),
            _ => Reply::error(404, "NoSuchKey"),
        }
    })
    .await;
    S3Fence::builder()
        .client(support::client(&url))
        .bucket(support::BUCKET)
        .max_attempts(3)
        .build()
        .unwrap()
}

fn source(error: &FenceError) -> Option<&S3FenceError> {
    match error {
        FenceError::Backend { source, .. } | FenceError::Ambiguous { source, .. } => {
            source.downcast_ref()
        }
        _ => None,
    }
}

#[tokio::test]
async fn every_status_code_is_classified_as_documented() {
    let expect = |what: &str, result: Result<(), FenceError>, kind: Option<BackendErrorKind>| {
        let error = result.expect_err(what);
        match kind {
            Some(kind) => assert_eq!(error.backend_kind(), Some(kind), "{what}: {error:?}"),
            None => assert!(
                matches!(error, FenceError::Ambiguous { .. }),
                "{what}: expected ambiguous, got {error:?}"
            ),
        }
        assert_eq!(
            error.is_retryable(),
            matches!(kind, None | Some(BackendErrorKind::Unavailable)),
            "{what}: {error}"
        );
        error
    };
    let write =
        |fence: Observed<S3Fence>| async move { put(&fence, &d("d"), 1, "v").await.map(|_| ()) };

    // A 5xx after the request was sent: it may have been applied.
    let fence = fence_answering(|_, _| Reply::error(500, "InternalError")).await;
    expect("500", write(fence).await, None);
    // 503 SlowDown: nothing was done; retried with backoff, then reported as unavailable.
    let fence = fence_answering(|_, _| Reply::error(503, "SlowDown")).await;
    expect(
        "503 every time",
        write(fence).await,
        Some(BackendErrorKind::Unavailable),
    );
    let fence = fence_answering(|_, n| match n {
        0 => Reply::error(503, "SlowDown"),
        _ => Reply::ok(),
    })
    .await;
    write(fence)
        .await
        .expect("503 once, then retried and applied");
    // 409 ConditionalRequestConflict: retried, and after max_attempts it is contention.
    let fence = fence_answering(|_, _| Reply::error(409, "ConditionalRequestConflict")).await;
    let error = expect(
        "409 every time",
        write(fence).await,
        Some(BackendErrorKind::Contention),
    );
    assert!(
        matches!(
            source(&error),
            Some(S3FenceError::TooManyConflicts { attempts: 3 })
        ),
        "{error:?}"
    );
    // 412 on every attempt: lost every race.
    let fence = fence_answering(|_, _| Reply::error(412, "PreconditionFailed")).await;
    expect(
        "412 every time",
        write(fence).await,
        Some(BackendErrorKind::Contention),
    );
    // Refusals no retry can cure.
    let fence = fence_answering(|_, _| Reply::error(403, "AccessDenied")).await;
    expect(
        "403",
        write(fence).await,
        Some(BackendErrorKind::PermissionDenied),
    );
    let fence = fence_answering(|_, _| Reply::error(400, "KeyTooLongError")).await;
    expect("400", write(fence).await, Some(BackendErrorKind::Rejected));
    let fence = fence_answering(|_, _| Reply::error(404, "NoSuchBucket")).await;
    expect(
        "404 NoSuchBucket",
        write(fence).await,
        Some(BackendErrorKind::NotFound),
    );

    // 404 on `If-Match` (AWS, when the object was deleted meanwhile): re-read, then created.
    let fence = fence_answering(|request, _| {
        if request.has_header("if-match") {
            Reply::error(404, "NoSuchKey")
        } else {
            Reply::ok()
        }
    })
    .await;
    put(&fence, &d("d"), 1, "first").await.expect("created");
    put(&fence, &d("d"), 1, "second")
        .await
        .expect("a 404 on If-Match re-reads and writes again");
}

#[tokio::test]
async fn an_endpoint_that_honours_only_one_condition_is_refused() {
    // If-None-Match honoured, If-Match ignored: a stale compare-and-set would succeed.
    let created = AtomicBool::new(false);
    let ignores_if_match = endpoint(move |request| {
        if request.method == "PUT" && request.has_header("if-match") {
            return Reply::ok();
        }
        honest_probe(request, &created).unwrap_or_else(Reply::ok)
    })
    .await;
    // If-Match honoured, If-None-Match ignored: two creators would both win.
    let ignores_if_none_match = endpoint(move |request| {
        if request.method == "PUT" && request.has_header("if-match") {
            return Reply::error(412, "PreconditionFailed");
        }
        Reply::ok()
    })
    .await;
    for (what, url, detail) in [
        ("If-Match ignored", ignores_if_match, "If-Match"),
        (
            "If-None-Match ignored",
            ignores_if_none_match,
            "If-None-Match",
        ),
    ] {
        let fence = S3Fence::builder()
            .client(support::client(&url))
            .bucket(support::BUCKET)
            .build()
            .unwrap();
        let error = fence.probe().await.expect_err(what);
        assert!(
            matches!(source(&error), Some(S3FenceError::ConditionsIgnored { .. })),
            "{what}: {error:?}"
        );
        assert!(error.to_string().contains(detail), "{what}: {error}");
        assert!(!error.is_retryable(), "{what}");
        // Nothing is ever written through it.
        let write = put(&fence, &d("d"), 1, "v").await;
        assert!(
            matches!(write, Err(FenceError::Backend { .. })),
            "{what}: {write:?}"
        );
    }
}
