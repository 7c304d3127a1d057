//! The statements on a domain's mark row: locking it (with the settings, counter and op record
//! read after the lock) and applying a transaction's change to it.

use async_trait::async_trait;
use fence_core::{BoundsConfig, Domain, FenceError, FencingToken, Operation, OperationId};
use fence_sql::{Locked, MarkChange, MarkRows, Remember};
use sqlx::{PgConnection, Postgres, QueryBuilder, Row, Transaction};

use crate::dialect::PostgresDialect;
use crate::error::{corrupt, map_error};
use crate::fence::PostgresFence;
use crate::mark::{decode_head, decode_op, issued_column, step_column};

#[async_trait]
impl MarkRows for PostgresFence {
    type Dialect = PostgresDialect;

    /// Begins a transaction and locks the domain's mark row in it (creating the row if
    /// missing; a refusal rolls the transaction back, and the creation with it), then reads, in
    /// one statement of its own, the schema's settings, the domain's counter and the record of
    /// `op`. Concurrent holders of the domain wait on the lock until this transaction ends.
    async fn lock(
        &self,
        domain: &Domain,
        operation: Operation,
        op: Option<(FencingToken, &OperationId)>,
    ) -> Result<(Transaction<'static, Postgres>, Locked), FenceError> {
        self.ensure_shape(domain, operation).await?;
        let sql_error = |e| map_error(e, domain, operation, false);
        let mut tx = self.pool().begin().await.map_err(sql_error)?;
        let marks = self.tables().marks();
        let select = format!(
            "SELECT hwm::text, state, revision, writer::text FROM {marks} \
             WHERE domain = $1 FOR UPDATE"
        );
        let read = || sqlx::query(&select).bind(domain.as_str());
        let (row, created) = match read().fetch_optional(&mut *tx).await.map_err(sql_error)? {
            Some(row) => (row, false),
            None => {
                let created = sqlx::query(&format!(
                    "INSERT INTO {marks} (domain) VALUES ($1) ON CONFLICT (domain) DO NOTHING"
                ))
                .bind(domain.as_str())
                .execute(&mut *tx)
                .await
                .map_err(sql_error)?
                .rows_affected()
                    == 1;
                let row = read().fetch_optional(&mut *tx).await.map_err(sql_error)?;
                (
                    row.ok_or_else(|| corrupt(domain, "the mark row vanished"))?,
                    created,
                )
            }
        };
        // The entry's head is validated too: a row that is not Fence's fails closed.
        let (hwm, _) = decode_head(domain, &row, created)?;
        // In a statement of its own, after the lock: a statement that waited for the lock would
        // still see the database of its start (settings changed, counters issued, an earlier
        // retry's operation record committed meanwhile would be missed).
        let (settings_table, counters, ops) = (
            self.tables().settings(),
            self.tables().counters(),
            self.tables().ops(),
        );
        let after = sqlx::query(&format!(
            "SELECT (SELECT max_step::text FROM {settings_table} WHERE one), \
             COALESCE((SELECT issued_only FROM {settings_table} WHERE one), false), \
             (SELECT last::text FROM {counters} WHERE domain = $1), \
             o.kind, o.revision, o.previous::text \
             FROM (SELECT 1) AS just_one \
             LEFT JOIN {ops} AS o ON o.domain = $1 AND o.token = $2::numeric AND o.op_id = $3"
        ))
        .bind(domain.as_str())
        .bind(op.map(|(token, _)| token.to_string()))
        .bind(op.map(|(_, op_id)| op_id.as_str()))
        .fetch_one(&mut *tx)
        .await
        .map_err(sql_error)?;
        let column = |e: sqlx::Error| corrupt(domain, format!("settings or counter: {e}"));
        let step: Option<String> = after.try_get(0).map_err(column)?;
        let issued_only: bool = after.try_get(1).map_err(column)?;
        let last: Option<String> = after.try_get(2).map_err(column)?;
        let settings = self
            .client_bounds()
            .tighter(BoundsConfig::new(step_column(domain, step)?, issued_only));
        Ok((
            tx,
            Locked::new(
                hwm,
                None,
                decode_op(domain, &after, 3)?,
                settings,
                issued_column(domain, last)?,
            ),
        ))
    }

    async fn change(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        domain: &Domain,
        operation: Operation,
        change: MarkChange,
        remember: Option<Remember>,
    ) -> Result<(), FenceError> {
        self.apply(tx, domain, operation, change, remember, false)
            .await
    }
}

impl PostgresFence {
    /// Applies `change` to the locked mark row and remembers `op`, in one statement, and
    /// forgets the domain's records beyond the newest `op_id_retention`. With nothing to
    /// change, sends the statement anyway when `always` (it fails on an aborted transaction,
    /// whose `COMMIT` would answer `ROLLBACK` without an error).
    pub(crate) async fn apply(
        &self,
        conn: &mut PgConnection,
        domain: &Domain,
        operation: Operation,
        change: MarkChange,
        op: Option<Remember>,
        always: bool,
    ) -> Result<(), FenceError> {
        let retention = i64::try_from(self.op_id_retention()).unwrap_or(i64::MAX);
        let op = op.filter(|_| retention > 0);
        if matches!(change, MarkChange::Keep) && op.is_none() && !always {
            return Ok(());
        }
        let (marks, ops) = (self.tables().marks(), self.tables().ops());
        let mut query = QueryBuilder::<Postgres>::new("WITH ");
        match change {
            MarkChange::Keep => {
                query.push("m AS (SELECT 1)");
            }
            MarkChange::Raise { from, to } => {
                // Guarded by what the lock read: a row that changed under this transaction
                // (a `COMMIT` sent inside it ended the lock early) is not lowered.
                query
                    .push(format!("m AS (UPDATE {marks} SET hwm = "))
                    .push_bind(to.to_string())
                    .push("::numeric WHERE domain = ")
                    .push_bind(domain.as_str().to_owned())
                    .push(" AND hwm IS NOT DISTINCT FROM ")
                    .push_bind(from.map(|t| t.to_string()))
                    .push("::numeric RETURNING 1)");
            }
        }
        if let Some(op) = op {
            query
                .push(format!(
                    ", o AS (INSERT INTO {ops} (domain, token, op_id, kind, revision, previous) VALUES ("
                ))
                .push_bind(domain.as_str().to_owned())
                .push(", ")
                .push_bind(op.token.to_string())
                .push("::numeric, ")
                .push_bind(op.op_id.as_str().to_owned())
                .push(", 'transaction', NULL, ")
                .push_bind(op.previous.map(|p| p.to_string()))
                // The delete does not see the row inserted by the same statement: it keeps
                // the newest `retention - 1` of the others.
                .push(format!(
                    "::numeric) RETURNING 1), d AS (DELETE FROM {ops} WHERE domain = "
                ))
                .push_bind(domain.as_str().to_owned())
                .push(format!(
                    " AND seq <= (SELECT seq FROM {ops} WHERE domain = "
                ))
                .push_bind(domain.as_str().to_owned())
                .push(" ORDER BY seq DESC OFFSET ")
                .push_bind(retention - 1)
                .push(" LIMIT 1) RETURNING 1)");
        }
        query.push(" SELECT count(*) FROM m");
        let changed: i64 = query
            .build_query_scalar()
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| map_error(e, domain, operation, false))?;
        if changed != 1 {
            return Err(FenceError::backend(
                crate::error::BACKEND,
                fence_core::BackendErrorKind::Rejected,
                Some(domain),
                crate::error::PostgresFenceError::MarkChanged,
            ));
        }
        Ok(())
    }
}
