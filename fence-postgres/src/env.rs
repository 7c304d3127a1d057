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

/// All of them, as fence-core's environment reader takes them.
pub const VARIABLES: SqlPoolVariables = SqlPoolVariables {
    url: URL,
    namespace: SCHEMA,
    default_namespace: DEFAULT_SCHEMA,
    max_connections: MAX_CONNECTIONS,
    acquire_timeout_ms: ACQUIRE_TIMEOUT_MS,
    product: "PostgreSQL",
    schemes: &["postgres://", "postgresql://"],
};
