//! `S3FenceBuilder::from_env` against the shared SeaweedFS: static credentials from the
//! `FENCE_S3_*` variables (the default AWS chain: `aws_chain.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_core::env::Env;
use fence_s3::S3FenceBuilder;
use fence_testkit::s3 as support;

#[tokio::test]
async fn static_keys_from_the_fence_variables() {
    let Some(endpoint) = support::shared_endpoint() else {
        return;
    };
    let env = Env::from_pairs([
        (fence_s3::env::ENDPOINT, endpoint.as_str()),
        (fence_s3::env::BUCKET, support::BUCKET),
        (fence_s3::env::ACCESS_KEY, support::ACCESS_KEY),
        (fence_s3::env::SECRET_KEY, support::SECRET_KEY),
    ]);
    support::write_and_read_back(S3FenceBuilder::from_env_with(&env).await.unwrap()).await;
}
