//! `S3FenceBuilder::from_env` with the default AWS chain (the `aws-config` feature), against
//! the shared SeaweedFS. Alone in its binary: it sets process variables, which no other test
//! may read meanwhile.
#![cfg(feature = "aws-config")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_core::env::Env;
use fence_s3::S3FenceBuilder;
use fence_testkit::s3 as support;

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
    support::write_and_read_back(S3FenceBuilder::from_env_with(&env).await.unwrap()).await;

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
