//! `MySqlFenceBuilder::from_env` against the shared MariaDB.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::services::{domain as d, put, token as t, value_of};
use fence_core::env::Env;
use fence_core::{BackendErrorKind, Fence, FenceError};
use fence_mysql::MySqlFenceBuilder;
use fence_testkit::mysql as support;

#[tokio::test]
async fn a_fence_from_the_mysql_variables_writes() {
    let Some(url) = support::shared_url() else {
        return;
    };
    let database = support::unique_database("from_env");
    fence_mysql::migrate(&support::pool(&url).await, &database)
        .await
        .unwrap();
    let env = Env::from_pairs([
        (fence_mysql::env::URL, url.as_str()),
        (fence_mysql::env::DATABASE, database.as_str()),
        (fence_mysql::env::MAX_CONNECTIONS, "2"),
        ("FENCE_MAX_TOKEN_STEP", "10"),
    ]);
    let fence = MySqlFenceBuilder::from_env_with(&env)
        .await
        .and_then(MySqlFenceBuilder::build)
        .unwrap();
    assert_eq!(fence.database(), database);
    let domain = d("configured");
    put(&fence, &domain, 3, "from the environment")
        .await
        .unwrap();
    assert_eq!(
        value_of(&fence, &domain).await.as_deref(),
        Some("from the environment")
    );
    // The step from the environment applies: 3 + 10 < 20.
    assert!(matches!(
        fence.claim(&domain, t(20)).await,
        Err(FenceError::TokenTooFar { .. })
    ));
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_its_password_is_not_shown() {
    let env = Env::from_pairs([
        (
            fence_mysql::env::URL,
            "mysql://app:s3cret@127.0.0.1:1/fence",
        ),
        (fence_mysql::env::ACQUIRE_TIMEOUT_MS, "500"),
    ]);
    match MySqlFenceBuilder::from_env_with(&env).await {
        Err(
            error @ FenceError::Backend {
                kind: BackendErrorKind::Unavailable,
                ..
            },
        ) => {
            assert!(!error.to_string().contains("s3cret"), "{error}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
}
