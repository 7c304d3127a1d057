//! What fence-sql's shared code needs to know about PostgreSQL.

use std::time::Duration;

use async_trait::async_trait;
use fence_core::env::SqlPoolVariables;
use fence_core::permissions::PermissionReport;
use fence_core::raw::Shape;
use fence_core::{BackendErrorKind, Domain, FenceError, FencingToken, Operation};
use fence_sql::{Dialect, ErrorClass, FenceCore, MarkChange, Remember, Tables};
use sqlx::postgres::{PgPool, PgQueryResult, Postgres};
use sqlx::{QueryBuilder, Transaction, TransactionManager};

use crate::error::{corrupt, map_error, token_column, PostgresFenceError, BACKEND};
use crate::fence::{PostgresFence, DEFAULT_MAX_VALUE_BYTES};
use crate::mark_rows::{apply_error, run};

/// PostgreSQL, as fence-sql's shared code sees it ([`crate::FencedTransaction`] and
/// [`crate::RowFence`] are fence-sql's types for this dialect).
#[derive(Debug)]
pub enum PostgresDialect {}

/// What a fenced transaction writes just before `COMMIT`: the mark raised and the op id
/// remembered there (the statement also tells an aborted transaction, whose `COMMIT` would
/// answer `ROLLBACK`, not an error).
pub struct PendingMark {
    pub(crate) fence: PostgresFence,
    /// The transaction that took the lock (`fence_lock`'s `txid`).
    pub(crate) txid: i64,
    pub(crate) change: MarkChange,
    pub(crate) remember: Option<Remember>,
}

#[async_trait]
impl Dialect for PostgresDialect {
    type Db = Postgres;
    type Error = PostgresFenceError;
    type Pending = PendingMark;
    type TokenValue = String;
    type TextValue = String;
    type Fence = PostgresFence;

    const BACKEND: &'static str = BACKEND;
    const DEFAULT_MAX_VALUE_BYTES: usize = DEFAULT_MAX_VALUE_BYTES;
    const VARIABLES: SqlPoolVariables = crate::env::VARIABLES;
    const NAMESPACE: &'static str = "schema name";
    // A plain read sees the latest committed row under READ COMMITTED, PostgreSQL's default.
    const ROW_READ_SUFFIX: &'static str = "";

    // Columns made `DEFAULT 0` before adopting Fence (MIGRATION.md) mean no token yet.
    const ROW_ZERO_IS_UNSET: bool = true;
    const NOW: &'static str = "clock_timestamp()";
    const LEASE_READ_SUFFIX: &'static str = " FOR UPDATE";
    // What fence-core's TTL check allows: whole milliseconds up to i64::MAX.
    const MAX_LEASE_TTL: Duration = Duration::from_millis(i64::MAX as u64);

    async fn check_shape(
        pool: &PgPool,
        tables: &Tables<PostgresDialect>,
    ) -> Result<Option<Shape>, sqlx::Error> {
        crate::schema::check_shape(pool, tables).await
    }

    async fn check_permissions(fence: &PostgresFence) -> Result<PermissionReport, FenceError> {
        fence.permissions_now().await
    }

    fn not_migrated(schema: String, table: &'static str) -> PostgresFenceError {
        PostgresFenceError::NotMigrated { schema, table }
    }

    fn shape(detail: String) -> PostgresFenceError {
        PostgresFenceError::Shape(detail)
    }

    fn classify(error: &sqlx::Error) -> ErrorClass {
        if let Some(class) = ErrorClass::of_driver(error) {
            return class;
        }
        let sqlx::Error::Database(db) = error else {
            return ErrorClass::new(BackendErrorKind::Rejected);
        };
        match db.code().as_deref() {
            // insufficient_privilege, invalid_password, invalid_authorization_specification,
            // read_only_sql_transaction (a standby, or a read-only role: fix the configuration)
            Some("42501" | "28P01" | "28000" | "25006") => {
                ErrorClass::new(BackendErrorKind::PermissionDenied)
            }
            // undefined_table, invalid_schema_name: not migrated
            Some("42P01" | "3F000") => ErrorClass::new(BackendErrorKind::NotFound),
            // serialization_failure, deadlock_detected, lock_not_available
            Some("40001" | "40P01" | "55P03") => ErrorClass::new(BackendErrorKind::Contention),
            // admin_shutdown, crash_shutdown, cannot_connect_now: the server is going away,
            // and a `COMMIT` sent may have been flushed before the answer was lost
            Some("57P01" | "57P02" | "57P03") => {
                ErrorClass::new(BackendErrorKind::Unavailable).lost()
            }
            // query_canceled (statement timeout), too_many_connections
            Some("57014" | "53300") => ErrorClass::new(BackendErrorKind::Unavailable),
            // undefined_column, datatype_mismatch, undefined_function (an operator on a wrong
            // type): the fence's tables have another shape, as the fence's own SQL meets them
            Some("42703" | "42804" | "42883") => {
                ErrorClass::new(BackendErrorKind::Rejected).shape()
            }
            _ => ErrorClass::new(BackendErrorKind::Rejected),
        }
    }

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn push_domain(query: &mut QueryBuilder<'_, Postgres>, domain: &Domain) {
        query.push_bind(domain.as_str().to_owned());
    }

    fn push_text(query: &mut QueryBuilder<'_, Postgres>, text: &str) {
        query.push_bind(text.to_owned());
    }

    fn push_expiry(query: &mut QueryBuilder<'_, Postgres>, ttl: Duration) {
        let ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        query
            .push("clock_timestamp() + ")
            .push_bind(ms)
            .push(" * interval '1 millisecond'");
    }

    fn upsert(columns: &[&str]) -> String {
        let updates: Vec<String> = columns
            .iter()
            .map(|column| format!("{column} = excluded.{column}"))
            .collect();
        if updates.is_empty() {
            " ON CONFLICT (domain) DO NOTHING".to_owned()
        } else {
            format!(" ON CONFLICT (domain) DO UPDATE SET {}", updates.join(", "))
        }
    }

    fn remaining_ms(column: &str) -> String {
        format!("(extract(epoch FROM {column} - clock_timestamp()) * 1000)::bigint")
    }

    fn number_of(domain: &Domain, value: String, what: &str) -> Result<u64, FenceError> {
        value
            .parse()
            .map_err(|e| corrupt(domain, format!("{what} `{value}`: {e}")))
    }

    async fn notify_release(
        conn: &mut sqlx::PgConnection,
        core: &FenceCore<PostgresDialect>,
        domain: &Domain,
    ) -> Result<(), sqlx::Error> {
        crate::lease::notify_release(conn, core, domain).await
    }

    async fn wait_for_release(
        core: &FenceCore<PostgresDialect>,
        domain: &Domain,
        within: Duration,
    ) {
        crate::lease::wait_for_release(core, domain, within).await;
    }

    fn push_token(query: &mut QueryBuilder<'_, Postgres>, token: FencingToken) {
        // As text cast to numeric: every u64 exactly (PostgreSQL has no unsigned 64-bit type).
        query.push_bind(token.to_string()).push("::numeric");
    }

    fn token_select(column: &str) -> String {
        format!("{column}::text")
    }

    fn token_of(domain: &Domain, value: String, what: &str) -> Result<FencingToken, FenceError> {
        token_column(domain, &value, what)
    }

    fn decode_op(
        domain: &Domain,
        row: &sqlx::postgres::PgRow,
        first: usize,
    ) -> Result<Option<fence_core::raw::StoredOp>, FenceError> {
        crate::mark::decode_op(domain, row, first)
    }

    fn text_of(_domain: &Domain, value: String, _what: &str) -> Result<String, FenceError> {
        Ok(value) // text columns hold UTF-8 only
    }

    fn epoch_ms(column: &str) -> String {
        format!("(extract(epoch FROM {column}) * 1000)::bigint")
    }

    fn row_missing(table: String) -> PostgresFenceError {
        PostgresFenceError::RowMissing { table }
    }

    fn row_changed(table: String) -> PostgresFenceError {
        PostgresFenceError::RowChanged { table }
    }

    /// One message: the mark's statement (raised, the op id remembered; it fails on an aborted
    /// transaction and on a mark changed under it, and `COMMIT` then never runs), `COMMIT`,
    /// and a `BEGIN` that leaves the connection in the transaction sqlx still counts, so that
    /// its queued `ROLLBACK` (sent with the connection's next message) ends an empty one. The
    /// fence adds no round trip to the commit: a plain transaction sends `COMMIT` alone.
    async fn commit_admitted(
        pending: PendingMark,
        mut tx: Transaction<'static, Postgres>,
        domain: &Domain,
    ) -> Result<(), FenceError> {
        let PendingMark {
            fence,
            txid,
            change,
            remember,
        } = pending;
        let message = format!(
            "{}; COMMIT; BEGIN",
            fence.raise_sql(domain, Some(txid), change, remember)?
        );
        let (done, failed) = run(&mut tx, &message).await;
        let done = done.len();
        match (failed, done) {
            // Committed, and the empty transaction after it is rolled back by the queued
            // `ROLLBACK` (`Transaction`'s drop then has nothing left to do).
            (None, 3) | (Some(_), 2) => {
                <Postgres as sqlx::Database>::TransactionManager::start_rollback(&mut tx);
                Ok(())
            }
            // The mark's statement failed: `COMMIT` was skipped, the transaction is aborted
            // and rolled back when `tx` drops. Only a connection lost (no answer) may hide a
            // `COMMIT` that ran.
            (Some(error), 0) => {
                let lost = !matches!(error, sqlx::Error::Database(_));
                Err(apply_error(error, domain, Operation::Write, lost))
            }
            // `COMMIT` failed or its answer was lost.
            (Some(error), _) => {
                if let sqlx::Error::Database(_) = error {
                    // The server ended the transaction: a `BEGIN` for sqlx's `ROLLBACK`.
                    let _ = run(&mut tx, "BEGIN").await;
                }
                Err(map_error(error, domain, Operation::Write, true))
            }
            (None, _) => Err(FenceError::Ambiguous {
                domain: domain.clone(),
                operation: Operation::Write,
                source: Box::new(PostgresFenceError::from(sqlx::Error::Protocol(format!(
                    "the commit's message answered {done} of its 3 statements"
                )))),
            }),
        }
    }
}
