//! The environment variables [`crate::MySqlFenceBuilder::from_env`] reads: one set, documented here.
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

use fence_core::env::SqlPoolVariables;

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

pub(crate) const VARIABLES: SqlPoolVariables = SqlPoolVariables {
    url: URL,
    namespace: DATABASE,
    default_namespace: DEFAULT_DATABASE,
    max_connections: MAX_CONNECTIONS,
    acquire_timeout_ms: ACQUIRE_TIMEOUT_MS,
    product: "MySQL",
    schemes: &["mysql://"],
};

#[cfg(test)]
#[allow(clippy::panic)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use crate::MySqlFenceBuilder;
    use fence_core::env::Env;
    use fence_core::{FenceError, InvalidInput};

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
