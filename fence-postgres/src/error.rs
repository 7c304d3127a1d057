//! Every sqlx error mapped in one place.

use fence_core::{BackendErrorKind, Domain, FenceError, FencingToken, Operation};

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
    /// A fenced row update found no row with its key.
    #[error("postgres: no row with this key in `{table}`")]
    RowMissing {
        /// The table.
        table: String,
    },
}

/// The class of a sqlx error: whether a retry can help.
pub(crate) fn kind_of(error: &sqlx::Error) -> BackendErrorKind {
    match error {
        sqlx::Error::Database(db) => match db.code().as_deref() {
            // insufficient_privilege, invalid_password, invalid_authorization_specification,
            // read_only_sql_transaction (a standby, or a read-only role: fix the configuration)
            Some("42501" | "28P01" | "28000" | "25006") => BackendErrorKind::PermissionDenied,
            // undefined_table, invalid_schema_name: not migrated
            Some("42P01" | "3F000") => BackendErrorKind::NotFound,
            // serialization_failure, deadlock_detected, lock_not_available
            Some("40001" | "40P01" | "55P03") => BackendErrorKind::Contention,
            // query_canceled (statement timeout), admin_shutdown, crash_shutdown,
            // cannot_connect_now, too_many_connections
            Some("57014" | "57P01" | "57P02" | "57P03" | "53300") => BackendErrorKind::Unavailable,
            _ => BackendErrorKind::Rejected,
        },
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
            BackendErrorKind::Unavailable
        }
        _ => BackendErrorKind::Rejected,
    }
}

/// Maps a sqlx error of the fence's own SQL for `operation` on `domain` to the fence's error,
/// the one mapping of this backend (crates built on fence-postgres use it too). `after_send`: the request may have
/// taken effect (a `COMMIT` whose answer was lost), so a lost connection is `Ambiguous`, never
/// a guess.
#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))] // public through `extension`
pub fn map_error(
    error: sqlx::Error,
    domain: &Domain,
    operation: Operation,
    after_send: bool,
) -> FenceError {
    shape_error(&error, domain)
        .unwrap_or_else(|| user_sql_error(error, domain, operation, after_send))
}

/// Maps a sqlx error of a statement of the user's own (a [`crate::RowFence`] `SET` list): like
/// [`map_error`], but a missing column is the user's mistake, not the fence's corrupt state.
pub(crate) fn user_sql_error(
    error: sqlx::Error,
    domain: &Domain,
    operation: Operation,
    after_send: bool,
) -> FenceError {
    // A lost connection, or a server shutting down, once `COMMIT` was sent: the commit record
    // may have been flushed before the answer was lost.
    let lost = match &error {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => {
            matches!(db.code().as_deref(), Some("57P01" | "57P02" | "57P03"))
        }
        _ => false,
    };
    if after_send && lost {
        return FenceError::Ambiguous {
            domain: domain.clone(),
            operation,
            source: Box::new(PostgresFenceError::Sql(error)),
        };
    }
    FenceError::backend(
        BACKEND,
        kind_of(&error),
        Some(domain),
        PostgresFenceError::Sql(error),
    )
}

/// The fence's tables with another shape (a column missing or of another type).
fn shape_error(error: &sqlx::Error, domain: &Domain) -> Option<FenceError> {
    let sqlx::Error::Database(db) = error else {
        return None;
    };
    // undefined_column, datatype_mismatch, undefined_function (an operator on a wrong type):
    // the fence's tables exist with another shape. Nothing was changed.
    matches!(db.code().as_deref(), Some("42703" | "42804" | "42883")).then(|| {
        corrupt(
            domain,
            format!(
                "the fence's tables do not have the expected shape: {}",
                db.message()
            ),
        )
    })
}

/// A token read from a column (`what` names it), or `CorruptState` when it is not a u64 above 0.
#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))] // public through `extension`
pub fn token_column(domain: &Domain, text: &str, what: &str) -> Result<FencingToken, FenceError> {
    text.parse::<FencingToken>()
        .map_err(|e| corrupt(domain, format!("{what} `{text}`: {e}")))
}

/// State at the resource that is not Fence's, or is damaged.
#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))] // public through `extension`
pub fn corrupt(domain: &Domain, detail: impl Into<String>) -> FenceError {
    FenceError::corrupt(BACKEND, domain, detail)
}
