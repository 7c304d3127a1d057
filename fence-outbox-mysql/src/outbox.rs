//! `MySqlOutbox`: effects inserted in the fenced transaction, the classic transactional
//! outbox with a fencing token.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fence_core::{Domain, Observed, Operation};
use fence_mysql::extension::{corrupt as fence_corrupt, map_error, run_script, token_column};
use fence_mysql::{FencedTransaction, MySqlFence, TransactionRequest};
use fence_outbox::{
    record_transition, Effect, EffectKinds, EntryStatus, IdempotencyKey, OutboxConfig, OutboxEntry,
    OutboxError, Recorded,
};
use sqlx::mysql::{MySqlPoolOptions, MySqlRow};
use sqlx::{Executor, MySqlPool, QueryBuilder, Row};

/// The schema's SQL, with `fence_db` standing for the fence's database.
pub const SCHEMA_SQL: &str = include_str!("../sql/schema.sql");

/// Creates the outbox tables in `fence`'s database (idempotent). Run fence-mysql's `migrate`
/// first; run this from your migrations, or run [`SCHEMA_SQL`] yourself. It takes the fence:
/// the outbox's tables belong in the fence's own database, whose name the fence has checked.
pub async fn migrate(fence: &MySqlFence) -> Result<(), OutboxError> {
    run_script(fence, SCHEMA_SQL).await?;
    Ok(())
}

/// A fenced outbox on MySQL or MariaDB: [`MySqlOutbox::record`] inserts effects in a fenced
/// transaction ([`MySqlFence::begin`]), so they commit with your state change or not at all,
/// and a stale holder (refused before its transaction runs) records nothing.
///
/// The relay's side ([`fence_outbox::OutboxStore`]) claims work with `FOR UPDATE SKIP LOCKED`
/// (a relay does not wait behind a writer's open transaction), keeps per-domain order, fences
/// its progress with its own lease token, and polls when idle (MySQL has no `LISTEN`). Relay
/// steps run on connections of their own, which the server closes when one sits idle for the
/// step timeout ([`MySqlOutbox::with_step_timeout`]): a relay frozen inside a step cannot hold
/// a domain's row from its successor. Cheap to clone.
#[derive(Clone)]
pub struct MySqlOutbox {
    pub(crate) fence: Observed<MySqlFence>,
    pub(crate) config: Arc<OutboxConfig>,
    pub(crate) step_timeout: Duration,
    /// The relay steps' connections: the fence's connect options, with the server's idle bound.
    pub(crate) steps: MySqlPool,
}

/// How long a relay step's connection may sit idle at the server before the server closes it
/// (rolling the step back), by default: half the default relay lease (`RelayConfig`'s 10 s).
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(5);

impl MySqlOutbox {
    /// An outbox on `fence`'s pool and database accepting `kinds`, with the default limits and
    /// one partition (create its tables with [`migrate`]).
    pub fn new(fence: Observed<MySqlFence>, kinds: EffectKinds) -> Self {
        Self::with_config(fence, OutboxConfig::new(kinds))
    }

    /// An outbox with explicit limits and partitioning.
    pub fn with_config(fence: Observed<MySqlFence>, config: OutboxConfig) -> Self {
        let steps = step_pool(fence.pool(), DEFAULT_STEP_TIMEOUT);
        MySqlOutbox {
            fence,
            config: Arc::new(config),
            step_timeout: DEFAULT_STEP_TIMEOUT,
            steps,
        }
    }

    /// Bounds each relay step at the server: the connections relay steps run on carry
    /// `wait_timeout` = `timeout` (whole seconds, rounded up, from 1 s to a year), so a relay frozen
    /// inside a step (a GC pause, SIGSTOP, a blocked thread) has its connection closed by the
    /// server, which rolls the step back and frees the domain's row for the relay that holds the
    /// lease next. Keep it below the relay lease TTL. Default [`DEFAULT_STEP_TIMEOUT`]. Call it
    /// before the outbox is used: it replaces the relay steps' connections.
    pub fn with_step_timeout(mut self, timeout: Duration) -> Self {
        self.step_timeout = timeout.max(Duration::from_secs(1));
        self.steps = step_pool(self.fence.pool(), self.step_timeout);
        self
    }

    /// The fence the outbox records under.
    pub fn fence(&self) -> &Observed<MySqlFence> {
        &self.fence
    }

    /// The outbox's limits and partitioning.
    pub fn config(&self) -> &OutboxConfig {
        &self.config
    }

    pub(crate) fn table(&self, name: &str) -> String {
        format!("{}.fence_outbox_{name}", self.fence.database())
    }

    /// Records `effects` in `tx` (a fenced transaction of [`MySqlOutbox::fence`]), in order,
    /// after the domain's earlier entries: they commit with your statements and the mark, or
    /// not at all (the crate's documentation shows a transition). The transaction needs an op
    /// id: it is part of every effect's [`IdempotencyKey`], and makes a retried transition
    /// record nothing twice. Effects are checked against the outbox's kinds and limits before
    /// any I/O.
    pub async fn record(
        &self,
        tx: &mut FencedTransaction,
        effects: &[Effect],
    ) -> Result<Vec<IdempotencyKey>, OutboxError> {
        self.config.check_effects(tx.domain(), effects)?;
        self.record_checked(tx, effects).await
    }

    /// [`MySqlOutbox::record`] of effects already checked.
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
        let count = effects.len() as u64;
        let partition = self.config.partition_of(&domain);
        let sql_error = |e| OutboxError::from(map_error(e, &domain, Operation::Write, false));
        // Number the entries after the domain's last one (the row stays locked until the
        // transaction ends); a row listed in another partition is left as it is.
        sqlx::query(&format!(
            "INSERT INTO {} (domain, part, last_seq, done_seq, version) VALUES (?, ?, ?, 0, 1)
             ON DUPLICATE KEY UPDATE last_seq = IF(part = ?, last_seq + ?, last_seq),
                                     version = IF(part = ?, version + 1, version)",
            self.table("domains")
        ))
        .bind(domain.as_str())
        .bind(partition)
        .bind(count)
        .bind(partition)
        .bind(count)
        .bind(partition)
        .execute(&mut **tx)
        .await
        .map_err(sql_error)?;
        // The row as this transaction left it, and how many entries this op id already
        // recorded in it (a transition recording in several calls).
        let (last, stored, prior): (u64, u16, i64) = sqlx::query_as(&format!(
            "SELECT last_seq, part,
                    (SELECT COUNT(*) FROM {entries} WHERE domain = ? AND token = ? AND op_id = ?)
             FROM {domains} WHERE domain = ? FOR UPDATE",
            domains = self.table("domains"),
            entries = self.table("entries"),
        ))
        .bind(domain.as_str())
        .bind(token.get())
        .bind(op_id.as_str())
        .bind(domain.as_str())
        .fetch_one(&mut **tx)
        .await
        .map_err(sql_error)?;
        if stored != partition {
            return Err(OutboxError::Configuration(format!(
                "the outbox lists domain `{domain}` in partition {stored}, this writer computes \
                 {partition}: writers and relays must agree on `partitions`"
            )));
        }
        let first_seq = last + 1 - count;
        let first_index = usize::try_from(prior).unwrap_or(0);
        let keys: Vec<IdempotencyKey> = (0..effects.len())
            .map(|i| IdempotencyKey::new(&domain, token, &op_id, first_index + i))
            .collect();
        let mut insert = QueryBuilder::new(format!(
            "INSERT INTO {} (domain, seq, idem_key, op_id, kind, destination, payload, token,
                             recorded_at, status, attempts) ",
            self.table("entries")
        ));
        insert.push_values(
            effects.iter().zip(&keys).zip(first_seq..),
            |mut row, ((effect, key), seq)| {
                row.push_bind(domain.as_str())
                    .push_bind(seq)
                    .push_bind(key.as_str())
                    .push_bind(op_id.as_str())
                    .push_bind(effect.kind())
                    .push_bind(effect.destination())
                    .push_bind(&effect.payload()[..])
                    .push_bind(token.get())
                    .push("UTC_TIMESTAMP(6)")
                    .push("'p'")
                    .push("0");
            },
        );
        insert.build().execute(&mut **tx).await.map_err(sql_error)?;
        Ok(keys)
    }

    /// A transition with no state change of yours: begins a fenced transaction for `request`
    /// (which needs an op id), records `effects`, commits. A retry of a committed op id is a
    /// duplicate and records nothing; a stale token is `Fenced` and records nothing.
    pub async fn transition(
        &self,
        request: &TransactionRequest,
        effects: &[Effect],
    ) -> Result<Recorded, OutboxError> {
        self.config.check_effects(request.domain(), effects)?;
        let begun = self.fence.begin(request).await?;
        record_transition(begun, async |tx| self.record_checked(tx, effects).await).await
    }

    /// Every entry of `domain` still kept (pending, delivered within retention, dead letters),
    /// in order: for operators and tests.
    pub async fn entries(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        self.select_entries(domain, false, u64::MAX).await
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
            "DELETE FROM {} WHERE domain = ? AND seq = ? AND status = 'x'",
            self.table("entries")
        ))
        .bind(domain.as_str())
        .bind(seq)
        .execute(self.fence.pool())
        .await
        .map_err(|e| map_error(e, domain, Operation::Write, false))?
        .rows_affected();
        Ok(removed == 1)
    }

    /// Re-drives dead letter `seq` of `domain` once an operator has dealt with its cause: in one
    /// transaction, under the domain's row lock (the relay's too), the dead letter becomes a new
    /// pending entry after the domain's last one, with the same idempotency key, token and
    /// recording time (a sink that saw the key before can deduplicate). Returns the new entry's
    /// seq, or `None` when `seq` is not a dead letter.
    pub async fn redrive_dead_letter(
        &self,
        domain: &Domain,
        seq: u64,
    ) -> Result<Option<u64>, OutboxError> {
        let sql_error = |e| OutboxError::from(map_error(e, domain, Operation::Write, false));
        let (domains, entries) = (self.table("domains"), self.table("entries"));
        let mut tx = self.fence.pool().begin().await.map_err(sql_error)?;
        let last: Option<u64> = sqlx::query_scalar(&format!(
            "SELECT last_seq FROM {domains} WHERE domain = ? FOR UPDATE"
        ))
        .bind(domain.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_error)?;
        let Some(last) = last else {
            return Ok(None);
        };
        let Some(new_seq) = last.checked_add(1) else {
            return Err(corrupt(domain, format!("outbox numbering at {last}")));
        };
        // The dead letter moves to the new position (its key stays unique: one row holds it).
        let moved = sqlx::query(&format!(
            "UPDATE {entries} SET seq = ?, status = 'p', attempts = 0, last_error = NULL,
                    settled_at = NULL, settled_by = NULL
             WHERE domain = ? AND seq = ? AND status = 'x'"
        ))
        .bind(new_seq)
        .bind(domain.as_str())
        .bind(seq)
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?
        .rows_affected();
        if moved != 1 {
            return Ok(None);
        }
        sqlx::query(&format!(
            "UPDATE {domains} SET last_seq = ?, version = version + 1 WHERE domain = ?"
        ))
        .bind(new_seq)
        .bind(domain.as_str())
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?;
        fence_mysql::extension::commit(tx, domain, Operation::Write).await?;
        Ok(Some(new_seq))
    }

    /// Entries of `domain` in order, at most `limit`: every one kept, or the pending ones
    /// after the last settled one (the relay's work).
    pub(crate) async fn select_entries(
        &self,
        domain: &Domain,
        pending_only: bool,
        limit: u64,
    ) -> Result<Vec<OutboxEntry>, OutboxError> {
        let rows = sqlx::query(&format!(
            "SELECT seq, idem_key, kind, destination, payload, token,
                    TIMESTAMPDIFF(MICROSECOND, '1970-01-01', recorded_at) DIV 1000, status,
                    attempts, last_error,
                    TIMESTAMPDIFF(MICROSECOND, '1970-01-01', settled_at) DIV 1000
             FROM {entries} WHERE domain = ? AND (NOT ? OR (status = 'p'
                 AND seq > (SELECT done_seq FROM {domains} WHERE domain = ?)))
             ORDER BY seq LIMIT ?",
            entries = self.table("entries"),
            domains = self.table("domains"),
        ))
        .bind(domain.as_str())
        .bind(pending_only)
        .bind(domain.as_str())
        .bind(limit)
        .fetch_all(self.fence.pool())
        .await
        .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        rows.iter().map(|row| decode(domain, row)).collect()
    }
}

/// The most `wait_timeout` MySQL accepts (a year), in seconds.
const MAX_WAIT_TIMEOUT_S: u64 = 31_536_000;

/// The relay steps' pool: the fence pool's connect options, size and acquire timeout (not its
/// `after_connect` hook); each connection carries the server's idle bound. sqlx closes idle
/// connections before the server would.
fn step_pool(pool: &MySqlPool, timeout: Duration) -> MySqlPool {
    let seconds = timeout
        .as_secs()
        .saturating_add(u64::from(timeout.subsec_nanos() > 0))
        .clamp(1, MAX_WAIT_TIMEOUT_S);
    let set = format!("SET SESSION wait_timeout = {seconds}");
    MySqlPoolOptions::new()
        .max_connections(pool.options().get_max_connections())
        .acquire_timeout(pool.options().get_acquire_timeout())
        .min_connections(0)
        .idle_timeout(Some(timeout / 2))
        .after_connect(move |conn, _| {
            let set = set.clone();
            Box::pin(async move {
                conn.execute(set.as_str()).await?;
                Ok(())
            })
        })
        .connect_lazy_with((*pool.connect_options()).clone())
}

/// State at the resource that is not the outbox's, or is damaged.
pub(crate) fn corrupt(domain: &Domain, detail: impl Into<String>) -> OutboxError {
    fence_corrupt(domain, detail).into()
}

/// A text column of the outbox's (stored as bytes).
fn text(domain: &Domain, bytes: Vec<u8>, what: &str) -> Result<String, OutboxError> {
    String::from_utf8(bytes).map_err(|_| corrupt(domain, format!("{what} is not UTF-8")))
}

fn decode(domain: &Domain, row: &MySqlRow) -> Result<OutboxEntry, OutboxError> {
    let column = |e: sqlx::Error| corrupt(domain, format!("outbox entry: {e}"));
    let seq: u64 = row.try_get(0).map_err(column)?;
    let key: Vec<u8> = row.try_get(1).map_err(column)?;
    let kind: Vec<u8> = row.try_get(2).map_err(column)?;
    let destination: Vec<u8> = row.try_get(3).map_err(column)?;
    let payload: Vec<u8> = row.try_get(4).map_err(column)?;
    let token: u64 = row.try_get(5).map_err(column)?;
    let recorded_at: i64 = row.try_get(6).map_err(column)?;
    let status: Vec<u8> = row.try_get(7).map_err(column)?;
    let attempts: u32 = row.try_get(8).map_err(column)?;
    let last_error: Option<Vec<u8>> = row.try_get(9).map_err(column)?;
    let settled_at: Option<i64> = row.try_get(10).map_err(column)?;
    let token =
        token_column(domain, token, &format!("entry {seq}'s token")).map_err(OutboxError::from)?;
    let last_error = last_error
        .map(|e| String::from_utf8_lossy(&e).into_owned())
        .filter(|e| !e.is_empty());
    let at_ms = |value: Option<i64>| {
        value
            .and_then(|ms| u64::try_from(ms).ok())
            .ok_or_else(|| corrupt(domain, format!("entry {seq} is settled without a time")))
    };
    let status = match status.as_slice() {
        b"p" => EntryStatus::Pending {
            attempts,
            last_error,
        },
        b"d" => EntryStatus::Delivered {
            attempts,
            at_ms: at_ms(settled_at)?,
        },
        b"x" => EntryStatus::DeadLettered {
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
        seq,
        IdempotencyKey::from_recorded(text(domain, key, "an entry's key")?),
        Effect::new(
            text(domain, kind, "an entry's kind")?,
            text(domain, destination, "an entry's destination")?,
            payload,
        ),
        token,
        u64::try_from(recorded_at).unwrap_or(0),
        status,
    ))
}

impl fmt::Debug for MySqlOutbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlOutbox")
            .field("fence", &self.fence)
            .field("config", &self.config)
            .field("step_timeout", &self.step_timeout)
            .finish_non_exhaustive()
    }
}
