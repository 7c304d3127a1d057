//! Every sqlx error mapped in one place.

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

fence_sql::dialect_functions!(crate::dialect::MySqlDialect);
