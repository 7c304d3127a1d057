//! The statements on a domain's mark row: locking it (the schema's `fence_lock`, which reads the
//! settings, counter and op record after the lock) and applying a transaction's change to it
//! (`fence_raise`).

use async_trait::async_trait;
use fence_core::{BoundsConfig, Domain, FenceError, FencingToken, Operation, OperationId};
use fence_sql::{Locked, MarkChange, MarkRows, Remember};
use futures_util::StreamExt;
use sqlx::postgres::PgRow;
use sqlx::{Either, PgConnection, Postgres, Row, Transaction};

use crate::dialect::PostgresDialect;
use crate::error::{corrupt, map_error};
use crate::fence::PostgresFence;
use crate::literal;
use crate::mark::{decode_head, decode_op, issued_column, step_column};

#[async_trait]
impl MarkRows for PostgresFence {
    type Dialect = PostgresDialect;

    /// Begins a transaction and calls the schema's `fence_lock` in it: the domain's mark row
    /// locked (created if missing; a refusal rolls the transaction back, and the creation with
    /// it), then, in statements of their own, the record of `op`, the schema's settings and,
    /// when issued-only is in force or for a re-base, the domain's counter. Concurrent holders of the domain wait on the lock until this
    /// transaction ends.
    async fn lock(
        &self,
        domain: &Domain,
        operation: Operation,
        op: Option<(FencingToken, &OperationId)>,
    ) -> Result<(Transaction<'static, Postgres>, Locked), FenceError> {
        let (tx, locked, _) = self.lock_row(domain, operation, op).await?;
        Ok((tx, locked))
    }

    async fn change(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        domain: &Domain,
        operation: Operation,
        change: MarkChange,
        remember: Option<Remember>,
    ) -> Result<(), FenceError> {
        if matches!(change, MarkChange::Keep) && remember.is_none() {
            return Ok(());
        }
        match run(tx, &self.raise_sql(domain, None, change, remember)?).await {
            (_, None) => Ok(()),
            (_, Some(error)) => Err(apply_error(error, domain, operation, false)),
        }
    }
}

impl PostgresFence {
    /// [`MarkRows::lock`], with the id of the transaction that holds the lock (`fence_lock`'s
    /// `txid`), which [`PostgresFence::raise_sql`] checks before anything commits.
    pub(crate) async fn lock_row(
        &self,
        domain: &Domain,
        operation: Operation,
        op: Option<(FencingToken, &OperationId)>,
    ) -> Result<(Transaction<'static, Postgres>, Locked, i64), FenceError> {
        self.ensure_shape(domain, operation).await?;
        let sql_error = |e| map_error(e, domain, operation, false);
        let mut tx = self.pool().begin().await.map_err(sql_error)?;
        let row = sqlx::query(&format!(
            "SELECT * FROM {}.fence_lock($1, $2::numeric, $3, $4)",
            self.tables().name()
        ))
        .bind(domain.as_str())
        .bind(op.map(|(token, _)| token.to_string()))
        .bind(op.map(|(_, op_id)| op_id.as_str()))
        // The counter is read when the decision needs it: issued-only (the client's setting or
        // the schema's, which fence_lock adds) or a re-base, which never lands below it.
        .bind(self.client_bounds().issued_only || operation == Operation::Rebase)
        .fetch_one(&mut *tx)
        .await
        .map_err(sql_error)?;
        let column = |e: sqlx::Error| corrupt(domain, format!("fence_lock result: {e}"));
        let created: bool = row.try_get(4).map_err(column)?;
        // The entry's head is validated too: a row that is not Fence's fails closed.
        let (hwm, _) = decode_head(domain, &row, created)?;
        let last: Option<String> = row.try_get(8).map_err(column)?;
        let step: Option<String> = row.try_get(9).map_err(column)?;
        let issued_only: bool = row.try_get(10).map_err(column)?;
        let txid: i64 = row.try_get(11).map_err(column)?;
        let settings = self
            .client_bounds()
            .tighter(BoundsConfig::new(step_column(domain, step)?, issued_only));
        Ok((
            tx,
            Locked::new(
                hwm,
                None,
                decode_op(domain, &row, 5)?,
                settings,
                issued_column(domain, last)?,
            ),
            txid,
        ))
    }

    /// The call of the schema's `fence_raise` that applies `change` to the row `fence_lock`
    /// locked and remembers `op`, as SQL text (it goes in one message with `COMMIT`, and
    /// such a message has no parameters). It fails on an aborted transaction (whose `COMMIT`
    /// would answer `ROLLBACK` without an error), when the transaction is no longer the one
    /// that took the lock (a `COMMIT` or `ROLLBACK` sent inside it) and when the mark is not
    /// what the lock read (ZF001, mapped by [`apply_error`]), so a `COMMIT` after it in the
    /// message never runs.
    /// `txid` is what [`PostgresFence::lock_row`] answered (`None`: a claim, which changes the
    /// row right after its lock, checks its own transaction).
    pub(crate) fn raise_sql(
        &self,
        domain: &Domain,
        txid: Option<i64>,
        change: MarkChange,
        op: Option<Remember>,
    ) -> Result<String, FenceError> {
        let retention = i64::try_from(self.op_id_retention()).unwrap_or(i64::MAX);
        let (from, to) = match change {
            MarkChange::Keep => (None, None),
            MarkChange::Raise { from, to } => (from, Some(to)),
        };
        let op_id = match &op {
            Some(op) => literal::text(domain, op.op_id.as_str())?,
            None => "NULL".to_owned(),
        };
        Ok(format!(
            "SELECT {}.fence_raise({}, {}, {}, {}, {}, {op_id}, {}, {retention})",
            self.tables().name(),
            literal::text(domain, domain.as_str())?,
            txid.map_or_else(|| "txid_current()".to_owned(), |txid| txid.to_string()),
            literal::token(from),
            literal::token(to),
            literal::token(op.as_ref().map(|op| op.token)),
            literal::token(op.as_ref().and_then(|op| op.previous)),
        ))
    }
}

/// Sends `sql`, a message of one or more statements, on `conn`: the rows of each statement
/// that completed, in order, and the error that stopped the rest, if any.
pub(crate) async fn run(
    conn: &mut PgConnection,
    sql: &str,
) -> (Vec<Vec<PgRow>>, Option<sqlx::Error>) {
    let mut results = sqlx::raw_sql(sql).fetch_many(conn);
    let (mut done, mut rows) = (Vec::new(), Vec::new());
    while let Some(result) = results.next().await {
        match result {
            Ok(Either::Left(_)) => done.push(std::mem::take(&mut rows)),
            Ok(Either::Right(row)) => rows.push(row),
            Err(error) => return (done, Some(error)),
        }
    }
    (done, None)
}

/// An error of the statement [`PostgresFence::raise_sql`] made: ZF001 is the mark found
/// changed under the transaction.
pub(crate) fn apply_error(
    error: sqlx::Error,
    domain: &Domain,
    operation: Operation,
    after_send: bool,
) -> FenceError {
    match &error {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("ZF001") => FenceError::backend(
            crate::error::BACKEND,
            fence_core::BackendErrorKind::Rejected,
            Some(domain),
            crate::error::PostgresFenceError::MarkChanged,
        ),
        _ => map_error(error, domain, operation, after_send),
    }
}
