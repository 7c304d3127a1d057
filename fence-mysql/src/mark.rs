//! A domain's mark row: locked and read in the transaction that decides on it, decoded with
//! fence-core's column checks, and changed by the statements a decision calls for.

use async_trait::async_trait;
use fence_core::raw::{EntryHead, StoredOp};
use fence_sql::{Locked, MarkChange, MarkRows, Remember};
use std::num::NonZeroU64;
use std::time::Duration;

use fence_core::{
    Backoff, BoundsConfig, Domain, FenceError, FencingToken, Operation, OperationId, Revision,
};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, Row, Transaction};

use crate::dialect::MySqlDialect;
use crate::error::{corrupt, map_error};
use crate::fence::MySqlFence;

/// Attempts at locking a mark row past deadlocks, and the wait between them.
const LOCK_ATTEMPTS: u32 = 12;
const LOCK_BACKOFF: Backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));

/// True for a deadlock: the server rolled the whole transaction back.
fn is_deadlock(error: &sqlx::Error) -> bool {
    crate::dialect::number(error) == Some(1213)
}

/// How a statement changes the locked mark row: as a claim or a transaction does (fence-sql's
/// [`MarkChange`]), or as a store write does.
pub(crate) enum RowChange {
    /// Keep or raise the mark; the entry stays.
    Mark(MarkChange),
    /// Raise the mark from `from` to the writer's token and replace the entry (a value, or a
    /// tombstone without one).
    Write {
        from: Option<FencingToken>,
        head: EntryHead,
        value: Option<Vec<u8>>,
    },
}

/// A token read from a column (`what` names it), or `CorruptState` when it is 0.
#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))] // public through `extension`
pub fn token_column(domain: &Domain, value: u64, what: &str) -> Result<FencingToken, FenceError> {
    FencingToken::new(value).map_err(|e| corrupt(domain, format!("{what} {value}: {e}")))
}

/// The mark and the entry's head of a row (columns 0..4: hwm, state, revision, writer),
/// validated: anything not Fence's fails closed. A NULL mark is read only on a row [`lock`]
/// created (no mark yet); a committed one was turned to 0 there, and `read` refuses it.
pub(crate) fn decode_head(
    domain: &Domain,
    row: &MySqlRow,
) -> Result<(Option<FencingToken>, Option<EntryHead>), FenceError> {
    let column = |e: sqlx::Error| corrupt(domain, format!("mark row: {e}"));
    let hwm: Option<u64> = row.try_get(0).map_err(column)?;
    let state: Option<Vec<u8>> = row.try_get(1).map_err(column)?;
    let revision: Option<u64> = row.try_get(2).map_err(column)?;
    let writer: Option<u64> = row.try_get(3).map_err(column)?;
    let hwm = hwm
        .map(|h| token_column(domain, h, "high-water mark"))
        .transpose()?;
    let writer = writer
        .map(|w| token_column(domain, w, "writer token"))
        .transpose()?;
    let kind = match state.as_deref() {
        None => None,
        Some([kind]) => Some(*kind),
        Some(_) => return Err(corrupt(domain, "entry state is not one byte")),
    };
    let entry =
        EntryHead::from_columns(hwm, kind, revision, writer).map_err(|why| corrupt(domain, why))?;
    Ok((hwm, entry))
}

#[async_trait]
impl MarkRows for MySqlFence {
    type Dialect = MySqlDialect;

    /// Begins a transaction and locks the domain's mark row in it with a locking read (the
    /// latest committed row, whatever the isolation level); a missing row is created instead
    /// (`INSERT … ON DUPLICATE KEY UPDATE` takes the row's exclusive lock either way, so holders
    /// of one domain queue on it), then read the same way. Then it reads the record of `op`.
    /// A domain's first step costs three statements more than a later one (the missed read,
    /// its rollback, the insert).
    /// A refusal rolls the transaction back, and the creation with it.
    async fn lock(
        &self,
        domain: &Domain,
        operation: Operation,
        op: Option<(FencingToken, &OperationId)>,
    ) -> Result<(Transaction<'static, MySql>, Locked), FenceError> {
        self.ensure_shape(domain, operation).await?;
        let sql_error = |e| map_error(e, domain, operation, false);
        // Concurrent first writers of a domain queue on the row one of them is creating; when
        // that one is refused, its rollback can leave two waiters in a deadlock (error 1213,
        // one of them rolled back). Nothing was decided yet: the victim locks again.
        let mut attempt = 0;
        let (mut tx, row) = loop {
            match self.lock_row(domain).await {
                Err(error) if is_deadlock(&error) && attempt < LOCK_ATTEMPTS => {
                    tokio::time::sleep(LOCK_BACKOFF.delay(attempt)).await;
                    attempt += 1;
                }
                locked => break locked.map_err(sql_error)?,
            }
        };
        let row = row.ok_or_else(|| corrupt(domain, "the mark row vanished"))?;
        let (hwm, entry) = decode_head(domain, &row)?;
        // One plain read, the transaction's first: under REPEATABLE READ its snapshot is taken
        // now, once the mark's lock is held, so every op record written under that lock before
        // (an earlier retry's), every token issued before and the settings stored before
        // (`set_resource_bounds` waits for the transactions holding marks) are seen. Not a
        // locking read: one of a missing op record would take a gap lock, and holders of other
        // domains inserting their records into that gap would deadlock with it.
        let (token, op_id) = match op {
            Some((token, op_id)) => (Some(token.get()), Some(op_id.as_str().as_bytes())),
            None => (None, None),
        };
        let row = sqlx::query(&format!(
            "SELECT s.max_step, s.issued_only, \
             (SELECT last FROM {counters} WHERE domain = ?), o.kind, o.revision, o.previous \
             FROM {settings} s LEFT JOIN {ops} o \
             ON o.domain = ? AND o.token = ? AND o.op_id = ? WHERE s.one = 1",
            counters = self.tables().counters(),
            settings = self.tables().settings(),
            ops = self.tables().ops(),
        ))
        .bind(domain.as_str().as_bytes())
        .bind(domain.as_str().as_bytes())
        .bind(token)
        .bind(op_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_error)?
        .ok_or_else(|| {
            corrupt(
                domain,
                format!(
                    "{} has no row: run fence_mysql::migrate",
                    self.tables().settings()
                ),
            )
        })?;
        let column = |e: sqlx::Error| corrupt(domain, format!("settings or counter: {e}"));
        let step: Option<u64> = row.try_get(0).map_err(column)?;
        let issued_only: u8 = row.try_get(1).map_err(column)?;
        let last: Option<u64> = row.try_get(2).map_err(column)?;
        let step = match step {
            None => None,
            Some(step) => Some(
                NonZeroU64::new(step)
                    .ok_or_else(|| corrupt(domain, "the database's step bound is 0"))?,
            ),
        };
        let settings = self
            .client_bounds()
            .tighter(BoundsConfig::new(step, issued_only != 0));
        let issued = match last {
            None | Some(0) => None,
            Some(last) => Some(token_column(domain, last, "issued counter")?),
        };
        let op = match op {
            None => None,
            Some(_) => decode_op(domain, &row, 3)?,
        };
        Ok((tx, Locked::new(hwm, entry, op, settings, issued)))
    }

    async fn change(
        &self,
        tx: &mut Transaction<'static, MySql>,
        domain: &Domain,
        operation: Operation,
        change: MarkChange,
        remember: Option<Remember>,
    ) -> Result<(), FenceError> {
        self.apply(tx, domain, operation, RowChange::Mark(change), remember)
            .await
    }
}

impl MySqlFence {
    /// Begins a transaction and locks the domain's mark row in it, creating it if missing.
    async fn lock_row(
        &self,
        domain: &Domain,
    ) -> Result<(Transaction<'static, MySql>, Option<MySqlRow>), sqlx::Error> {
        let marks = self.tables().marks();
        let lock =
            format!("SELECT hwm, state, revision, writer FROM {marks} WHERE domain = ? FOR UPDATE");
        // A domain written before has its row: the locking read alone locks it (one statement
        // fewer than creating it). A row with a NULL mark is never committed by Fence: it goes
        // the creating way below, which turns it to 0 for the decoding to refuse.
        let mut tx = self.pool().begin().await?;
        let found = sqlx::query(&lock)
            .bind(domain.as_str().as_bytes())
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(row) = found {
            if row.try_get::<Option<u64>, _>(0).ok().flatten().is_some() {
                return Ok((tx, Some(row)));
            }
        }
        // No row (or a NULL mark): the read's gap lock is let go before creating the row, as
        // two creators holding the gap would deadlock on their inserts.
        tx.rollback().await?;
        let mut tx = self.pool().begin().await?;
        // A committed row never has a NULL mark: one found is set to 0 here, which the decoding
        // refuses (and the refusal rolls back), so NULL below means "created by this statement".
        sqlx::query(&format!(
            "INSERT INTO {marks} (domain) VALUES (?) \
             ON DUPLICATE KEY UPDATE hwm = IF(hwm IS NULL, 0, hwm)"
        ))
        .bind(domain.as_str().as_bytes())
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query(&lock)
            .bind(domain.as_str().as_bytes())
            .fetch_optional(&mut *tx)
            .await?;
        Ok((tx, row))
    }

    /// Applies `change` and remembers `remember` in `tx` (the mark row locked by
    /// the lock (`MarkRows::lock`)), pruning the domain's op ids to the retention.
    pub(crate) async fn apply(
        &self,
        tx: &mut Transaction<'static, MySql>,
        domain: &Domain,
        operation: Operation,
        change: RowChange,
        remember: Option<Remember>,
    ) -> Result<(), FenceError> {
        let sql_error = |e| map_error(e, domain, operation, false);
        let marks = self.tables().marks();
        let changed = match change {
            RowChange::Mark(MarkChange::Keep) => None,
            // Each change names the mark it decided on: the row cannot have moved under the
            // lock, and if it did (a transaction ended early), nothing is changed.
            RowChange::Mark(MarkChange::Raise { from, to }) => Some(
                sqlx::query(&format!(
                    "UPDATE {marks} SET hwm = ? WHERE domain = ? AND hwm <=> ?"
                ))
                .bind(to.get())
                .bind(domain.as_str().as_bytes())
                .bind(from.map(FencingToken::get))
                .execute(&mut **tx)
                .await
                .map_err(sql_error)?,
            ),
            RowChange::Write { from, head, value } => Some(
                sqlx::query(&format!(
                    "UPDATE {marks} SET hwm = ?, state = ?, revision = ?, writer = ?, value = ? \
                     WHERE domain = ? AND hwm <=> ?"
                ))
                .bind(head.token().get())
                .bind(if head.is_live() { &b"v"[..] } else { &b"t"[..] })
                .bind(head.revision().get())
                .bind(head.token().get())
                .bind(value)
                .bind(domain.as_str().as_bytes())
                .bind(from.map(FencingToken::get))
                .execute(&mut **tx)
                .await
                .map_err(sql_error)?,
            ),
        };
        // Matched rows (sqlx connects with CLIENT_FOUND_ROWS): 1 even when nothing changed.
        if changed.is_some_and(|done| done.rows_affected() != 1) {
            return Err(corrupt(
                domain,
                "the locked mark row changed under its transaction",
            ));
        }
        let Some(remember) = remember else {
            return Ok(());
        };
        let retention = self.op_id_retention();
        if retention == 0 {
            return Ok(());
        }
        let ops = self.tables().ops();
        let kind: &[u8] = if remember.revision.is_some() {
            b"write"
        } else {
            b"transaction"
        };
        sqlx::query(&format!(
            "INSERT INTO {ops} (domain, token, op_id, kind, revision, previous) \
             VALUES (?, ?, ?, ?, ?, ?)"
        ))
        .bind(domain.as_str().as_bytes())
        .bind(remember.token.get())
        .bind(remember.op_id.as_str().as_bytes())
        .bind(kind)
        .bind(remember.revision.map(Revision::get))
        .bind(remember.previous.map(FencingToken::get))
        .execute(&mut **tx)
        .await
        .map_err(sql_error)?;
        // The newest `retention` records stay; older ones go, deleted by primary key: a range
        // delete on (domain, seq) would take next-key locks into other domains' gaps.
        let old: Vec<u64> = sqlx::query_scalar(&format!(
            "SELECT seq FROM {ops} WHERE domain = ? ORDER BY seq DESC \
             LIMIT 18446744073709551615 OFFSET ?"
        ))
        .bind(domain.as_str().as_bytes())
        .bind(u64::try_from(retention).unwrap_or(u64::MAX))
        .fetch_all(&mut **tx)
        .await
        .map_err(sql_error)?;
        if !old.is_empty() {
            let marks = vec!["?"; old.len()].join(", ");
            let statement = format!("DELETE FROM {ops} WHERE seq IN ({marks})");
            let mut delete = sqlx::query(&statement);
            for seq in old {
                delete = delete.bind(seq);
            }
            delete.execute(&mut **tx).await.map_err(sql_error)?;
        }
        Ok(())
    }
}

/// A remembered operation's row: kind, revision and previous mark in columns
/// `first..first + 3` (`None` when the kind is NULL: nothing remembered).
pub(crate) fn decode_op(
    domain: &Domain,
    row: &MySqlRow,
    first: usize,
) -> Result<Option<StoredOp>, FenceError> {
    let column = |e: sqlx::Error| corrupt(domain, format!("operation record: {e}"));
    let kind: Option<Vec<u8>> = row.try_get(first).map_err(column)?;
    let revision: Option<u64> = row.try_get(first + 1).map_err(column)?;
    let previous: Option<u64> = row.try_get(first + 2).map_err(column)?;
    let Some(kind) = kind else {
        return Ok(None);
    };
    let previous = previous
        .map(|p| token_column(domain, p, "operation record's previous mark"))
        .transpose()?;
    StoredOp::from_columns(&String::from_utf8_lossy(&kind), revision, previous)
        .map(Some)
        .map_err(|why| corrupt(domain, why))
}
