#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::time::Duration;

use aws_credential_types::provider::SharedCredentialsProvider;
use aws_credential_types::Credentials;
use aws_smithy_runtime_api::client::behavior_version::BehaviorVersion;
use aws_smithy_types::timeout::TimeoutConfig;
use aws_types::region::Region;
use aws_types::SdkConfig;
use fence_core::env::{configuration, Env};
use fence_core::FenceError;

/// The region used with an endpoint when nothing names one (emulators and S3-compatible
/// servers ignore it; the signature needs one).
pub const ENDPOINT_REGION: &str = "us-east-1";

/// How long a connection may take to open: a missing server is reported in seconds.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(3100);

/// The names of one adapter's variables, and the service they configure.
#[derive(Clone, Copy, Debug)]
pub struct AwsVariables {
    /// The service, in errors (`S3`, `DynamoDB`).
    pub service: &'static str,
    /// The adapter crate, in the error naming its `aws-config` feature.
    pub crate_name: &'static str,
    /// An endpoint other than AWS's (an emulator, an S3-compatible server).
    pub endpoint: &'static str,
    /// The SDK's own service endpoint variable (`AWS_ENDPOINT_URL_S3`): refused when it names
    /// another endpoint, as is `AWS_ENDPOINT_URL`.
    pub sdk_endpoint: &'static str,
    /// The region (refused when `AWS_REGION` names another).
    pub region: &'static str,
    /// A static access key id (refused beside `AWS_ACCESS_KEY_ID`: two credentials).
    pub access_key: &'static str,
    /// Its secret access key (both or neither).
    pub secret_key: &'static str,
    /// The session token of temporary static credentials.
    pub session_token: &'static str,
}

/// What the variables configure.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AwsSettings {
    /// The shared configuration, for the service's client (`Config::from(&config)`).
    pub config: SdkConfig,
    /// The endpoint the variables named, if any (an S3 client then addresses paths).
    pub endpoint: Option<String>,
}

/// The configuration `env` describes under `names`: static credentials with a region (the
/// named one, else [`ENDPOINT_REGION`] with an endpoint), else the default AWS chain (the
/// `aws-config` feature) with the named region, if any. The endpoint is the adapter's
/// variable, else the SDK's service variable, else `AWS_ENDPOINT_URL` (as the SDK's own chain
/// reads them, so static keys never send to AWS what the SDK's variables point elsewhere).
/// Settings two tools would each decide are refused when both are set and differ; nothing is
/// contacted.
pub async fn sdk_config(env: &Env, names: &AwsVariables) -> Result<AwsSettings, FenceError> {
    env.agreeing(names.endpoint, names.sdk_endpoint)?;
    env.agreeing(names.endpoint, "AWS_ENDPOINT_URL")?;
    let endpoint = [names.endpoint, names.sdk_endpoint, "AWS_ENDPOINT_URL"]
        .into_iter()
        .find_map(|name| env.get(name));
    let region = env.agreeing(names.region, "AWS_REGION")?;
    let static_keys = env.both_or_neither(names.access_key, names.secret_key)?;
    if static_keys.is_some() {
        env.one_of(&[names.access_key, "AWS_ACCESS_KEY_ID"])?;
    } else if env.get(names.session_token).is_some() {
        return Err(configuration(format!(
            "{} is set without {} and {}",
            names.session_token, names.access_key, names.secret_key
        )));
    }
    let builder = match static_keys {
        Some((access, secret)) => {
            let region = match (region, &endpoint) {
                (Some(region), _) => region,
                (None, Some(_)) => ENDPOINT_REGION.to_owned(),
                (None, None) => {
                    return Err(configuration(format!(
                        "no region for AWS {}: set {} (or AWS_REGION)",
                        names.service, names.region
                    )))
                }
            };
            let credentials = Credentials::new(
                access,
                secret,
                env.get(names.session_token),
                None,
                "fence-env",
            );
            SdkConfig::builder()
                .behavior_version(BehaviorVersion::latest())
                .credentials_provider(SharedCredentialsProvider::new(credentials))
                .region(Region::new(region))
        }
        None => default_chain(names, region, endpoint.is_some())
            .await?
            .to_builder(),
    };
    let mut builder = builder.timeout_config(
        TimeoutConfig::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build(),
    );
    if let Some(endpoint) = &endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    Ok(AwsSettings {
        config: builder.build(),
        endpoint,
    })
}

/// The default AWS chain's configuration, with the region named here if any.
#[cfg(feature = "aws-config")]
async fn default_chain(
    names: &AwsVariables,
    region: Option<String>,
    endpoint: bool,
) -> Result<SdkConfig, FenceError> {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(region) = region {
        loader = loader.region(Region::new(region));
    }
    let shared = loader.load().await;
    if shared.region().is_some() {
        return Ok(shared);
    }
    if !endpoint {
        return Err(configuration(format!(
            "no region: set {} or AWS_REGION, or configure one in your AWS profile",
            names.region
        )));
    }
    Ok(shared
        .to_builder()
        .region(Region::new(ENDPOINT_REGION))
        .build())
}

#[cfg(not(feature = "aws-config"))]
async fn default_chain(
    names: &AwsVariables,
    _region: Option<String>,
    _endpoint: bool,
) -> Result<SdkConfig, FenceError> {
    Err(configuration(format!(
        "set {} and {}, or build {} with its `aws-config` feature for the default AWS credential chain",
        names.access_key, names.secret_key, names.crate_name
    )))
}

#[cfg(test)]
#[allow(clippy::panic)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use fence_core::InvalidInput;

    const NAMES: AwsVariables = AwsVariables {
        service: "Example",
        crate_name: "fence-example",
        endpoint: "X_ENDPOINT",
        sdk_endpoint: "AWS_ENDPOINT_URL_X",
        region: "X_REGION",
        access_key: "X_ACCESS_KEY",
        secret_key: "X_SECRET_KEY",
        session_token: "X_SESSION_TOKEN",
    };

    async fn refused(pairs: &[(&str, &str)]) -> String {
        match sdk_config(&Env::from_pairs(pairs.iter().copied()), &NAMES).await {
            Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => why,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    const KEYS: [(&str, &str); 2] = [("X_ACCESS_KEY", "a"), ("X_SECRET_KEY", "s3cret")];

    #[tokio::test]
    async fn static_keys_take_the_named_region_or_the_endpoints_default() {
        let mut pairs = KEYS.to_vec();
        pairs.push(("X_REGION", "eu-west-1"));
        let named = sdk_config(&Env::from_pairs(pairs), &NAMES).await;
        let named = named.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(named.config.region().map(|r| r.as_ref()), Some("eu-west-1"));
        assert_eq!(named.endpoint, None);
        assert!(named.config.credentials_provider().is_some());

        // The SDK's own variable alone is honoured with static keys too.
        let mut pairs = KEYS.to_vec();
        pairs.push(("AWS_ENDPOINT_URL_X", "http://127.0.0.1:1"));
        let local = sdk_config(&Env::from_pairs(pairs), &NAMES).await;
        let local = local.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(local.endpoint.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(local.config.endpoint_url(), Some("http://127.0.0.1:1"));
        assert_eq!(
            local.config.region().map(|r| r.as_ref()),
            Some(ENDPOINT_REGION)
        );
        assert!(!format!("{local:?}").contains("s3cret"));
    }

    #[tokio::test]
    async fn conflicting_and_incomplete_settings_are_refused_by_name() {
        assert_eq!(
            refused(&[("X_ACCESS_KEY", "a")]).await,
            "X_ACCESS_KEY is set without X_SECRET_KEY"
        );
        let mut two_keys = KEYS.to_vec();
        two_keys.push(("AWS_ACCESS_KEY_ID", "other"));
        assert_eq!(
            refused(&two_keys).await,
            "X_ACCESS_KEY and AWS_ACCESS_KEY_ID are both set: set one"
        );
        let mut two_regions = KEYS.to_vec();
        two_regions.extend([("X_REGION", "eu-west-1"), ("AWS_REGION", "us-east-2")]);
        assert_eq!(
            refused(&two_regions).await,
            "X_REGION and AWS_REGION are both set and disagree: set one"
        );
        for theirs in ["AWS_ENDPOINT_URL_X", "AWS_ENDPOINT_URL"] {
            let mut two_endpoints = KEYS.to_vec();
            two_endpoints.extend([("X_ENDPOINT", "http://a:1"), (theirs, "http://b:2")]);
            assert!(refused(&two_endpoints).await.contains(theirs));
        }
        assert_eq!(
            refused(&[("X_SESSION_TOKEN", "t")]).await,
            "X_SESSION_TOKEN is set without X_ACCESS_KEY and X_SECRET_KEY"
        );
        assert_eq!(
            refused(&KEYS).await,
            "no region for AWS Example: set X_REGION (or AWS_REGION)"
        );
    }
}
