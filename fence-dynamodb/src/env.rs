//! The environment variables [`DynamoDb::from_env`] reads: one set, documented here.
//!
//! | variable | meaning |
//! |---|---|
//! | `FENCE_DYNAMODB_TABLE` | the table of Fence's items (required) |
//! | `FENCE_DYNAMODB_NAMESPACE` | the namespace of Fence's items in the table (required: a wrong one would show every domain as unseen) |
//! | `FENCE_DYNAMODB_ENDPOINT` | another endpoint than AWS's (an emulator); else `AWS_ENDPOINT_URL_DYNAMODB`, else `AWS_ENDPOINT_URL`; unset for AWS |
//! | `FENCE_DYNAMODB_REGION` | the region (else the AWS chain's, else `us-east-1` with an endpoint) |
//! | `FENCE_DYNAMODB_ACCESS_KEY`, `FENCE_DYNAMODB_SECRET_KEY` | static credentials (both or neither), `FENCE_DYNAMODB_SESSION_TOKEN` with temporary ones |
//! | `FENCE_MAX_TOKEN_STEP` | fences from [`DynamoDb::fence`] refuse tokens more than this above a domain's mark |
//! | `FENCE_ISSUED_ONLY` | `1`: fences from [`DynamoDb::fence`] accept only tokens the table's counter issued |
//!
//! Without static credentials the client comes from the default AWS chain (the `aws-config`
//! feature): `AWS_ACCESS_KEY_ID`…, `AWS_PROFILE`, web identity (EKS), the ECS and EC2 instance
//! roles. Settings that two tools would each decide are refused when both are set and differ:
//! `FENCE_DYNAMODB_REGION` and `AWS_REGION`, `FENCE_DYNAMODB_ENDPOINT` and
//! `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL`; and `FENCE_DYNAMODB_ACCESS_KEY` with
//! `AWS_ACCESS_KEY_ID` (two credentials). fence-s3 reads its variables by the same rules
//! (`fence-aws`).

use fence_core::env::Env;
use fence_core::{BoundsConfig, FenceError};

use crate::table::{check_namespace, check_table};
use crate::DynamoDb;

/// The table.
pub const TABLE: &str = "FENCE_DYNAMODB_TABLE";
/// The namespace.
pub const NAMESPACE: &str = "FENCE_DYNAMODB_NAMESPACE";
/// Another endpoint than AWS's.
pub const ENDPOINT: &str = "FENCE_DYNAMODB_ENDPOINT";
/// The region.
pub const REGION: &str = "FENCE_DYNAMODB_REGION";
/// A static access key id.
pub const ACCESS_KEY: &str = "FENCE_DYNAMODB_ACCESS_KEY";
/// Its secret access key.
pub const SECRET_KEY: &str = "FENCE_DYNAMODB_SECRET_KEY";
/// The session token of temporary static credentials.
pub const SESSION_TOKEN: &str = "FENCE_DYNAMODB_SESSION_TOKEN";

const VARIABLES: fence_aws::AwsVariables = fence_aws::AwsVariables {
    service: "DynamoDB",
    crate_name: "fence-dynamodb",
    endpoint: ENDPOINT,
    sdk_endpoint: "AWS_ENDPOINT_URL_DYNAMODB",
    region: REGION,
    access_key: ACCESS_KEY,
    secret_key: SECRET_KEY,
    session_token: SESSION_TOKEN,
};

impl DynamoDb {
    /// Fence's items in the table and namespace the process environment names (see
    /// [`crate::env`]), through a client it configures. No I/O: a missing table shows at
    /// the first request.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), fence_core::FenceError> {
    /// // FENCE_DYNAMODB_TABLE=fence-locks FENCE_DYNAMODB_NAMESPACE=payments, and credentials
    /// // from the usual AWS chain (an IAM role).
    /// let dynamodb = fence_dynamodb::DynamoDb::from_env().await?;
    /// let fence = dynamodb.fence();
    /// # Ok(()) }
    /// ```
    pub async fn from_env() -> Result<Self, FenceError> {
        Self::from_env_with(&Env::process()).await
    }

    /// [`Self::from_env`] from `env`. The default AWS chain, when used, reads the process
    /// environment as it always does.
    pub async fn from_env_with(env: &Env) -> Result<Self, FenceError> {
        let table = env.require(TABLE)?;
        let namespace = env.require(NAMESPACE)?;
        check_table(&table)?;
        check_namespace(&namespace)?;
        let fence_bounds = BoundsConfig::new(env.max_token_step()?, env.issued_only()?);
        let aws = fence_aws::sdk_config(env, &VARIABLES).await?;
        let mut dynamodb = DynamoDb::from_sdk_config(&aws.config, table, namespace)?;
        dynamodb.fence_bounds = fence_bounds;
        Ok(dynamodb)
    }
}

#[cfg(test)]
#[allow(clippy::panic)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use fence_core::InvalidInput;

    async fn refused(pairs: &[(&str, &str)]) -> String {
        match DynamoDb::from_env_with(&Env::from_pairs(pairs.iter().copied())).await {
            Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => why,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    const LOCAL: [(&str, &str); 5] = [
        (TABLE, "fence-locks"),
        (NAMESPACE, "payments"),
        (ENDPOINT, "http://127.0.0.1:8042"),
        (ACCESS_KEY, "local"),
        (SECRET_KEY, "s3cret"),
    ];

    #[tokio::test]
    async fn the_variables_name_the_table_namespace_and_bounds() {
        let mut pairs = LOCAL.to_vec();
        pairs.extend([("FENCE_MAX_TOKEN_STEP", "10"), ("FENCE_ISSUED_ONLY", "1")]);
        let dynamodb = match DynamoDb::from_env_with(&Env::from_pairs(pairs)).await {
            Ok(dynamodb) => dynamodb,
            Err(error) => panic!("refused: {error}"),
        };
        assert_eq!(
            (dynamodb.table(), dynamodb.namespace()),
            ("fence-locks", "payments")
        );
        assert_eq!(
            dynamodb.fence_bounds,
            BoundsConfig::new(std::num::NonZeroU64::new(10), true)
        );
        assert!(!format!("{dynamodb:?}").contains("s3cret"));
        let config = dynamodb.client().config();
        assert_eq!(config.region().map(|r| r.as_ref()), Some("us-east-1"));
    }

    #[tokio::test]
    async fn missing_and_conflicting_settings_are_refused_by_name() {
        assert_eq!(refused(&[]).await, "FENCE_DYNAMODB_TABLE is not set");
        assert_eq!(
            refused(&[(TABLE, "fence-locks")]).await,
            "FENCE_DYNAMODB_NAMESPACE is not set"
        );
        let mut two_endpoints = LOCAL.to_vec();
        two_endpoints.push(("AWS_ENDPOINT_URL_DYNAMODB", "http://elsewhere:8000"));
        assert!(refused(&two_endpoints)
            .await
            .starts_with("FENCE_DYNAMODB_ENDPOINT and AWS_ENDPOINT_URL_DYNAMODB"));
        let mut bad_namespace = LOCAL.to_vec();
        bad_namespace[1] = (NAMESPACE, "a/b");
        assert!(refused(&bad_namespace).await.contains("namespace `a/b`"));
        assert!(refused(&[(TABLE, "t1"), (NAMESPACE, "n")])
            .await
            .starts_with("dynamodb table name"));
    }
}
