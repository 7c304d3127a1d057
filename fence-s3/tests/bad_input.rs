//! Bad input and foreign state against SeaweedFS: typed errors, and nothing overwritten.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_testkit::s3 as support;

use fence_conformance::services::every_operation;
use fence_core::{
    BackendErrorKind, Domain, FenceError, FencedStore, FencingToken, InvalidInput, WriteRequest,
};
use fence_s3::{S3Fence, S3FenceError};

fn put(domain: &Domain, token: u64) -> WriteRequest {
    WriteRequest::put(
        domain.clone(),
        FencingToken::new(token).unwrap(),
        "fenced value",
    )
}

async fn raw_put(key: &str, body: &'static [u8]) {
    let client = support::client(&support::shared_endpoint().unwrap());
    support::raw_put(&client, key, body.to_vec()).await;
}

async fn raw_get(key: &str) -> Vec<u8> {
    support::raw_get(&support::client(&support::shared_endpoint().unwrap()), key).await
}

fn source_of(error: &FenceError) -> Option<&S3FenceError> {
    match error {
        FenceError::Backend { source, .. } => source.downcast_ref(),
        _ => None,
    }
}

#[tokio::test]
async fn corrupt_fence_state_fails_closed_and_is_left_alone() {
    let Some((fence, _)) = support::shared_fence("corrupt").await else {
        return;
    };
    let cases: [(&str, &[u8]); 4] = [
        ("thirty-digit-token", b"FENCE-S3/1\nhwm 123456789012345678901234567890\nentry none\nnonce 0000000000000001\n\npayload"),
        ("leading-zero", b"FENCE-S3/1\nhwm 007\nentry none\nnonce 0000000000000001\n\npayload"),
        ("no-end-of-header", b"FENCE-S3/1\nhwm 7\nentry none\nnonce 0000000000000001\n"),
        ("unknown-line", b"FENCE-S3/1\nhwm 7\nentry none\nnonce 0000000000000001\nowner mallory\n\npayload"),
    ];
    for (name, body) in cases {
        let domain = Domain::new(name).unwrap();
        let key = fence.object_key(&domain).unwrap();
        raw_put(&key, body).await;
        for (operation, result) in every_operation(&fence, &domain, 9).await {
            assert!(
                matches!(result, Err(FenceError::CorruptState { .. })),
                "{name} {operation}: {result:?}"
            );
        }
        assert_eq!(raw_get(&key).await, body, "{name}: nothing overwritten");
    }
}

#[tokio::test]
async fn a_foreign_object_fails_closed_until_adopted() {
    let Some((fence, _)) = support::shared_fence("foreign").await else {
        return;
    };
    let domain = Domain::new("legacy-report").unwrap();
    let key = fence.object_key(&domain).unwrap();
    raw_put(&key, b"written by another tool").await;
    match fence.write(&put(&domain, 5)).await {
        Err(FenceError::CorruptState { detail, .. }) => {
            assert!(detail.contains("adopt"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(raw_get(&key).await, b"written by another tool");

    let adopted = fence
        .adopt(&domain, FencingToken::new(5).unwrap())
        .await
        .unwrap();
    assert_eq!(adopted.revision.get(), 1);
    let snapshot = fence.read(&domain).await.unwrap();
    assert_eq!(
        snapshot.value().map(|v| v.to_vec()),
        Some(b"written by another tool".to_vec())
    );
    assert_eq!(snapshot.high_water_mark, FencingToken::new(5).ok());
    assert!(fence
        .write(&put(&domain, 4))
        .await
        .is_err_and(|e| e.is_fenced()));
    fence.write(&put(&domain, 5)).await.unwrap();
    let again = fence.adopt(&domain, FencingToken::new(6).unwrap()).await;
    assert!(
        matches!(
            again.as_ref().map_err(source_of),
            Err(Some(S3FenceError::AlreadyFenced))
        ),
        "{again:?}"
    );
    // A token below the mark is refused as stale first, as Redis's adopt does (`fence adopt`
    // exits 3 on both).
    let stale = fence.adopt(&domain, FencingToken::new(4).unwrap()).await;
    assert!(
        matches!(stale, Err(FenceError::Fenced { presented, current, .. })
            if presented.get() == 4 && current.get() == 5),
        "{stale:?}"
    );
}

#[tokio::test]
async fn an_oversized_object_is_refused_before_any_io() {
    let Some(endpoint) = support::shared_endpoint() else {
        return;
    };
    let (client, requests) = support::counted_client(&endpoint);
    let fence = S3Fence::builder()
        .client(client)
        .bucket(support::BUCKET)
        .prefix(support::unique_prefix("size"))
        .max_value_bytes(1024)
        .build()
        .unwrap();
    let sent = || requests.take();
    fence_conformance::services::oversized_value_is_refused_before_io(
        &fence,
        &Domain::new("big").unwrap(),
        1024,
        Some(&sent),
    )
    .await;
}

#[tokio::test]
async fn wrong_credentials_and_a_missing_bucket_are_typed_errors() {
    let Some(endpoint) = support::shared_endpoint() else {
        return;
    };
    let bad_keys = aws_sdk_s3::Client::from_conf(
        support::config(&endpoint, support::ACCESS_KEY, "not-the-secret").build(),
    );
    let refused = S3Fence::builder()
        .client(bad_keys)
        .bucket(support::BUCKET)
        .prefix(support::unique_prefix("creds"))
        .connect()
        .await;
    let error = refused.expect_err("wrong credentials must not connect");
    assert!(
        matches!(source_of(&error), Some(S3FenceError::AccessDenied { .. })),
        "{error:?}"
    );

    let bucket = format!(
        "fence-missing-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let missing = S3Fence::builder()
        .client(support::client(&endpoint))
        .bucket(&bucket)
        .connect()
        .await;
    let error = missing.expect_err("a missing bucket must not connect");
    assert!(
        matches!(source_of(&error), Some(S3FenceError::NoSuchBucket { .. })),
        "{error:?}"
    );
    assert!(error.to_string().contains(&bucket), "{error}");
}

#[tokio::test]
async fn bad_configuration_is_refused_without_io() {
    let client = support::client("http://127.0.0.1:1");
    let refused = |b: fence_s3::S3FenceBuilder| {
        matches!(
            b.build(),
            Err(FenceError::InvalidInput(InvalidInput::Configuration(_)))
        )
    };
    assert!(refused(S3Fence::builder().bucket("b")));
    assert!(refused(S3Fence::builder().client(client.clone())));
    assert!(refused(
        S3Fence::builder()
            .client(client.clone())
            .bucket("b")
            .part_size(1024)
    ));
    assert!(refused(
        S3Fence::builder()
            .client(client.clone())
            .bucket("b")
            .op_id_retention(1000)
    ));
    assert!(refused(
        S3Fence::builder().client(client).bucket("b").prefix("a\nb")
    ));
}

/// Answers 200 with an ETag to every request, whatever its conditions: what a naive proxy or
/// emulator does.
async fn condition_ignoring_endpoint() -> String {
    support::scripted::endpoint(|_| support::scripted::Reply::ok()).await
}

#[tokio::test]
async fn an_endpoint_that_ignores_conditions_is_refused() {
    let endpoint = condition_ignoring_endpoint().await;
    let fence = S3Fence::builder()
        .client(support::client(&endpoint))
        .bucket("any")
        .build()
        .unwrap();
    let error = fence
        .probe()
        .await
        .expect_err("the probe must refuse this endpoint");
    assert!(
        matches!(
            source_of(&error),
            Some(S3FenceError::ConditionsIgnored { .. })
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("ignores conditional writes"),
        "{error}"
    );
    // Writes refuse too: the probe runs before the first write.
    let write = fence.write(&put(&Domain::new("d").unwrap(), 1)).await;
    assert!(
        matches!(
            write.as_ref().map_err(source_of),
            Err(Some(S3FenceError::ConditionsIgnored { .. }))
        ),
        "{write:?}"
    );
}

fn d(name: &str) -> Domain {
    Domain::new(name).unwrap()
}

fn kind_of(result: &Result<impl std::fmt::Debug, FenceError>) -> Option<BackendErrorKind> {
    result.as_ref().err().and_then(FenceError::backend_kind)
}

#[tokio::test]
async fn a_zero_byte_object_is_corrupt_state_not_a_retryable_error() {
    let Some((fence, _)) = support::shared_fence("empty").await else {
        return;
    };
    let domain = d("empty");
    let key = fence.object_key(&domain).unwrap();
    raw_put(&key, b"").await;
    for (operation, result) in every_operation(&fence, &domain, 9).await {
        match result {
            Err(error @ FenceError::CorruptState { .. }) => assert!(!error.is_retryable()),
            other => panic!("{operation}: a zero-byte object must be CorruptState, got {other:?}"),
        }
    }
    assert_eq!(raw_get(&key).await, b"", "nothing overwritten");
}

#[tokio::test]
async fn prefixes_domains_and_internal_objects_never_share_an_object() {
    let Some(endpoint) = support::shared_endpoint() else {
        return;
    };
    let base = support::unique_prefix("keys");
    let fence = |prefix: String| {
        S3Fence::builder()
            .client(support::client(&endpoint))
            .bucket(support::BUCKET)
            .prefix(prefix)
            .build()
    };
    // `t1` + `2x` and `t12` + `x` would both be `t12x`: such prefixes are refused.
    for bad in ["t1", "t12"] {
        assert!(
            matches!(
                fence(format!("{base}{bad}")),
                Err(FenceError::InvalidInput(InvalidInput::Configuration(_)))
            ),
            "prefix {bad:?} must be refused"
        );
    }
    let t1 = fence(format!("{base}t1/")).unwrap();
    let t12 = fence(format!("{base}t12/")).unwrap();
    t1.write(&put(&d("2x"), 5)).await.unwrap();
    let other = t12.write(&put(&d("x"), 1)).await.unwrap();
    assert_eq!(
        other.accepted().previous_high_water_mark,
        None,
        "t12/ + x has its own, fresh mark"
    );

    // Internal objects live where no domain can reach: after a data object and a probe exist,
    // domains spelled like them are ordinary fresh domains, and `.`/`..` work too.
    let store = fence(format!("{base}ns/")).unwrap();
    store.probe().await.unwrap();
    let created = store.put_immutable(&d("d"), "n", "data".into()).await;
    assert!(
        matches!(created, Ok(fence_s3::Immutable::Created(_))),
        "{created:?}"
    );
    let names = [
        ".data",
        ".fence-probe",
        ".",
        "..",
        "...",
        "!data!d!n",
        "%2E",
        "d",
        "d/n",
    ];
    for name in names {
        let written = store
            .write(&WriteRequest::put(
                d(name),
                FencingToken::new(3).unwrap(),
                name,
            ))
            .await
            .unwrap_or_else(|e| panic!("domain {name:?}: {e}"));
        assert_eq!(
            written.accepted().previous_high_water_mark,
            None,
            "{name:?}"
        );
    }
    for name in names {
        let snapshot = store.read(&d(name)).await.unwrap();
        assert_eq!(
            snapshot.value().map(|v| v.to_vec()),
            Some(name.as_bytes().to_vec()),
            "{name:?} reads back its own value"
        );
    }
    assert_eq!(
        store.get_immutable(&d("d"), "n").await.unwrap().as_deref(),
        Some(&b"data"[..])
    );
    assert!(matches!(
        store.immutable_key(&d("d"), ""),
        Err(FenceError::InvalidInput(_))
    ));
}

#[tokio::test]
async fn keys_past_the_endpoint_limits_are_invalid_input_before_any_request() {
    let Some(endpoint) = support::shared_endpoint() else {
        return;
    };
    let (client, requests) = support::counted_client(&endpoint);
    let prefix = support::unique_prefix("long");
    let fence = S3Fence::builder()
        .client(client.clone())
        .bucket(support::BUCKET)
        .prefix(&prefix)
        .connect()
        .await
        .unwrap();
    requests.take();
    let wide = d(&"é".repeat(128)); // 256 bytes, 768 escaped
    for (operation, result) in every_operation(&fence, &wide, 1).await {
        match result {
            Err(FenceError::InvalidInput(InvalidInput::KeyTooLong {
                domain,
                len: 768,
                max: 255,
                ..
            })) => assert_eq!(domain, wide),
            other => panic!("{operation}: expected KeyTooLong, got {other:?}"),
        }
    }
    assert_eq!(requests.take(), 0, "refused before any request");
    // The default limit is SeaweedFS's real one: 255 bytes work, 256 are refused by the server.
    fence.write(&put(&d(&"a".repeat(255)), 1)).await.unwrap();
    let lax = S3Fence::builder()
        .client(client)
        .bucket(support::BUCKET)
        .prefix(&prefix)
        .key_limits(4096, 4096)
        .build()
        .unwrap();
    let refused = lax.write(&put(&d(&"a".repeat(256)), 1)).await;
    assert_eq!(
        kind_of(&refused),
        Some(BackendErrorKind::Rejected),
        "{refused:?}"
    );
    assert!(!refused.is_err_and(|e| e.is_retryable()));
}

#[tokio::test]
async fn every_error_class_says_whether_a_retry_can_help() {
    let Some(endpoint) = support::shared_endpoint() else {
        return;
    };
    let builder = |client| {
        S3Fence::builder()
            .client(client)
            .bucket(support::BUCKET)
            .prefix(support::unique_prefix("classes"))
    };
    let check = |what: &str, result: Result<(), FenceError>, kind, retryable| {
        let error = result.expect_err(what);
        assert_eq!(error.backend_kind(), Some(kind), "{what}: {error:?}");
        assert_eq!(error.is_retryable(), retryable, "{what}: {error}");
    };
    let denied = builder(aws_sdk_s3::Client::from_conf(
        support::config(&endpoint, support::ACCESS_KEY, "not-the-secret").build(),
    ))
    .connect()
    .await
    .map(|_| ());
    check(
        "access denied",
        denied,
        BackendErrorKind::PermissionDenied,
        false,
    );
    let missing = builder(support::client(&endpoint))
        .bucket("fence-no-such-bucket-anywhere")
        .connect()
        .await
        .map(|_| ());
    check("missing bucket", missing, BackendErrorKind::NotFound, false);
    let nobody = builder(support::client("http://127.0.0.1:1"))
        .connect()
        .await
        .map(|_| ());
    check(
        "refused connection",
        nobody,
        BackendErrorKind::Unavailable,
        true,
    );
    let ignoring = builder(support::client(&condition_ignoring_endpoint().await))
        .connect()
        .await
        .map(|_| ());
    check(
        "conditions ignored",
        ignoring,
        BackendErrorKind::Rejected,
        false,
    );

    // Lost compare-and-sets: B moves the object under A's cache, and A may try only once.
    let prefix = support::unique_prefix("contention");
    let a = builder(support::client(&endpoint))
        .prefix(&prefix)
        .max_attempts(1)
        .build()
        .unwrap();
    let b = builder(support::client(&endpoint))
        .prefix(&prefix)
        .build()
        .unwrap();
    let domain = d("contended");
    a.write(&put(&domain, 1)).await.unwrap();
    b.write(&put(&domain, 1)).await.unwrap();
    let lost = a.write(&put(&domain, 1)).await.map(|_| ());
    check(
        "conflicts exhausted",
        lost,
        BackendErrorKind::Contention,
        false,
    );
}
