//! The environment variables [`MySqlFenceBuilder::from_env`] reads: one set, documented here.
//!
//! | variable | meaning |
//! |---|---|
//! | `FENCE_MYSQL_URL` | `mysql://user[:password]@host:port/database[?ssl-mode=…]` (required) |
//! | `FENCE_MYSQL_DATABASE` | the database of the fence's tables (default `fence`; create them with [`crate::migrate`]) |
//! | `FENCE_MYSQL_MAX_CONNECTIONS` | the pool's size (default 10) |
//! | `FENCE_MYSQL_ACQUIRE_TIMEOUT_MS` | how long a request waits for a connection (default 5000) |
//! | `FENCE_MAX_TOKEN_STEP` | refuse tokens more than this above a domain's mark |
//! | `FENCE_ISSUED_ONLY` | `1`: accept only tokens this database's issuer issued for the domain |
//!
//! `DATABASE_URL` (sqlx's variable) naming another server than `FENCE_MYSQL_URL` is refused:
//! two answers to one question.

use std::str::FromStr;

use fence_core::env::{Env, SqlPoolVariables};
use fence_core::FenceError;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};

use crate::error::{kind_of, BACKEND};
use crate::schema::Database;
use crate::{MySqlFence, MySqlFenceBuilder};

/// The server URL.
pub const URL: &str = "FENCE_MYSQL_URL";
/// The database of the fence's tables.
pub const DATABASE: &str = "FENCE_MYSQL_DATABASE";
/// The pool's size.
pub const MAX_CONNECTIONS: &str = "FENCE_MYSQL_MAX_CONNECTIONS";
/// How long a request waits for a pooled connection, in milliseconds.
pub const ACQUIRE_TIMEOUT_MS: &str = "FENCE_MYSQL_ACQUIRE_TIMEOUT_MS";

/// The database when [`DATABASE`] is unset.
pub const DEFAULT_DATABASE: &str = "fence";

const VARIABLES: SqlPoolVariables = SqlPoolVariables {
    url: URL,
    namespace: DATABASE,
    default_namespace: DEFAULT_DATABASE,
    max_connections: MAX_CONNECTIONS,
    acquire_timeout_ms: ACQUIRE_TIMEOUT_MS,
    product: "MySQL",
    schemes: &["mysql://"],
};

impl MySqlFenceBuilder {
    /// A builder on a pool opened from the process environment (see [`crate::env`]); the
    /// connection is tried here, so an unreachable server fails now, as a backend error of
    /// class `Unavailable`. The tables must exist ([`crate::migrate`]).
    pub async fn from_env() -> Result<Self, FenceError> {
        Self::from_env_with(&Env::process()).await
    }

    /// [`Self::from_env`] from `env`.
    pub async fn from_env_with(env: &Env) -> Result<Self, FenceError> {
        let settings = env.sql_pool(&VARIABLES)?;
        let options =
            MySqlConnectOptions::from_str(&settings.url).map_err(|_| settings.invalid_url())?;
        let database = Database::new(&settings.namespace)?; // checked before any connection
        let pool = MySqlPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.acquire_timeout)
            .connect_with(options)
            .await
            .map_err(|e| FenceError::backend(BACKEND, kind_of(&e), None, e))?;
        let mut builder = MySqlFence::builder(pool, database.name());
        if let Some(step) = settings.max_token_step {
            builder = builder.max_token_step(step);
        }
        if settings.issued_only {
            builder = builder.issued_only();
        }
        Ok(builder)
    }
}

#[cfg(test)]
#[allow(clippy::panic)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use fence_core::InvalidInput;

    async fn refused(pairs: &[(&str, &str)]) -> String {
        match MySqlFenceBuilder::from_env_with(&Env::from_pairs(pairs.iter().copied())).await {
            Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => why,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn bad_settings_are_refused_before_any_connection() {
        assert!(refused(&[]).await.starts_with("no MySQL configured"));
        let url = "mysql://app:s3cret@127.0.0.1:1/db";
        assert_eq!(
            refused(&[(URL, url), ("DATABASE_URL", "mysql://other@h/db")]).await,
            "FENCE_MYSQL_URL and DATABASE_URL are both set and disagree: set one"
        );
        // A DATABASE_URL of another kind is left alone: the connection is tried (and fails).
        let env = Env::from_pairs([
            (URL, url),
            ("DATABASE_URL", "postgres://other@h/db"),
            (ACQUIRE_TIMEOUT_MS, "200"),
        ]);
        assert!(matches!(
            MySqlFenceBuilder::from_env_with(&env).await,
            Err(FenceError::Backend { .. })
        ));
        let why = refused(&[(URL, "postgres://app:s3cret@h/db")]).await;
        assert_eq!(why, "FENCE_MYSQL_URL is not a valid MySQL URL");
        assert!(refused(&[(URL, url), (DATABASE, "Bad-Name")])
            .await
            .contains("database name"));
        assert!(refused(&[(URL, url), (MAX_CONNECTIONS, "0")])
            .await
            .contains("at least 1"));
        assert!(refused(&[(URL, url), ("FENCE_ISSUED_ONLY", "sometimes")])
            .await
            .contains("FENCE_ISSUED_ONLY must be"));
    }
}
