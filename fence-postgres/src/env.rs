//! The environment variables [`crate::PostgresFenceBuilder::from_env`] reads: one set, documented here.
//!
//! | variable | meaning |
//! |---|---|
//! | `FENCE_POSTGRES_URL` | `postgres://user[:password]@host:port/database[?sslmode=…]` (required) |
//! | `FENCE_POSTGRES_SCHEMA` | the schema of the fence's tables (default `fence`; create them with [`crate::migrate`]) |
//! | `FENCE_POSTGRES_MAX_CONNECTIONS` | the pool's size (default 10) |
//! | `FENCE_POSTGRES_ACQUIRE_TIMEOUT_MS` | how long a request waits for a connection (default 5000) |
//! | `FENCE_MAX_TOKEN_STEP` | refuse tokens more than this above a domain's mark |
//! | `FENCE_ISSUED_ONLY` | `1`: accept only tokens this database's issuer issued for the domain |
//!
//! `DATABASE_URL` (sqlx's variable) naming another database than `FENCE_POSTGRES_URL` is
//! refused: two answers to one question.

use fence_core::env::SqlPoolVariables;

/// The database URL.
pub const URL: &str = "FENCE_POSTGRES_URL";
/// The schema of the fence's tables.
pub const SCHEMA: &str = "FENCE_POSTGRES_SCHEMA";
/// The pool's size.
pub const MAX_CONNECTIONS: &str = "FENCE_POSTGRES_MAX_CONNECTIONS";
/// How long a request waits for a pooled connection, in milliseconds.
pub const ACQUIRE_TIMEOUT_MS: &str = "FENCE_POSTGRES_ACQUIRE_TIMEOUT_MS";

/// The schema when [`SCHEMA`] is unset.
pub const DEFAULT_SCHEMA: &str = "fence";

pub(crate) const VARIABLES: SqlPoolVariables = SqlPoolVariables {
    url: URL,
    namespace: SCHEMA,
    default_namespace: DEFAULT_SCHEMA,
    max_connections: MAX_CONNECTIONS,
    acquire_timeout_ms: ACQUIRE_TIMEOUT_MS,
    product: "PostgreSQL",
    schemes: &["postgres://", "postgresql://"],
};

#[cfg(test)]
#[allow(clippy::panic)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use crate::PostgresFenceBuilder;
    use fence_core::env::Env;
    use fence_core::{FenceError, InvalidInput};

    async fn refused(pairs: &[(&str, &str)]) -> String {
        match PostgresFenceBuilder::from_env_with(&Env::from_pairs(pairs.iter().copied())).await {
            Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => why,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn bad_settings_are_refused_before_any_connection() {
        assert!(refused(&[]).await.starts_with("no PostgreSQL configured"));
        let url = "postgres://app:s3cret@127.0.0.1:1/db";
        assert_eq!(
            refused(&[(URL, url), ("DATABASE_URL", "postgres://other@h/db")]).await,
            "FENCE_POSTGRES_URL and DATABASE_URL are both set and disagree: set one"
        );
        let why = refused(&[(URL, "mysql://app:s3cret@h/db")]).await;
        assert_eq!(why, "FENCE_POSTGRES_URL is not a valid PostgreSQL URL");
        assert!(refused(&[(URL, url), (SCHEMA, "Bad-Name")])
            .await
            .contains("schema name"));
        assert!(refused(&[(URL, url), (MAX_CONNECTIONS, "0")])
            .await
            .contains("at least 1"));
        assert!(refused(&[(URL, url), ("FENCE_ISSUED_ONLY", "sometimes")])
            .await
            .contains("FENCE_ISSUED_ONLY must be"));
    }
}
