//! `Etcd::from_env` against the shared etcd: the fence it makes carries the bounds the
//! environment set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::services::{domain as d, put, token as t, value_of};
use fence_core::env::Env;
use fence_core::{Fence, FenceError};
use fence_etcd::Etcd;
use fence_testkit::etcd as support;

#[tokio::test]
async fn a_handle_from_the_etcd_variables_makes_bounded_fences() {
    let Some(endpoints) = support::shared_endpoints() else {
        return;
    };
    let prefix = support::unique_prefix("from_env");
    let env = Env::from_pairs([
        (fence_etcd::env::ENDPOINTS, endpoints.join(",")),
        (fence_etcd::env::PREFIX, prefix),
        ("FENCE_MAX_TOKEN_STEP", "10".to_owned()),
    ]);
    let etcd = Etcd::from_env_with(&env).await.unwrap();
    let fence = etcd.fence();
    let domain = d("configured");
    put(&fence, &domain, 3, "from the environment")
        .await
        .unwrap();
    assert_eq!(
        value_of(&fence, &domain).await.as_deref(),
        Some("from the environment")
    );
    assert!(matches!(
        fence.claim(&domain, t(20)).await,
        Err(FenceError::TokenTooFar { .. })
    ));
}
