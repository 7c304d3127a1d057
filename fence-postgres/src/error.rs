//! Every sqlx error mapped in one place.

use fence_core::{Domain, FenceError, FencingToken};

/// The backend's name in errors and metrics.
#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))] // public through `extension`
pub const BACKEND: &str = "postgres";

/// What went wrong at PostgreSQL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresFenceError {
    /// An error from the driver or the server.
    #[error("postgres: {0}")]
    Sql(#[from] sqlx::Error),
    /// The schema lacks a fence table or function: [`crate::migrate`] has not run on it (with
    /// this version).
    #[error(
        "postgres: schema `{schema}` has no `{table}`: run fence_postgres::migrate (with this version)"
    )]
    NotMigrated {
        /// The schema.
        schema: String,
        /// The missing table or function.
        table: &'static str,
    },
    /// The fence's tables exist with another shape than [`crate::migrate`] gives them.
    #[error("postgres: {0}")]
    Shape(String),
    /// The server applied a write that fence-core's decision, on the row as it was, would have
    /// refused (or refused one it would have applied): the schema's function and this client
    /// disagree. Run `migrate` with this version.
    #[error("postgres: the write {0}; run fence_postgres::migrate with this version")]
    Disagreement(String),
    /// The transaction's mark row changed under it (a `COMMIT` or `ROLLBACK` sent inside the
    /// fenced transaction ended it early).
    #[error("postgres: the fenced transaction's mark row changed under it (was COMMIT or ROLLBACK sent inside it?)")]
    MarkChanged,
    /// A fenced row update matched no row although the row now admits its token: the row was
    /// inserted or changed meanwhile. Retryable.
    #[error("postgres: the row changed under the fenced update of `{table}`: retry")]
    RowChanged {
        /// The table.
        table: String,
    },
    /// A fenced row update found no row with its key.
    #[error("postgres: no row with this key in `{table}`")]
    RowMissing {
        /// The table.
        table: String,
    },
}

fence_sql::dialect_functions!(crate::dialect::PostgresDialect);

/// A token read from a column (`what` names it), or `CorruptState` when it is not a u64 above 0.
#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))] // public through `extension`
pub fn token_column(domain: &Domain, text: &str, what: &str) -> Result<FencingToken, FenceError> {
    text.parse::<FencingToken>()
        .map_err(|e| corrupt(domain, format!("{what} `{text}`: {e}")))
}
