//! Every sqlx error mapped in one place.

use fence_core::{BackendErrorKind, Domain, FenceError, Operation};

/// The backend's name in errors and metrics.
pub(crate) const BACKEND: &str = "postgres";

/// What went wrong at PostgreSQL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresFenceError {
    /// An error from the driver or the server.
    #[error("postgres: {0}")]
    Sql(#[from] sqlx::Error),
    /// The schema has no fence table: [`crate::migrate`] has not run on it.
    #[error(
        "postgres: schema `{schema}` has no table `{table}`: run fence_postgres::migrate first"
    )]
    NotMigrated {
        /// The schema.
        schema: String,
        /// The missing table.
        table: &'static str,
    },
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
            // query_canceled (statement timeout), admin_shutdown, cannot_connect_now, too_many_connections
            Some("57014" | "57P01" | "57P03" | "53300") => BackendErrorKind::Unavailable,
            _ => BackendErrorKind::Rejected,
        },
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
            BackendErrorKind::Unavailable
        }
        _ => BackendErrorKind::Rejected,
    }
}

/// Maps a sqlx error of `operation` on `domain` to the fence's error, the one mapping of this
/// backend (crates built on fence-postgres use it too). `after_send`: the request may have
/// taken effect (a `COMMIT` whose answer was lost), so a lost connection is `Ambiguous`, never
/// a guess.
pub fn map_error(
    error: sqlx::Error,
    domain: &Domain,
    operation: Operation,
    after_send: bool,
) -> FenceError {
    if let sqlx::Error::Database(db) = &error {
        // undefined_column, datatype_mismatch, undefined_function (an operator on a wrong
        // type): the fence's tables exist with another shape. Nothing was changed.
        if matches!(db.code().as_deref(), Some("42703" | "42804" | "42883")) {
            return corrupt(
                domain,
                format!(
                    "the fence's tables do not have the expected shape: {}",
                    db.message()
                ),
            );
        }
    }
    let lost = matches!(error, sqlx::Error::Io(_) | sqlx::Error::Protocol(_));
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

/// State at the resource that is not Fence's, or is damaged.
pub(crate) fn corrupt(domain: &Domain, detail: impl Into<String>) -> FenceError {
    FenceError::corrupt(BACKEND, domain, detail)
}
