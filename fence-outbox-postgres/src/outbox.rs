//! `PostgresOutbox`: effects inserted in the fenced transaction, the classic transactional
//! outbox with a fencing token.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fence_core::{Domain, Observed, Operation};
use fence_outbox::{
    record_transition, Effect, EffectKinds, EntryStatus, IdempotencyKey, OutboxConfig, OutboxEntry,
    OutboxError,
};
use fence_postgres::extension::{map_error, token_column};
use fence_postgres::{FencedTransaction, PostgresFence, TransactionRequest};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use crate::notify::Wakeups;

/// The schema's SQL, with `fence_schema` standing for the fence's schema.
pub const SCHEMA_SQL: &str = include_str!("../sql/schema.sql");

/// Creates the outbox tables in `fence`'s schema (idempotent). Run fence-postgres's
/// `migrate` first; run this from your migrations, or run [`SCHEMA_SQL`] yourself. It takes the
/// fence, not a pool and a schema name as fence-postgres's `migrate` does: the outbox's tables
/// belong in the fence's own schema, whose name the fence has already checked.
pub async fn migrate(fence: &PostgresFence) -> Result<(), OutboxError> {
    let sql = SCHEMA_SQL.replace("fence_schema", fence.schema());
    let domain = Domain::new("fence-outbox-migration")?;
    sqlx::raw_sql(&sql)
        .execute(fence.pool())
        .await
        .map_err(|e| map_error(e, &domain, Operation::Write, false))?;
    Ok(())
}

/// A fenced outbox on PostgreSQL: [`PostgresOutbox::record`] inserts effects in a fenced
/// transaction ([`PostgresFence::begin`]), so they commit with your state change or not at all,
/// and a stale holder (refused before its transaction runs) records nothing.
///
/// The relay's side ([`fence_outbox::OutboxStore`]) claims work with `FOR UPDATE SKIP LOCKED`
/// (a relay does not wait behind a writer's open transaction), keeps per-domain order, fences its progress
/// with its own lease token, and wakes on `LISTEN`/`NOTIFY` when idle. Each relay step's
/// transaction is bounded at the server ([`PostgresOutbox::with_step_timeout`]), so a relay
/// frozen inside one cannot hold a domain's row from its successor. Cheap to clone.
#[derive(Clone)]
pub struct PostgresOutbox {
    pub(crate) fence: Observed<PostgresFence>,
    pub(crate) config: Arc<OutboxConfig>,
    pub(crate) wakeups: Arc<Wakeups>,
    pub(crate) step_timeout: Duration,
}

/// How long a relay step's transaction may sit idle at the server before the server ends it,
/// by default: half the default relay lease (`RelayConfig`'s 10 s).
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// What a transition recorded (the type every SQL outbox shares).
pub type PostgresRecorded = fence_outbox::Recorded;

impl PostgresOutbox {
    /// An outbox on `fence`'s pool and schema accepting `kinds`, with the default limits and
    /// one partition (create its tables with [`migrate`]).
    pub fn new(fence: Observed<PostgresFence>, kinds: EffectKinds) -> Self {
        Self::with_config(fence, OutboxConfig::new(kinds))
    }

    /// An outbox with explicit limits and partitioning.
    pub fn with_config(fence: Observed<PostgresFence>, config: OutboxConfig) -> Self {
        let channel = crate::notify::channel(fence.schema());
        PostgresOutbox {
            fence,
            config: Arc::new(config),
            wakeups: Arc::new(Wakeups::new(channel)),
            step_timeout: DEFAULT_STEP_TIMEOUT,
        }
    }

    /// Bounds each relay step's transaction at the server: a session left idle inside one
    /// for longer (its relay frozen by a GC pause, SIGSTOP or a blocked thread) is ended by
    /// PostgreSQL (`idle_in_transaction_session_timeout`, set for the step's transaction only),
    /// which rolls the step back and frees the domain's row for the relay that holds the lease
    /// next. Keep it below the relay lease TTL, so a successor never waits on a frozen relay
    /// for more than its lease. At least 1 ms; default [`DEFAULT_STEP_TIMEOUT`].
    pub fn with_step_timeout(mut self, timeout: Duration) -> Self {
        self.step_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The fence the outbox records under.
    pub fn fence(&self) -> &Observed<PostgresFence> {
        &self.fence
    }

    /// The outbox's limits and partitioning.
    pub fn config(&self) -> &OutboxConfig {
        &self.config
    }

    pub(crate) fn table(&self, name: &str) -> String {
        format!("{}.fence_outbox_{name}", self.fence.schema())
    }

    /// Records `effects` in `tx`, in order, after the domain's earlier entries; they commit
    /// with the transaction. The transaction needs an op id (it is part of every effect's
    /// [`IdempotencyKey`], and makes a retried transition record nothing twice). Effects are
    /// checked against the outbox's kinds and limits before any I/O.
    ///
    /// ```no_run
    /// use fence_core::{Domain, FencingToken, OperationId};
    /// use fence_outbox::Effect;
    /// use fence_postgres::{Begun, TransactionRequest};
    /// # async fn run(outbox: fence_outbox_postgres::PostgresOutbox) -> Result<(), Box<dyn std::error::Error>> {
    /// let order = Domain::new("order-42")?;
    /// let request = TransactionRequest::new(order.clone(), FencingToken::new(7)?)
    ///     .with_op_id(OperationId::new("pay-order-42")?);
    /// // A stale token is refused here, before any of the transaction's SQL runs.
    /// let Begun::Admitted(mut tx) = outbox.fence().begin(&request).await? else {
    ///     return Ok(()); // this op id already committed
    /// };
    /// sqlx::query("UPDATE orders SET status = 'paid' WHERE id = $1")
    ///     .bind(order.as_str())
    ///     .execute(&mut *tx)
    ///     .await?;
    /// let receipt = Effect::new("send-receipt", "https://mail.example/v1/send", r#"{"order":42}"#);
    /// outbox.record(&mut tx, &[receipt]).await?;
    /// tx.commit().await?; // the row and the effect commit together, or neither does
    /// # Ok(()) }
    /// ```
    pub async fn record(
        &self,
        tx: &mut FencedTransaction,
        effects: &[Effect],
    ) -> Result<Vec<IdempotencyKey>, OutboxError> {
        self.config.check_effects(tx.domain(), effects)?;
        self.record_checked(tx, effects).await
    }

    /// [`PostgresOutbox::record`] of effects already checked.
    async fn record_checked(
        &self,
        tx: &mut FencedTransaction,
        effects: &[Effect],
    ) -> Result<Vec<IdempotencyKey>, OutboxError> {
        let domain = tx.domain().clone();
        let token = tx.token();
        let op_id = IdempotencyKey::op_id_of(&domain, tx.op_id())?.clone();
        if effects.is_empty() {
            return Ok(Vec::new());
        }
        let count = i64::try_from(effects.len()).unwrap_or(i64::MAX);
        let partition = i32::from(self.config.partition_of(&domain));
        let sql_error = |e| OutboxError::from(map_error(e, &domain, Operation::Write, false));
        // Number the entries after the domain's last one, learn how many this op id already
        // recorded in the transaction, and wake the partition's relay at commit.
        let row = sqlx::query(&format!(
            "WITH numbered AS (
                 INSERT INTO {domains} AS d (domain, partition, last, done, version)
                 VALUES ($1, $2, $3, 0, 1)
                 ON CONFLICT (domain) DO UPDATE SET last = d.last + $3, version = d.version + 1
                 WHERE d.partition = $2
                 RETURNING last)
             SELECT numbered.last,
                    (SELECT count(*) FROM {entries} WHERE domain = $1 AND token = $4::numeric
                        AND op_id = $5),
                    pg_notify($6, $2::text)
             FROM numbered",
            domains = self.table("domains"),
            entries = self.table("entries"),
        ))
        .bind(domain.as_str())
        .bind(partition)
        .bind(count)
        .bind(token.to_string())
        .bind(op_id.as_str())
        .bind(crate::notify::channel(self.fence.schema()))
        .fetch_optional(&mut **tx)
        .await
        .map_err(sql_error)?;
        let Some(row) = row else {
            // The domain is listed in another partition: nothing was changed.
            let stored: Option<i32> = sqlx::query_scalar(&format!(
                "SELECT partition FROM {} WHERE domain = $1",
                self.table("domains")
            ))
            .bind(domain.as_str())
            .fetch_optional(&mut **tx)
            .await
            .map_err(sql_error)?;
            return Err(OutboxError::Configuration(format!(
                "the outbox lists domain `{domain}` in partition {stored:?}, this writer computes \
                 {partition}: writers and relays must agree on `partitions`"
            )));
        };
        let last: i64 = row.try_get(0).map_err(sql_error)?;
        let prior: i64 = row.try_get(1).map_err(sql_error)?;
        let first_seq = last - count + 1;
        let first_index = usize::try_from(prior).unwrap_or(0);
        let keys: Vec<IdempotencyKey> = (0..effects.len())
            .map(|i| IdempotencyKey::new(&domain, token, &op_id, first_index + i))
            .collect();
        sqlx::query(&format!(
            "INSERT INTO {} (domain, seq, key, op_id, kind, destination, payload, token,
                             recorded_at, status, attempts)
             SELECT $1, $2 + e.ord - 1, e.key, $3, e.kind, e.destination, e.payload,
                    $4::numeric, clock_timestamp(), 'p', 0
             FROM unnest($5::text[], $6::text[], $7::text[], $8::bytea[])
                  WITH ORDINALITY AS e(key, kind, destination, payload, ord)",
            self.table("entries")
        ))
        .bind(domain.as_str())
        .bind(first_seq)
        .bind(op_id.as_str())
        .bind(token.to_string())
        .bind(
            keys.iter()
                .map(|k| k.as_str().to_owned())
                .collect::<Vec<_>>(),
        )
        .bind(
            effects
                .iter()
                .map(|e| e.kind().to_owned())
                .collect::<Vec<_>>(),
        )
        .bind(
            effects
                .iter()
                .map(|e| e.destination().to_owned())
                .collect::<Vec<_>>(),
        )
        .bind(
            effects
                .iter()
                .map(|e| e.payload().to_vec())
                .collect::<Vec<_>>(),
        )
        .execute(&mut **tx)
        .await
        .map_err(sql_error)?;
        Ok(keys)
    }

    /// A transition with no state change of yours: begins a fenced transaction for `request`
    /// (which needs an op id), records `effects`, commits. A retry of a committed op id is a
    /// duplicate and records nothing; a stale token is `Fenced` and records nothing.
    pub async fn transition(
        &self,
        request: &TransactionRequest,
        effects: &[Effect],
    ) -> Result<PostgresRecorded, OutboxError> {
        self.config.check_effects(request.domain(), effects)?;
        let begun = self.fence.begin(request).await?;
        record_transition(begun, async |tx| self.record_checked(tx, effects).await).await
    }

    /// Every entry of `domain` still kept (pending, delivered within retention, dead letters),
    /// in order: for operators and tests.
    pub async fn entries(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        let mut conn = self
            .fence
            .pool()
            .acquire()
            .await
            .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        self.select_entries(&mut conn, domain, 0, i64::MAX, false)
            .await
    }

    /// The dead letters of `domain`, in order: entries given up on, kept until an operator acts.
    pub async fn dead_letters(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        let mut entries = self.entries(domain).await?;
        entries.retain(OutboxEntry::is_dead_letter);
        Ok(entries)
    }

    /// Removes dead letter `seq` of `domain` once an operator has dealt with it (re-sent it by
    /// hand, or recorded a new transition). Returns false when `seq` is not a dead letter.
    pub async fn discard_dead_letter(
        &self,
        domain: &Domain,
        seq: u64,
    ) -> Result<bool, OutboxError> {
        let removed = sqlx::query(&format!(
            "DELETE FROM {} WHERE domain = $1 AND seq = $2 AND status = 'x'",
            self.table("entries")
        ))
        .bind(domain.as_str())
        .bind(i64::try_from(seq).unwrap_or(i64::MAX))
        .execute(self.fence.pool())
        .await
        .map_err(|e| map_error(e, domain, Operation::Write, false))?
        .rows_affected();
        Ok(removed == 1)
    }

    /// Re-drives dead letter `seq` of `domain` once an operator has dealt with its cause: in one
    /// transaction, under the domain's row lock (the relay's too), the dead letter becomes a new
    /// pending entry after the domain's last one, with the same idempotency key, token and
    /// recording time (a sink that saw the key before can deduplicate), and the relay is
    /// woken. Returns the new entry's seq, or `None` when `seq` is not a dead letter.
    pub async fn redrive_dead_letter(
        &self,
        domain: &Domain,
        seq: u64,
    ) -> Result<Option<u64>, OutboxError> {
        let sql_error = |e| OutboxError::from(map_error(e, domain, Operation::Write, false));
        let (domains, entries) = (self.table("domains"), self.table("entries"));
        let mut tx = self.fence.pool().begin().await.map_err(sql_error)?;
        let row: Option<(i64, i32)> = sqlx::query_as(&format!(
            "SELECT last, partition FROM {domains} WHERE domain = $1 FOR UPDATE"
        ))
        .bind(domain.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_error)?;
        let Some((last, partition)) = row else {
            return Ok(None);
        };
        let new_seq = last + 1;
        // The dead letter moves to the new position (its key stays unique: one row holds it).
        let moved = sqlx::query(&format!(
            "UPDATE {entries} SET seq = $3, status = 'p', attempts = 0, last_error = NULL,
                    settled_at = NULL, settled_by = NULL
             WHERE domain = $1 AND seq = $2 AND status = 'x'"
        ))
        .bind(domain.as_str())
        .bind(i64::try_from(seq).unwrap_or(i64::MAX))
        .bind(new_seq)
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?
        .rows_affected();
        if moved != 1 {
            return Ok(None);
        }
        sqlx::query(&format!(
            "UPDATE {domains} SET last = $2, version = version + 1 WHERE domain = $1"
        ))
        .bind(domain.as_str())
        .bind(new_seq)
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?;
        sqlx::query("SELECT pg_notify($1, $2::text)")
            .bind(crate::notify::channel(self.fence.schema()))
            .bind(partition)
            .execute(&mut *tx)
            .await
            .map_err(sql_error)?;
        tx.commit().await.map_err(sql_error)?;
        Ok(u64::try_from(new_seq).ok())
    }

    /// Entries of `domain` after seq `after`, at most `limit`, optionally pending ones only.
    pub(crate) async fn select_entries(
        &self,
        conn: &mut PgConnection,
        domain: &Domain,
        after: i64,
        limit: i64,
        pending_only: bool,
    ) -> Result<Vec<OutboxEntry>, OutboxError> {
        let rows = sqlx::query(&format!(
            "SELECT seq, key, kind, destination, payload, token::text,
                    (extract(epoch FROM recorded_at) * 1000)::bigint, status, attempts,
                    last_error, (extract(epoch FROM settled_at) * 1000)::bigint
             FROM {} WHERE domain = $1 AND seq > $2 AND (NOT $4 OR status = 'p')
             ORDER BY seq LIMIT $3",
            self.table("entries")
        ))
        .bind(domain.as_str())
        .bind(after)
        .bind(limit)
        .bind(pending_only)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        rows.iter().map(|row| decode(domain, row)).collect()
    }
}

/// State at the resource that is not the outbox's, or is damaged.
pub(crate) fn corrupt(domain: &Domain, detail: impl Into<String>) -> OutboxError {
    fence_postgres::extension::corrupt(domain, detail).into()
}

fn decode(domain: &Domain, row: &PgRow) -> Result<OutboxEntry, OutboxError> {
    let column = |e: sqlx::Error| corrupt(domain, format!("outbox entry: {e}"));
    let seq: i64 = row.try_get(0).map_err(column)?;
    let key: String = row.try_get(1).map_err(column)?;
    let kind: String = row.try_get(2).map_err(column)?;
    let destination: String = row.try_get(3).map_err(column)?;
    let payload: Vec<u8> = row.try_get(4).map_err(column)?;
    let token: String = row.try_get(5).map_err(column)?;
    let recorded_at: i64 = row.try_get(6).map_err(column)?;
    let status: i8 = row.try_get(7).map_err(column)?;
    let attempts: i32 = row.try_get(8).map_err(column)?;
    let last_error: Option<String> = row.try_get(9).map_err(column)?;
    let settled_at: Option<i64> = row.try_get(10).map_err(column)?;
    let token =
        token_column(domain, &token, &format!("entry {seq}'s token")).map_err(OutboxError::from)?;
    let attempts = u32::try_from(attempts)
        .map_err(|_| corrupt(domain, format!("entry {seq} has {attempts} attempts")))?;
    let at_ms = |value: Option<i64>| {
        value
            .and_then(|ms| u64::try_from(ms).ok())
            .ok_or_else(|| corrupt(domain, format!("entry {seq} is settled without a time")))
    };
    let status = match status as u8 {
        b'p' => EntryStatus::Pending {
            attempts,
            last_error,
        },
        b'd' => EntryStatus::Delivered {
            attempts,
            at_ms: at_ms(settled_at)?,
        },
        b'x' => EntryStatus::DeadLettered {
            attempts,
            at_ms: at_ms(settled_at)?,
            last_error: last_error.unwrap_or_default(),
        },
        other => {
            return Err(corrupt(
                domain,
                format!("entry {seq} has status `{}`", other.escape_ascii()),
            ))
        }
    };
    Ok(OutboxEntry::new(
        domain.clone(),
        u64::try_from(seq).map_err(|_| corrupt(domain, format!("entry seq {seq}")))?,
        IdempotencyKey::from_recorded(key),
        Effect::new(kind, destination, payload),
        token,
        u64::try_from(recorded_at).unwrap_or(0),
        status,
    ))
}

impl fmt::Debug for PostgresOutbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresOutbox")
            .field("fence", &self.fence)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
