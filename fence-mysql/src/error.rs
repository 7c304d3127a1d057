//! Every sqlx error mapped in one place.

use fence_core::{BackendErrorKind, Domain, FenceError, Operation};
use sqlx::mysql::MySqlDatabaseError;

/// The backend's name in errors and metrics.
#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))] // public through `extension`
pub const BACKEND: &str = "mysql";

/// What went wrong at MySQL or MariaDB.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MySqlFenceError {
    /// An error from the driver or the server.
    #[error("mysql: {0}")]
    Sql(#[from] sqlx::Error),
    /// The database lacks a fence table: [`crate::migrate`] has not run on it.
    #[error("mysql: database `{database}` has no `{table}`: run fence_mysql::migrate")]
    NotMigrated {
        /// The database.
        database: String,
        /// The missing table.
        table: &'static str,
    },
    /// The fence's tables exist with another shape than [`crate::migrate`] gives them.
    #[error("mysql: {0}")]
    Shape(String),
    /// The fenced transaction had ended before its commit: an implicit commit inside it (DDL,
    /// `LOCK TABLES`, `BEGIN`, `SET autocommit = 1`) committed what ran before it, the mark and
    /// the op id included, or the server rolled it back (a deadlock); reported `Ambiguous`.
    #[error("mysql: the fenced transaction ended before its commit (an implicit commit inside it committed what ran before, or the server rolled it back): retry with the same op id to learn which")]
    TransactionEnded,
    /// A fenced row update matched no row although the row now admits its token: the row was
    /// inserted or changed meanwhile. Retryable.
    #[error("mysql: the row changed under the fenced update of `{table}`: retry")]
    RowChanged {
        /// The table.
        table: String,
    },
    /// A fenced row update found no row with its key.
    #[error("mysql: no row with this key in `{table}`")]
    RowMissing {
        /// The table.
        table: String,
    },
}

/// The server's error number, for a database error.
pub(crate) fn number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// The class of a sqlx error: whether a retry can help.
pub(crate) fn kind_of(error: &sqlx::Error) -> BackendErrorKind {
    match number(error) {
        // access denied (user, database, table or column), a read-only server
        Some(1044 | 1045 | 1142 | 1143 | 1227 | 1290 | 1792) => BackendErrorKind::PermissionDenied,
        // unknown database, no such table: not migrated
        Some(1049 | 1146) => BackendErrorKind::NotFound,
        // deadlock (the transaction was rolled back), lock wait timeout, a snapshot conflict
        Some(1213 | 1205 | 1020) => BackendErrorKind::Contention,
        // too many connections, shutting down, interrupted, statement timeouts (MariaDB's
        // max_statement_time, MySQL's max_execution_time), a connection killed or dropped
        Some(1040 | 1053 | 1317 | 1969 | 3024 | 1927 | 4031 | 1158..=1161) => {
            BackendErrorKind::Unavailable
        }
        Some(_) => BackendErrorKind::Rejected,
        None => match error {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
                BackendErrorKind::Unavailable
            }
            _ => BackendErrorKind::Rejected,
        },
    }
}

/// Maps a sqlx error of the fence's own SQL for `operation` on `domain` to the fence's error.
/// `after_send`: the request may have taken effect (a `COMMIT` whose answer was lost), so a
/// lost connection is `Ambiguous`, never a guess.
#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))] // public through `extension`
pub fn map_error(
    error: sqlx::Error,
    domain: &Domain,
    operation: Operation,
    after_send: bool,
) -> FenceError {
    // Unknown column, wrong value for a column: the fence's tables have another shape.
    if let Some(1054 | 1366 | 1264 | 1406) = number(&error) {
        return corrupt(
            domain,
            format!("the fence's tables do not have the expected shape: {error}"),
        );
    }
    user_sql_error(error, domain, operation, after_send)
}

/// Maps a sqlx error of a statement of the user's own: like [`map_error`], but a missing
/// column is the user's mistake, not the fence's corrupt state.
pub(crate) fn user_sql_error(
    error: sqlx::Error,
    domain: &Domain,
    operation: Operation,
    after_send: bool,
) -> FenceError {
    // The connection lost, or the server shutting down, once `COMMIT` was sent: the commit may
    // have been made durable before the answer was lost.
    let lost = matches!(error, sqlx::Error::Io(_) | sqlx::Error::Protocol(_))
        || matches!(
            number(&error),
            Some(1053 | 1317 | 1927 | 4031 | 1158..=1161)
        );
    if after_send && lost {
        return FenceError::Ambiguous {
            domain: domain.clone(),
            operation,
            source: Box::new(MySqlFenceError::Sql(error)),
        };
    }
    FenceError::backend(
        BACKEND,
        kind_of(&error),
        Some(domain),
        MySqlFenceError::Sql(error),
    )
}

/// State at the resource that is not Fence's, or is damaged.
#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))] // public through `extension`
pub fn corrupt(domain: &Domain, detail: impl Into<String>) -> FenceError {
    FenceError::corrupt(BACKEND, domain, detail)
}
