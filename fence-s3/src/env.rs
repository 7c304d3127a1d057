//! The environment variables [`S3FenceBuilder::from_env`] reads: one set, documented here.
//!
//! | variable | meaning |
//! |---|---|
//! | `FENCE_S3_BUCKET` | the bucket (required) |
//! | `FENCE_S3_PREFIX` | key prefix of the fenced objects (default `fence/`) |
//! | `FENCE_S3_KEY_LAYOUT` | `escaped` (default) or `verbatim` (see [`KeyLayout`](crate::KeyLayout)) |
//! | `FENCE_S3_ENDPOINT` | an S3-compatible server's endpoint (path-style addressing); else `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`; unset for AWS |
//! | `FENCE_S3_REGION` | the region (else the AWS chain's, else `us-east-1` for an endpoint) |
//! | `FENCE_S3_ACCESS_KEY`, `FENCE_S3_SECRET_KEY` | static credentials (both or neither), `FENCE_S3_SESSION_TOKEN` with temporary ones |
//! | `FENCE_MAX_TOKEN_STEP` | refuse tokens more than this above an object's mark |
//!
//! Without static credentials the client comes from the default AWS chain (the `aws-config`
//! feature): `AWS_ACCESS_KEY_ID`…, `AWS_PROFILE` with keys or a role to assume, web identity
//! (EKS), the ECS and EC2 instance roles. SSO and `credential_process` profiles need
//! aws-config's `sso` and `credentials-process` features, which fence-s3 does not turn on: build
//! your own client with them (`S3FenceBuilder::sdk_config`). Settings that two tools would each decide are refused when both are set and differ:
//! `FENCE_S3_REGION` and `AWS_REGION`, `FENCE_S3_ENDPOINT` and `AWS_ENDPOINT_URL_S3` /
//! `AWS_ENDPOINT_URL`; and `FENCE_S3_ACCESS_KEY` with `AWS_ACCESS_KEY_ID` (two credentials).
//! `FENCE_ISSUED_ONLY` is refused: S3 cannot see an issuer.

use fence_core::env::Env;
use fence_core::FenceError;
use fence_objects::settings::{apply_env, SettingNames};

use crate::S3FenceBuilder;

/// The bucket.
pub const BUCKET: &str = "FENCE_S3_BUCKET";
/// The key prefix.
pub const PREFIX: &str = "FENCE_S3_PREFIX";
/// `escaped` or `verbatim`.
pub const KEY_LAYOUT: &str = "FENCE_S3_KEY_LAYOUT";
/// An S3-compatible endpoint.
pub const ENDPOINT: &str = "FENCE_S3_ENDPOINT";
/// The region.
pub const REGION: &str = "FENCE_S3_REGION";
/// A static access key id.
pub const ACCESS_KEY: &str = "FENCE_S3_ACCESS_KEY";
/// Its secret access key.
pub const SECRET_KEY: &str = "FENCE_S3_SECRET_KEY";
/// The session token of temporary static credentials.
pub const SESSION_TOKEN: &str = "FENCE_S3_SESSION_TOKEN";

/// The variables' names, for the reading fence-dynamodb shares ([`fence_aws`]).
const VARIABLES: fence_aws::AwsVariables = fence_aws::AwsVariables {
    service: "S3",
    crate_name: "fence-s3",
    endpoint: ENDPOINT,
    sdk_endpoint: "AWS_ENDPOINT_URL_S3",
    region: REGION,
    access_key: ACCESS_KEY,
    secret_key: SECRET_KEY,
    session_token: SESSION_TOKEN,
};

impl S3FenceBuilder {
    /// A builder configured from the process environment: see [`crate::env`] for the
    /// variables. Settings made afterwards on the builder override them.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), fence_core::FenceError> {
    /// // FENCE_S3_BUCKET=reports, and credentials from the usual AWS chain (an IAM role).
    /// let fence = fence_s3::S3FenceBuilder::from_env().await?.connect().await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_env() -> Result<Self, FenceError> {
        Self::from_env_with(&Env::process()).await
    }

    /// A builder configured from `env` (see [`Self::from_env`]). The default AWS chain, when
    /// used, reads the process environment as it always does.
    pub async fn from_env_with(env: &Env) -> Result<Self, FenceError> {
        env.refuse_issued_only("S3")?;
        let bucket = env.require(BUCKET)?;
        let config = client_config(env).await?;
        let builder = S3FenceBuilder::default()
            .client(aws_sdk_s3::Client::from_conf(config))
            .bucket(bucket);
        let names = SettingNames {
            prefix: PREFIX,
            key_layout: KEY_LAYOUT,
        };
        apply_env(env, names, builder)
    }
}

fence_objects::object_fence_builder!(S3FenceBuilder);

/// The S3 client configuration the variables describe (endpoint, region, credentials: static
/// ones, else the default AWS chain), for your own plain S3 clients beside the fence.
pub async fn client_config(env: &Env) -> Result<aws_sdk_s3::Config, FenceError> {
    let aws = fence_aws::sdk_config(env, &VARIABLES).await?;
    let config = aws_sdk_s3::config::Builder::from(&aws.config);
    // S3-compatible servers are addressed by path, not by a bucket's own host name.
    Ok(config.force_path_style(aws.endpoint.is_some()).build())
}

#[cfg(test)]
#[allow(clippy::panic)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use fence_core::InvalidInput;

    async fn refused(pairs: &[(&str, &str)]) -> String {
        match S3FenceBuilder::from_env_with(&Env::from_pairs(pairs.iter().copied())).await {
            Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => why,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    const LOCAL: [(&str, &str); 4] = [
        (BUCKET, "reports"),
        (ENDPOINT, "http://127.0.0.1:8333"),
        (ACCESS_KEY, "access"),
        (SECRET_KEY, "s3cret"),
    ];

    #[tokio::test]
    async fn static_credentials_and_an_endpoint_build_a_fence() {
        let mut pairs = LOCAL.to_vec();
        pairs.extend([(PREFIX, "fenced/"), (KEY_LAYOUT, "verbatim")]);
        let built = S3FenceBuilder::from_env_with(&Env::from_pairs(pairs))
            .await
            .and_then(S3FenceBuilder::build);
        let fence = match built {
            Ok(fence) => fence,
            Err(error) => panic!("refused: {error}"),
        };
        assert_eq!(fence.bucket(), "reports");
        let key = fence
            .object_key(&fence_core::Domain::new("sales/2026").unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(key.ok().as_deref(), Some("fenced/sales/2026"));
        assert!(!format!("{fence:?}").contains("s3cret"));
    }

    #[tokio::test]
    async fn conflicting_and_incomplete_settings_are_refused() {
        assert_eq!(refused(&[]).await, "FENCE_S3_BUCKET is not set");
        assert_eq!(
            refused(&[(BUCKET, "b"), (ACCESS_KEY, "a")]).await,
            "FENCE_S3_ACCESS_KEY is set without FENCE_S3_SECRET_KEY"
        );
        let mut two_keys = LOCAL.to_vec();
        two_keys.push(("AWS_ACCESS_KEY_ID", "other"));
        assert_eq!(
            refused(&two_keys).await,
            "FENCE_S3_ACCESS_KEY and AWS_ACCESS_KEY_ID are both set: set one"
        );
        let mut two_regions = LOCAL.to_vec();
        two_regions.extend([(REGION, "eu-west-1"), ("AWS_REGION", "us-east-2")]);
        assert_eq!(
            refused(&two_regions).await,
            "FENCE_S3_REGION and AWS_REGION are both set and disagree: set one"
        );
        let mut two_endpoints = LOCAL.to_vec();
        two_endpoints.push(("AWS_ENDPOINT_URL_S3", "http://elsewhere:9000"));
        assert!(refused(&two_endpoints).await.contains("disagree"));
        let mut layout = LOCAL.to_vec();
        layout.push((KEY_LAYOUT, "flat"));
        assert!(refused(&layout).await.contains("escaped"));
        let mut issued = LOCAL.to_vec();
        issued.push(("FENCE_ISSUED_ONLY", "1"));
        assert!(refused(&issued).await.contains("S3 cannot see an issuer"));
        assert!(refused(&[(BUCKET, "b"), (SESSION_TOKEN, "t")])
            .await
            .contains("FENCE_S3_SESSION_TOKEN is set without"));
        assert!(
            refused(&[(BUCKET, "b"), (ACCESS_KEY, "a"), (SECRET_KEY, "s")])
                .await
                .starts_with("no region for AWS S3")
        );
    }
}
