//! The environment variables [`Etcd::from_env`] reads: one set, documented here.
//!
//! | variable | meaning |
//! |---|---|
//! | `FENCE_ETCD_ENDPOINTS` | comma-separated endpoints, `http://host:2379,…` (required) |
//! | `FENCE_ETCD_PREFIX` | the key prefix of Fence's state, e.g. `/fence` (required: a wrong one would show every domain as unseen) |
//! | `FENCE_ETCD_USER`, `FENCE_ETCD_PASSWORD` | credentials on a cluster with authentication (both or neither) |
//! | `FENCE_MAX_TOKEN_STEP` | fences from [`Etcd::fence`] refuse tokens more than this above a domain's mark |
//! | `FENCE_ISSUED_ONLY` | `1`: fences from [`Etcd::fence`] accept only the token of the domain's live lease |

use etcd_client::ConnectOptions;
use fence_core::env::{self, configuration, Env};
use fence_core::{BoundsConfig, FenceError};

use crate::{Etcd, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT};

/// The endpoints.
pub const ENDPOINTS: &str = "FENCE_ETCD_ENDPOINTS";
/// The key prefix.
pub const PREFIX: &str = "FENCE_ETCD_PREFIX";
/// The user name.
pub const USER: &str = "FENCE_ETCD_USER";
/// Its password.
pub const PASSWORD: &str = "FENCE_ETCD_PASSWORD";

impl Etcd {
    /// Connects as the process environment says (see [`crate::env`]), with the default
    /// timeouts ([`DEFAULT_CONNECT_TIMEOUT`], [`DEFAULT_REQUEST_TIMEOUT`]).
    pub async fn from_env() -> Result<Self, FenceError> {
        Self::from_env_with(&Env::process()).await
    }

    /// [`Self::from_env`] from `env`.
    pub async fn from_env_with(env: &Env) -> Result<Self, FenceError> {
        let endpoints = env::list(&env.get(ENDPOINTS).unwrap_or_default());
        if endpoints.is_empty() {
            return Err(configuration(format!(
                "no etcd configured: set {ENDPOINTS}"
            )));
        }
        let prefix = env.require(PREFIX)?;
        let fence_bounds = BoundsConfig::new(env.max_token_step()?, env.issued_only()?);
        let mut options = ConnectOptions::new()
            .with_connect_timeout(DEFAULT_CONNECT_TIMEOUT)
            .with_timeout(DEFAULT_REQUEST_TIMEOUT);
        if let Some((user, password)) = env.both_or_neither(USER, PASSWORD)? {
            options = options.with_user(user, password);
        }
        let mut etcd = Etcd::connect(&endpoints, Some(options), &prefix).await?;
        etcd.fence_bounds = fence_bounds;
        Ok(etcd)
    }
}

#[cfg(test)]
#[allow(clippy::panic)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use fence_core::InvalidInput;

    async fn refused(pairs: &[(&str, &str)]) -> String {
        match Etcd::from_env_with(&Env::from_pairs(pairs.iter().copied())).await {
            Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => why,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn bad_settings_are_refused_before_any_connection() {
        assert!(refused(&[]).await.starts_with("no etcd configured"));
        let endpoints = (ENDPOINTS, "http://127.0.0.1:1");
        assert_eq!(refused(&[endpoints]).await, "FENCE_ETCD_PREFIX is not set");
        assert_eq!(
            refused(&[endpoints, (PREFIX, "/fence"), (USER, "app")]).await,
            "FENCE_ETCD_USER is set without FENCE_ETCD_PASSWORD"
        );
        assert!(refused(&[
            endpoints,
            (PREFIX, "/fence"),
            ("FENCE_MAX_TOKEN_STEP", "-1")
        ])
        .await
        .starts_with("FENCE_MAX_TOKEN_STEP is not valid"));
    }
}
