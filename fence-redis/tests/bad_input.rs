//! Bad input and foreign state: typed errors, and nothing overwritten.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_testkit::redis as support;

use fence_conformance::services::every_operation;
use fence_core::{
    BackendErrorKind, Domain, Fence, FenceError, FencedStore, FencingToken, OperationId,
    WriteRequest,
};
use fence_redis::redis::{self, AsyncCommands};
use fence_redis::{RedisFence, RedisFenceError};

async fn raw() -> Option<redis::aio::MultiplexedConnection> {
    let url = support::shared_url()?;
    Some(support::raw(&url).await)
}

fn put(domain: &Domain, token: u64) -> WriteRequest {
    WriteRequest::put(
        domain.clone(),
        FencingToken::new(token).unwrap(),
        "new value",
    )
}

fn state_key(prefix: &str, domain: &str) -> String {
    format!("{prefix}:{{{domain}}}:state")
}

#[tokio::test]
async fn a_key_of_another_redis_type_is_foreign_state_and_left_alone() {
    let (Some(mut raw), Some(url)) = (raw().await, support::shared_url()) else {
        return;
    };
    let prefix = support::unique_prefix("wrongtype");
    let fence = RedisFence::builder()
        .url(url)
        .prefix(&prefix)
        .build()
        .unwrap();
    let domain = Domain::new("orders").unwrap();
    let _: () = raw
        .rpush(state_key(&prefix, "orders"), &["user", "data"])
        .await
        .unwrap();
    for (operation, result) in every_operation(&fence, &domain, 9).await {
        match result {
            Err(FenceError::CorruptState { detail, .. }) => {
                assert!(detail.contains("holds a list"), "{operation}: {detail}")
            }
            other => panic!("{operation}: expected foreign state, got {other:?}"),
        }
    }
    let list: Vec<String> = raw
        .lrange(state_key(&prefix, "orders"), 0, -1)
        .await
        .unwrap();
    assert_eq!(list, ["user", "data"], "the user's list is untouched");
}

#[tokio::test]
async fn a_corrupt_high_water_mark_fails_closed() {
    let (Some(mut raw), Some(url)) = (raw().await, support::shared_url()) else {
        return;
    };
    let prefix = support::unique_prefix("corrupt");
    let fence = RedisFence::builder()
        .url(url)
        .prefix(&prefix)
        .build()
        .unwrap();
    let cases = [
        ("non-numeric", "abc"),
        ("negative", "-5"),
        ("leading-zeros", "007"),
        ("twenty-five-digits", "1234567890123456789012345"),
        ("above-u64", "18446744073709551616"),
        ("empty", ""),
        ("float", "5.0"),
    ];
    for (name, hwm) in cases {
        let key = state_key(&prefix, name);
        let _: () = raw
            .hset_multiple(
                &key,
                &[
                    ("fence", "1"),
                    ("hwm", hwm),
                    ("state", "v"),
                    ("tok", "5"),
                    ("rev", "1"),
                    ("val", "kept"),
                ],
            )
            .await
            .unwrap();
        let domain = Domain::new(name).unwrap();
        for (operation, result) in every_operation(&fence, &domain, 9).await {
            assert!(
                matches!(result, Err(FenceError::CorruptState { .. })),
                "{name} {operation}: {result:?}"
            );
        }
        let (stored_hwm, value): (String, String) = redis::cmd("HMGET")
            .arg(&key)
            .arg("hwm")
            .arg("val")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(
            (stored_hwm.as_str(), value.as_str()),
            (hwm, "kept"),
            "{name}: nothing overwritten"
        );
    }
    // A hash without Fence's format marker is someone else's.
    let _: () = raw
        .hset(state_key(&prefix, "foreign"), "name", "alice")
        .await
        .unwrap();
    let result = fence.write(&put(&Domain::new("foreign").unwrap(), 1)).await;
    assert!(
        matches!(result, Err(FenceError::CorruptState { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn an_op_id_key_of_another_type_fails_closed() {
    let (Some(mut raw), Some(url)) = (raw().await, support::shared_url()) else {
        return;
    };
    let prefix = support::unique_prefix("opkey");
    let fence = RedisFence::builder()
        .url(url)
        .prefix(&prefix)
        .build()
        .unwrap();
    let _: () = raw
        .rpush(format!("{prefix}:{{d}}:op:3:op-1"), "x")
        .await
        .unwrap();
    let request = put(&Domain::new("d").unwrap(), 3).with_op_id(OperationId::new("op-1").unwrap());
    let result = fence.write(&request).await;
    assert!(
        matches!(result, Err(FenceError::CorruptState { .. })),
        "{result:?}"
    );
    assert_eq!(
        fence
            .high_water_mark(&Domain::new("d").unwrap())
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn an_oversized_value_is_refused_before_any_io() {
    let Some(url) = support::shared_url() else {
        return;
    };
    let fence = RedisFence::builder()
        .url(url)
        .prefix(support::unique_prefix("size"))
        .max_value_bytes(1024)
        .build()
        .unwrap();
    fence_conformance::services::oversized_value_is_refused_before_io(
        &fence,
        &Domain::new("big").unwrap(),
        1024,
        None,
    )
    .await;
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_backend_error() {
    let refused = RedisFence::builder()
        .url("redis://127.0.0.1:1")
        .connect()
        .await;
    match refused {
        Err(error @ FenceError::Backend { .. }) => {
            assert!(error.to_string().starts_with("redis failed"), "{error}");
            assert_eq!(error.backend_kind(), Some(BackendErrorKind::Unavailable));
            assert!(error.is_retryable(), "a server that is down may come back");
        }
        other => panic!("{other:?}"),
    }
    // Lazily built: the write fails as a backend error (nothing was sent), never as a guess.
    let lazy = RedisFence::builder()
        .url("redis://127.0.0.1:1")
        .build()
        .unwrap();
    let result = lazy.write(&put(&Domain::new("d").unwrap(), 1)).await;
    assert!(
        matches!(
            result,
            Err(FenceError::Backend {
                kind: BackendErrorKind::Unavailable,
                ..
            })
        ),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_server_that_denies_eval_gives_a_typed_permission_error() {
    let (Some(mut raw), Some(url)) = (raw().await, support::shared_url()) else {
        return;
    };
    let user = format!("fence-noeval-{}", std::process::id());
    let _: () = redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                user.as_str(),
                "reset",
                "on",
                ">pw",
                "~*",
                "+@all",
                "-eval",
                "-evalsha",
            ][..],
        )
        .query_async(&mut raw)
        .await
        .unwrap();
    let restricted = url.replace("redis://", &format!("redis://{user}:pw@"));
    let fence = RedisFence::builder()
        .url(restricted)
        .prefix(support::unique_prefix("acl"))
        .connect()
        .await
        .unwrap();
    let domain = Domain::new("d").unwrap();
    let result = fence.write(&put(&domain, 1)).await;
    let wrong_password = RedisFence::builder()
        .url(
            support::shared_url()
                .unwrap()
                .replace("redis://", &format!("redis://{user}:nope@")),
        )
        .connect()
        .await;
    let _: () = redis::cmd("ACL")
        .arg(&["DELUSER", user.as_str()][..])
        .query_async(&mut raw)
        .await
        .unwrap();
    match &result {
        Err(FenceError::Backend { source, .. }) => {
            let typed = source.downcast_ref::<RedisFenceError>();
            assert!(
                matches!(typed, Some(RedisFenceError::PermissionDenied(_))),
                "{typed:?}"
            );
            assert!(source.to_string().contains("ACL"), "{source}");
        }
        other => panic!("{other:?}"),
    }
    // Every path maps NOPERM the same way, and none of it is retryable.
    for (what, error) in [
        ("script", result.err()),
        ("wrong password", wrong_password.err()),
    ] {
        let error = error.unwrap_or_else(|| panic!("{what} must fail"));
        assert_eq!(
            error.backend_kind(),
            Some(BackendErrorKind::PermissionDenied),
            "{what}: {error:?}"
        );
        assert!(!error.is_retryable(), "{what}: {error}");
    }
}
