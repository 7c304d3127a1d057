//! `DynamoDb::from_env` and `check_permissions` against the shared moto server: the variables
//! reach the server, and each probe is answered by it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::services::{domain as d, put, value_of};
use fence_core::env::Env;
use fence_core::permissions::{Access, PROBE_SEGMENT};
use fence_core::{Fence, FenceError, FencingToken};
use fence_dynamodb::{env, DynamoDb};
use fence_testkit::dynamodb::{raw_item, shared, shared_endpoint};

fn variables(endpoint: &str, table: &str) -> Env {
    Env::from_pairs([
        (env::ENDPOINT, endpoint),
        (env::TABLE, table),
        (env::NAMESPACE, "fence"),
        (env::ACCESS_KEY, "fence-test"),
        (env::SECRET_KEY, "fence-test"),
        ("FENCE_MAX_TOKEN_STEP", "10"),
    ])
}

#[tokio::test]
async fn a_handle_from_the_variables_writes_to_their_table_with_their_bounds() {
    let Some(created) = shared("env").await else {
        return;
    };
    let endpoint = shared_endpoint().unwrap();
    let dynamodb = DynamoDb::from_env_with(&variables(&endpoint, created.table()))
        .await
        .unwrap();
    let fence = dynamodb.fence();
    let domain = d("from-env");
    fence
        .claim(&domain, FencingToken::new(5).unwrap())
        .await
        .unwrap();
    put(&fence, &domain, 5, "configured").await.unwrap();
    // Another client of the table the test created sees the write: the same table.
    let seen = value_of(&*created.fence(), &domain).await;
    assert_eq!(seen.as_deref(), Some("configured"));
    // FENCE_MAX_TOKEN_STEP reached the fence: 5 + 11 is too far.
    let far = put(&fence, &domain, 16, "far").await;
    assert!(
        matches!(far, Err(FenceError::TokenTooFar { .. })),
        "{far:?}"
    );
}

#[tokio::test]
async fn every_probe_is_granted_by_the_server_and_leaves_nothing() {
    let Some(dynamodb) = shared("permissions").await else {
        return;
    };
    let report = dynamodb.check_permissions().await.unwrap();
    let names: Vec<&str> = report.permissions.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names.len(), 4, "{report}");
    assert!(report.all_granted(), "{report}");
    let probe = format!("{}/{PROBE_SEGMENT}", dynamodb.namespace());
    assert_eq!(
        raw_item(&dynamodb, &probe).await,
        None,
        "the probe item was deleted"
    );
}

#[tokio::test]
async fn a_missing_table_is_neither_granted_nor_denied() {
    let Some(dynamodb) = shared("perm_missing").await else {
        return;
    };
    let missing = DynamoDb::new(dynamodb.client().clone(), "ft-no-such-table", "fence").unwrap();
    let report = missing.check_permissions().await.unwrap();
    assert_eq!(report.permissions.len(), 4);
    for permission in &report.permissions {
        match &permission.access {
            Access::Unknown(why) => assert!(why.contains("not found"), "{why}"),
            other => panic!("{}: {other:?}", permission.name),
        }
    }
}
