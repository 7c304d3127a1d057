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

/// All of them, as fence-core's environment reader takes them.
pub const VARIABLES: SqlPoolVariables = SqlPoolVariables {
    url: URL,
    namespace: DATABASE,
    default_namespace: DEFAULT_DATABASE,
    max_connections: MAX_CONNECTIONS,
    acquire_timeout_ms: ACQUIRE_TIMEOUT_MS,
    product: "MySQL",
    schemes: &["mysql://"],
};
