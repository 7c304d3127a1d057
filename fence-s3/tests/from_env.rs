//! `S3FenceBuilder::from_env` against the shared SeaweedFS: static credentials from the
//! `FENCE_S3_*` variables, and (with the `aws-config` feature) the default AWS chain.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::services::{domain as d, put, value_of};
use fence_core::env::Env;
use fence_s3::S3FenceBuilder;
use fence_testkit::s3 as support;

/// Writes and reads one domain through `builder`, under a unique prefix.
async fn round_trip(builder: S3FenceBuilder) {
    let fence = builder
        .prefix(support::unique_prefix("from-env"))
        .connect()
        .await
        .expect("the probe passes on SeaweedFS");
    let domain = d("configured");
    put(&fence, &domain, 3, "from the environment")
        .await
        .unwrap();
    assert_eq!(
        value_of(&fence, &domain).await.as_deref(),
        Some("from the environment")
    );
}

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
    round_trip(S3FenceBuilder::from_env_with(&env).await.unwrap()).await;
}

/// The only test of this binary that sets process variables (tests of one binary share them).
#[cfg(feature = "aws-config")]
#[tokio::test]
async fn credentials_and_region_from_the_default_aws_chain() {
    let Some(endpoint) = support::shared_endpoint() else {
        return;
    };
    // Only the chain's environment step may answer: no profile files, no instance metadata.
    let missing = std::env::temp_dir().join("fence-no-such-aws-file");
    std::env::set_var("AWS_CONFIG_FILE", &missing);
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", &missing);
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    std::env::set_var("AWS_ACCESS_KEY_ID", support::ACCESS_KEY);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", support::SECRET_KEY);
    std::env::set_var("AWS_REGION", "us-east-1");
    let env = Env::from_pairs([
        (fence_s3::env::ENDPOINT, endpoint.as_str()),
        (fence_s3::env::BUCKET, support::BUCKET),
    ]);
    round_trip(S3FenceBuilder::from_env_with(&env).await.unwrap()).await;

    // Wrong keys from the chain are refused by the server: the chain's keys are the ones used.
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "not-the-secret");
    let refused = S3FenceBuilder::from_env_with(&env)
        .await
        .unwrap()
        .connect()
        .await;
    match refused {
        Err(error) => assert!(!error.is_retryable(), "{error}"),
        Ok(_) => panic!("a wrong secret from the AWS chain must be refused"),
    }
}
