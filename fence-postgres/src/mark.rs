//! A domain's mark row inside a transaction (claims and fenced transactions): locked and read,
//! the request's remembered operation read after the lock, then changed with the operation
//! remembered in one statement. (Store writes run the schema's `fence_write` instead.)

use std::num::NonZeroU64;

use fence_core::{
    BoundsConfig, Domain, FenceError, FencingToken, InvalidInput, IssuerView, OpKind, OpMemory,
    OpOutcome, OpRecord, Operation, OperationId, RememberedOp, Revision, TokenBounds,
};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Postgres, QueryBuilder, Row, Transaction};

use crate::error::{corrupt, map_error, token_column};
use crate::fence::PostgresFence;

/// What a locked mark row holds.
pub(crate) struct Locked {
    /// The mark.
    pub(crate) hwm: Option<FencingToken>,
    /// The record of the request's (token, op id), if one was asked for and is remembered.
    pub(crate) op: Option<OpRow>,
    /// The admission settings in force: the client's and the schema's, the tighter of each.
    pub(crate) settings: BoundsConfig,
    /// The domain's counter's last token, read after the lock.
    pub(crate) issued: Option<FencingToken>,
}

impl Locked {
    /// The checks beyond the rule, as the settings in force ask for them.
    pub(crate) fn bounds(&self) -> TokenBounds {
        self.settings
            .with_issuer(IssuerView::IssuedUpTo(self.issued))
    }
}

/// A remembered operation as stored: a write (with the revision it produced) or a fenced
/// transaction, and the mark before it.
pub(crate) struct OpRow {
    kind: String,
    revision: Option<i64>,
    previous: Option<FencingToken>,
}

impl OpRow {
    /// As an operator sees it; a (kind, revision) pair Fence never writes is corrupt.
    pub(crate) fn remembered(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: OperationId,
    ) -> Result<RememberedOp, FenceError> {
        let (kind, outcome) = match (self.kind.as_str(), self.revision) {
            ("write", Some(revision)) if revision >= 1 => (OpKind::Write, revision.to_string()),
            // A transaction's outcome is the user's: nothing is kept.
            ("transaction", None) => (OpKind::Transaction, String::new()),
            _ => return Err(self.corrupt(domain)),
        };
        Ok(RememberedOp::new(
            token,
            op_id,
            kind,
            self.previous,
            outcome,
        ))
    }

    /// As a write's memory; an op id first used for a transaction is `OpIdReused`.
    pub(crate) fn as_write(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: &OperationId,
    ) -> Result<OpMemory, FenceError> {
        let revision = match (self.kind.as_str(), self.revision) {
            ("write", Some(revision)) if revision >= 1 => Revision::new(revision.unsigned_abs()),
            ("transaction", None) => {
                return Err(reused(domain, op_id, OpKind::Transaction, OpKind::Write))
            }
            _ => return Err(self.corrupt(domain)),
        };
        let outcome = OpOutcome::Write { revision };
        Ok(OpMemory::from_records([OpRecord::new(
            token,
            op_id.clone(),
            self.previous,
            outcome,
        )]))
    }

    /// As a fenced transaction's: the mark before it; an op id first used for a write is
    /// `OpIdReused`.
    pub(crate) fn as_transaction(
        &self,
        domain: &Domain,
        op_id: &OperationId,
    ) -> Result<Option<FencingToken>, FenceError> {
        match (self.kind.as_str(), self.revision) {
            ("transaction", None) => Ok(self.previous),
            ("write", Some(_)) => Err(reused(domain, op_id, OpKind::Write, OpKind::Transaction)),
            _ => Err(self.corrupt(domain)),
        }
    }

    fn corrupt(&self, domain: &Domain) -> FenceError {
        corrupt(
            domain,
            format!(
                "operation record of kind `{}` with revision {:?}",
                self.kind, self.revision
            ),
        )
    }
}

fn reused(domain: &Domain, op_id: &OperationId, first: OpKind, now: OpKind) -> FenceError {
    InvalidInput::OpIdReused {
        domain: domain.clone(),
        op_id: op_id.clone(),
        first,
        now,
    }
    .into()
}

/// How a transaction changes the locked mark row.
pub(crate) enum MarkChange {
    /// Leave it as it is.
    Keep,
    /// Raise the mark from `from` (what the lock read) to `to`; the entry stays.
    Raise {
        from: Option<FencingToken>,
        to: FencingToken,
    },
}

/// A fenced transaction to remember with the change: its token, op id and the mark before it.
/// (Store writes remember theirs inside the schema's `fence_write`.)
pub(crate) struct Remember {
    pub(crate) token: FencingToken,
    pub(crate) op_id: OperationId,
    pub(crate) previous: Option<FencingToken>,
}

impl PostgresFence {
    /// Begins a transaction and locks the domain's mark row in it (creating the row if
    /// missing; a refusal drops the transaction, which rolls the creation back), then reads, in
    /// one statement of its own, the schema's settings, the domain's counter and the record of
    /// `op`. Concurrent holders of the domain wait on the lock until this transaction ends.
    pub(crate) async fn lock(
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
            Locked {
                hwm,
                op: decode_op(domain, &after, 3)?,
                settings,
                issued: issued_column(domain, last)?,
            },
        ))
    }

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

/// The counter's last token as read (`None`: no row, or a counter at 0 that issued nothing).
pub(crate) fn issued_column(
    domain: &Domain,
    last: Option<String>,
) -> Result<Option<FencingToken>, FenceError> {
    match last.as_deref() {
        None | Some("0") => Ok(None),
        Some(last) => Ok(Some(token_column(domain, last, "issued counter")?)),
    }
}

/// A step bound as read from the schema (`None`: no bound); anything but a token fails closed.
pub(crate) fn step_column(
    domain: &Domain,
    step: Option<String>,
) -> Result<Option<NonZeroU64>, FenceError> {
    step.map(|step| parse_step(&step).map_err(|why| corrupt(domain, why)))
        .transpose()
}

/// A stored step bound: a canonical token (FORMATS.md §1.1).
pub(crate) fn parse_step(text: &str) -> Result<NonZeroU64, String> {
    text.parse::<FencingToken>()
        .map(|step| NonZeroU64::new(step.get()).unwrap_or(NonZeroU64::MIN))
        .map_err(|e| format!("step bound `{text}`: {e}"))
}

/// An entry's head: live (a value, not a tombstone), the writer's token, the revision.
pub(crate) type Head = (bool, FencingToken, Revision);

/// The mark and the entry's head of a row, validated: anything not Fence's fails closed.
/// `fresh` says the row was created by this transaction (its mark is still NULL).
pub(crate) fn decode_head(
    domain: &Domain,
    row: &PgRow,
    fresh: bool,
) -> Result<(Option<FencingToken>, Option<Head>), FenceError> {
    let column = |e: sqlx::Error| corrupt(domain, format!("mark row: {e}"));
    let hwm: Option<String> = row.try_get(0).map_err(column)?;
    let state: Option<i8> = row.try_get(1).map_err(column)?;
    let revision: Option<i64> = row.try_get(2).map_err(column)?;
    let writer: Option<String> = row.try_get(3).map_err(column)?;
    let hwm = match (hwm, fresh) {
        (Some(text), _) => Some(token_column(domain, &text, "high-water mark")?),
        (None, true) => None,
        (None, false) => return Err(corrupt(domain, "mark row without a high-water mark")),
    };
    let entry = match (state.map(|s| s as u8), revision, writer) {
        (None, None, None) => None,
        (Some(kind @ (b'v' | b't')), Some(revision), Some(writer)) if revision >= 1 => {
            let writer = token_column(domain, &writer, "writer token")?;
            if hwm.is_none_or(|hwm| writer > hwm) {
                return Err(corrupt(domain, "writer token above the high-water mark"));
            }
            Some((kind == b'v', writer, Revision::new(revision.unsigned_abs())))
        }
        _ => {
            return Err(corrupt(
                domain,
                "entry columns are not a value or a tombstone",
            ))
        }
    };
    Ok((hwm, entry))
}

/// A remembered operation's row: kind, revision and previous mark in columns `first..first + 3`
/// (`None` when the kind is NULL: nothing remembered).
pub(crate) fn decode_op(
    domain: &Domain,
    row: &PgRow,
    first: usize,
) -> Result<Option<OpRow>, FenceError> {
    let column = |e: sqlx::Error| corrupt(domain, format!("operation record: {e}"));
    let kind: Option<String> = row.try_get(first).map_err(column)?;
    let revision: Option<i64> = row.try_get(first + 1).map_err(column)?;
    let previous: Option<String> = row.try_get(first + 2).map_err(column)?;
    let Some(kind) = kind else {
        return Ok(None);
    };
    let previous = previous
        .map(|p| token_column(domain, &p, "operation record's previous mark"))
        .transpose()?;
    Ok(Some(OpRow {
        kind,
        revision,
        previous,
    }))
}

/// Commits a transaction of `operation` on `domain`: a connection lost once `COMMIT` was sent
/// leaves the outcome unknown (`Ambiguous`).
pub async fn commit(
    tx: Transaction<'static, Postgres>,
    domain: &Domain,
    operation: Operation,
) -> Result<(), FenceError> {
    tx.commit()
        .await
        .map_err(|e| map_error(e, domain, operation, true))
}

pub(crate) fn revision_i64(revision: Revision) -> i64 {
    i64::try_from(revision.get()).unwrap_or(i64::MAX)
}
