//! What fence-sql's shared code needs to know about MySQL and MariaDB.

use std::time::Duration;

use async_trait::async_trait;
use fence_core::env::SqlPoolVariables;
use fence_core::permissions::PermissionReport;
use fence_core::raw::Shape;
use fence_core::{BackendErrorKind, Domain, FenceError, FencingToken, Operation};
use fence_sql::{Dialect, ErrorClass, Tables};
use sqlx::mysql::{MySql, MySqlDatabaseError, MySqlPool, MySqlQueryResult};
use sqlx::{Executor, QueryBuilder, Transaction};

use crate::error::{corrupt, map_error, MySqlFenceError, BACKEND};
use crate::fence::{MySqlFence, DEFAULT_MAX_VALUE_BYTES};
use crate::lease::MAX_LEASE_TTL;
use crate::mark::token_column;

/// Set once the mark is raised and released just before `COMMIT`: a transaction that ended
/// meanwhile (an implicit commit, a deadlock's rollback) has lost it, so its end is never
/// reported as this commit's success. Sent as text (a query without arguments): MySQL 8
/// refuses savepoint statements as prepared statements.
pub(crate) const SAVEPOINT: &str = "SAVEPOINT fence_admitted";
const RELEASE: &str = "RELEASE SAVEPOINT fence_admitted";

/// What a MySQL fenced transaction keeps for its commit: the proof that the fence raised the
/// mark and set the savepoint the commit checks (made by the fence's `begin` alone).
#[derive(Debug)]
pub struct SavepointSet(());

impl SavepointSet {
    /// The savepoint [`SAVEPOINT`] was set, after the mark was raised.
    pub(crate) fn new() -> Self {
        SavepointSet(())
    }
}

/// MySQL and MariaDB, as fence-sql's shared code sees them ([`crate::FencedTransaction`] and
/// [`crate::RowFence`] are fence-sql's types for this dialect).
#[derive(Debug)]
pub enum MySqlDialect {}

/// The server's error number, for a database error.
pub(crate) fn number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

#[async_trait]
impl Dialect for MySqlDialect {
    type Db = MySql;
    type Error = MySqlFenceError;
    /// The savepoint the transaction set when it began (the mark raised before it).
    type Pending = SavepointSet;
    type TokenValue = u64;
    type TextValue = Vec<u8>;
    type Fence = MySqlFence;

    const BACKEND: &'static str = BACKEND;
    const DEFAULT_MAX_VALUE_BYTES: usize = DEFAULT_MAX_VALUE_BYTES;
    const VARIABLES: SqlPoolVariables = crate::env::VARIABLES;
    const NAMESPACE: &'static str = "database name";
    // A locking read: the latest committed row, whatever the isolation level.
    const ROW_READ_SUFFIX: &'static str = " LOCK IN SHARE MODE";

    // A `BIGINT UNSIGNED` column is NULL until its first token; 0 is no token of Fence's.
    const ROW_ZERO_IS_UNSET: bool = false;
    const NOW: &'static str = "UTC_TIMESTAMP(6)";
    // A plain read, after the counter row's lock: a locking read of a missing lease row would
    // take a gap lock, and acquisitions of other domains inserting theirs would deadlock.
    const LEASE_READ_SUFFIX: &'static str = "";
    const MAX_LEASE_TTL: Duration = MAX_LEASE_TTL;

    async fn check_shape(
        pool: &MySqlPool,
        tables: &Tables<MySqlDialect>,
    ) -> Result<Option<Shape>, sqlx::Error> {
        crate::schema::check_shape(pool, tables).await
    }

    async fn check_permissions(fence: &MySqlFence) -> Result<PermissionReport, FenceError> {
        fence.permissions_now().await
    }

    fn not_migrated(database: String, table: &'static str) -> MySqlFenceError {
        MySqlFenceError::NotMigrated { database, table }
    }

    fn shape(detail: String) -> MySqlFenceError {
        MySqlFenceError::Shape(detail)
    }

    fn classify(error: &sqlx::Error) -> ErrorClass {
        if let Some(class) = ErrorClass::of_driver(error) {
            return class;
        }
        match number(error) {
            // access denied (user, database, table or column), a read-only server
            Some(1044 | 1045 | 1142 | 1143 | 1227 | 1290 | 1792) => {
                ErrorClass::new(BackendErrorKind::PermissionDenied)
            }
            // unknown database, no such table: not migrated
            Some(1049 | 1146) => ErrorClass::new(BackendErrorKind::NotFound),
            // deadlock (the transaction was rolled back), lock wait timeout, a snapshot conflict
            Some(1213 | 1205 | 1020) => ErrorClass::new(BackendErrorKind::Contention),
            // shutting down, interrupted, killed, a connection dropped: a statement sent may
            // have taken effect
            Some(1053 | 1317 | 1927 | 4031 | 1158..=1161) => {
                ErrorClass::new(BackendErrorKind::Unavailable).lost()
            }
            // too many connections, statement timeouts (MariaDB's max_statement_time, MySQL's
            // max_execution_time)
            Some(1040 | 1969 | 3024) => ErrorClass::new(BackendErrorKind::Unavailable),
            // unknown column, wrong value for a column: the fence's tables have another shape
            // (as the fence's own SQL meets it; a user's statement's is the user's mistake)
            Some(1054 | 1366 | 1264 | 1406) => ErrorClass::new(BackendErrorKind::Rejected).shape(),
            _ => ErrorClass::new(BackendErrorKind::Rejected),
        }
    }

    fn rows_affected(result: &MySqlQueryResult) -> u64 {
        // Matched rows: sqlx connects with CLIENT_FOUND_ROWS.
        result.rows_affected()
    }

    fn push_domain(query: &mut QueryBuilder<'_, MySql>, domain: &Domain) {
        query.push_bind(domain.as_str().as_bytes().to_vec());
    }

    fn push_text(query: &mut QueryBuilder<'_, MySql>, text: &str) {
        query.push_bind(text.as_bytes().to_vec());
    }

    fn push_expiry(query: &mut QueryBuilder<'_, MySql>, ttl: Duration) {
        let micros = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
        query
            .push("UTC_TIMESTAMP(6) + INTERVAL ")
            .push_bind(micros)
            .push(" MICROSECOND");
    }

    fn upsert(columns: &[&str]) -> String {
        let updates: Vec<String> = columns
            .iter()
            .map(|column| format!("{column} = VALUES({column})"))
            .collect();
        if updates.is_empty() {
            " ON DUPLICATE KEY UPDATE domain = domain".to_owned()
        } else {
            format!(" ON DUPLICATE KEY UPDATE {}", updates.join(", "))
        }
    }

    fn remaining_ms(column: &str) -> String {
        format!("TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), {column}) DIV 1000")
    }

    fn number_of(_domain: &Domain, value: u64, _what: &str) -> Result<u64, FenceError> {
        Ok(value)
    }

    fn push_token(query: &mut QueryBuilder<'_, MySql>, token: FencingToken) {
        query.push_bind(token.get());
    }

    fn token_select(column: &str) -> String {
        column.to_owned()
    }

    fn token_of(domain: &Domain, value: u64, what: &str) -> Result<FencingToken, FenceError> {
        token_column(domain, value, what)
    }

    fn decode_op(
        domain: &Domain,
        row: &sqlx::mysql::MySqlRow,
        first: usize,
    ) -> Result<Option<fence_core::raw::StoredOp>, FenceError> {
        crate::mark::decode_op(domain, row, first)
    }

    fn text_of(domain: &Domain, value: Vec<u8>, what: &str) -> Result<String, FenceError> {
        String::from_utf8(value).map_err(|_| corrupt(domain, format!("{what}: not UTF-8")))
    }

    fn epoch_ms(column: &str) -> String {
        format!("TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {column}) DIV 1000")
    }

    fn row_missing(table: String) -> MySqlFenceError {
        MySqlFenceError::RowMissing { table }
    }

    fn row_changed(table: String) -> MySqlFenceError {
        MySqlFenceError::RowChanged { table }
    }

    /// Checks that the transaction is still the one the fence began (its savepoint is there),
    /// then commits.
    async fn commit_admitted(
        _pending: SavepointSet,
        mut tx: Transaction<'static, MySql>,
        domain: &Domain,
    ) -> Result<(), FenceError> {
        match (&mut *tx).execute(RELEASE).await {
            Ok(_) => crate::error::commit(tx, domain, Operation::Write).await,
            // 1305: no such savepoint. The transaction that set it is gone.
            Err(error) if number(&error) == Some(1305) => Err(FenceError::Ambiguous {
                domain: domain.clone(),
                operation: Operation::Commit,
                source: Box::new(MySqlFenceError::TransactionEnded),
            }),
            Err(error) => Err(map_error(error, domain, Operation::Write, false)),
        }
    }
}
