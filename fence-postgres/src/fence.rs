//! `PostgresFence`: the fenced store on PostgreSQL.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use fence_core::pipeline::{self, ClaimDecision, Current, Decision};
use fence_core::{
    Capabilities, Claimed, Domain, Entry, Fence, FenceError, FencedStore, FencingToken,
    InvalidInput, Mutation, OpIdRetention, OpKind, OpMemory, OpOutcome, OpRecord, Operation,
    OperationId, Revision, Snapshot, WriteOutcome, WriteRequest,
};
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{PgConnection, Postgres, Row, Transaction};

use crate::error::{corrupt, map_error, PostgresFenceError, BACKEND};
use crate::schema::{check_shape, Schema, Shape};

/// Values larger than this are refused by default (PostgreSQL's `bytea` holds up to 1 GiB).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 16 * 1024 * 1024;
/// Operation ids remembered per domain by default.
pub const DEFAULT_OP_ID_RETENTION: usize = 1024;

/// The fenced store on PostgreSQL: one mark row per domain in `<schema>.fence_marks`, decided
/// in a transaction that holds the row's lock from the check to the commit, so two holders of
/// one domain serialize at the server and a stale one changes nothing.
///
/// Create the tables first with [`crate::migrate`]. Cheap to clone (the pool is shared).
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use fence_core::{Domain, FencedStoreExt, FencingToken};
/// let pool = sqlx::PgPool::connect("postgres://fence@127.0.0.1:5440/postgres").await?;
/// fence_postgres::migrate(&pool, "fence").await?;
/// let fence = fence_postgres::PostgresFence::new(pool, "fence")?;
/// fence.put(&Domain::new("invoice-7")?, FencingToken::new(3)?, "paid").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresFence {
    pool: PgPool,
    schema: Schema,
    max_value_bytes: usize,
    op_id_retention: usize,
    /// Set once the tables were found with the expected shape (checked on first use).
    shape_checked: Arc<AtomicBool>,
}

/// What a locked mark row holds.
pub(crate) struct Locked {
    pub(crate) current: Current,
    pub(crate) hwm: Option<FencingToken>,
}

impl PostgresFence {
    /// A fence on `pool`, with its tables in `schema` (created by [`crate::migrate`]).
    pub fn new(pool: PgPool, schema: &str) -> Result<Self, InvalidInput> {
        Ok(PostgresFence {
            pool,
            schema: Schema::new(schema)?,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            op_id_retention: DEFAULT_OP_ID_RETENTION,
            shape_checked: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Refuses values larger than `max` bytes, before any I/O.
    pub fn with_max_value_bytes(mut self, max: usize) -> Self {
        self.max_value_bytes = max;
        self
    }

    /// Remembers the newest `count` operation ids per domain (0 turns replay detection off).
    pub fn with_op_id_retention(mut self, count: usize) -> Self {
        self.op_id_retention = count;
        self
    }

    /// The schema holding the fence's tables.
    pub fn schema(&self) -> &str {
        self.schema.name()
    }

    /// The pool the fence runs on.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(crate) fn tables(&self) -> &Schema {
        &self.schema
    }

    /// Checks, once per fence, that the tables have the shape [`crate::migrate`] gives them:
    /// tables of another shape fail closed (`CorruptState`) before anything is read or written.
    pub(crate) async fn ensure_shape(
        &self,
        domain: &Domain,
        operation: Operation,
    ) -> Result<(), FenceError> {
        if self.shape_checked.load(Ordering::Acquire) {
            return Ok(());
        }
        match check_shape(&self.pool, &self.schema)
            .await
            .map_err(|e| map_error(e, domain, operation, false))?
        {
            None => {
                self.shape_checked.store(true, Ordering::Release);
                Ok(())
            }
            Some(Shape::Wrong(detail)) => Err(corrupt(domain, detail)),
            Some(Shape::Missing(table)) => Err(FenceError::backend(
                BACKEND,
                fence_core::BackendErrorKind::NotFound,
                Some(domain),
                PostgresFenceError::NotMigrated {
                    schema: self.schema.name().to_owned(),
                    table,
                },
            )),
        }
    }

    /// Begins a transaction and locks the domain's mark row in it (creating the row if
    /// missing; a refusal drops the transaction, which rolls the creation back). Concurrent
    /// holders of the domain wait on the lock until this transaction ends.
    pub(crate) async fn lock(
        &self,
        domain: &Domain,
        operation: Operation,
    ) -> Result<(Transaction<'static, Postgres>, Locked), FenceError> {
        self.ensure_shape(domain, operation).await?;
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| map_error(e, domain, operation, false))?;
        let marks = self.schema.marks();
        let created = sqlx::query(&format!(
            "INSERT INTO {marks} (domain) VALUES ($1) ON CONFLICT (domain) DO NOTHING"
        ))
        .bind(domain.as_str())
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, domain, operation, false))?
        .rows_affected()
            == 1;
        let row = sqlx::query(&format!(
            "SELECT hwm::text, state, revision, writer::text FROM {marks} WHERE domain = $1 FOR UPDATE"
        ))
        .bind(domain.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| map_error(e, domain, operation, false))?;
        let (hwm, entry) = decode_head(domain, &row, created)?;
        let current = match entry {
            Some((live, _, revision)) => Current::new(hwm, live, Some(revision)),
            None => Current::mark(hwm),
        };
        Ok((tx, Locked { current, hwm }))
    }

    async fn write_now(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        pipeline::validate_write(request, Some(self.max_value_bytes))?;
        let value = match request.mutation() {
            Mutation::Put(value) => Some(value.clone()),
            Mutation::Delete => None,
            _ => return Err(FenceError::unsupported(BACKEND, "this mutation")),
        };
        let domain = request.domain();
        let operation = request.operation();
        let marks = self.schema.marks();
        let (mut tx, locked) = self.lock(domain, operation).await?;
        let remembered = match request.op_id() {
            Some(op_id) => {
                self.find_write(&mut tx, domain, request.token(), op_id)
                    .await?
            }
            None => OpMemory::new(),
        };
        let (accepted, remember) =
            match pipeline::decide_write(request, locked.current, &remembered)? {
                Decision::Replay(first) => return Ok(WriteOutcome::Duplicate(first)),
                Decision::Apply { outcome, remember } => (outcome, remember),
            };
        let (state, bytes) = match &value {
            Some(value) => (b'v' as i8, Some(value.to_vec())),
            None => (b't' as i8, None),
        };
        sqlx::query(&format!(
            "UPDATE {marks} SET hwm = $2::numeric, state = $3, revision = $4, \
             writer = $2::numeric, value = $5 WHERE domain = $1"
        ))
        .bind(domain.as_str())
        .bind(accepted.token.to_string())
        .bind(state)
        .bind(revision_i64(accepted.revision))
        .bind(bytes)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, domain, operation, false))?;
        if let Some(record) = remember {
            let revision = match record.outcome {
                OpOutcome::Write { revision } => revision,
                _ => return Err(FenceError::unsupported(BACKEND, "this operation kind")),
            };
            let (token, op_id, previous) = (record.token, &record.op_id, record.previous);
            self.remember(
                &mut tx,
                domain,
                token,
                op_id,
                Some(revision),
                previous,
                operation,
            )
            .await?;
        }
        commit(tx, domain, operation).await?;
        Ok(WriteOutcome::Accepted(accepted))
    }

    async fn claim_now(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        let (mut tx, locked) = self.lock(domain, Operation::Claim).await?;
        let decision = pipeline::decide_claim(domain, locked.hwm, token)?;
        if let ClaimDecision::Raise(_) = decision {
            self.raise_mark(&mut tx, domain, token, Operation::Claim)
                .await?;
        }
        commit(tx, domain, Operation::Claim).await?;
        Ok(decision.claimed())
    }

    async fn read_now(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.ensure_shape(domain, Operation::Read).await?;
        let row = sqlx::query(&format!(
            "SELECT hwm::text, state, revision, writer::text, value FROM {} WHERE domain = $1",
            self.schema.marks()
        ))
        .bind(domain.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        let Some(row) = row else {
            return Ok(Snapshot::new(None, Entry::Absent));
        };
        let (hwm, entry) = decode_head(domain, &row, false)?;
        let entry = match entry {
            None => Entry::Absent,
            Some((true, token, revision)) => {
                let value: Option<Vec<u8>> = row
                    .try_get(4)
                    .map_err(|e| corrupt(domain, format!("value: {e}")))?;
                let value = value.ok_or_else(|| corrupt(domain, "live entry without a value"))?;
                Entry::Value {
                    value: value.into(),
                    token,
                    revision,
                }
            }
            Some((false, token, revision)) => Entry::Tombstone { token, revision },
        };
        Ok(Snapshot::new(hwm, entry))
    }
}

/// An entry's head: live (a value, not a tombstone), the writer's token, the revision.
type Head = (bool, FencingToken, Revision);

/// The mark and the entry's head of a row, validated: anything not Fence's fails closed.
/// `fresh` says the row was created by this transaction (its mark is still NULL).
fn decode_head(
    domain: &Domain,
    row: &PgRow,
    fresh: bool,
) -> Result<(Option<FencingToken>, Option<Head>), FenceError> {
    let column = |e: sqlx::Error| corrupt(domain, format!("mark row: {e}"));
    let hwm: Option<String> = row.try_get(0).map_err(column)?;
    let state: Option<i8> = row.try_get(1).map_err(column)?;
    let revision: Option<i64> = row.try_get(2).map_err(column)?;
    let writer: Option<String> = row.try_get(3).map_err(column)?;
    let token = |text: &str, what: &str| {
        text.parse::<FencingToken>()
            .map_err(|e| corrupt(domain, format!("{what} `{text}`: {e}")))
    };
    let hwm = match (hwm, fresh) {
        (Some(text), _) => Some(token(&text, "high-water mark")?),
        (None, true) => None,
        (None, false) => return Err(corrupt(domain, "mark row without a high-water mark")),
    };
    let entry = match (state.map(|s| s as u8), revision, writer) {
        (None, None, None) => None,
        (Some(kind @ (b'v' | b't')), Some(revision), Some(writer)) if revision >= 1 => {
            let writer = token(&writer, "writer token")?;
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

/// Commits: a failure once `COMMIT` was sent leaves the outcome unknown (`Ambiguous`).
pub(crate) async fn commit(
    tx: Transaction<'static, Postgres>,
    domain: &Domain,
    operation: Operation,
) -> Result<(), FenceError> {
    tx.commit()
        .await
        .map_err(|e| map_error(e, domain, operation, true))
}

fn revision_i64(revision: Revision) -> i64 {
    i64::try_from(revision.get()).unwrap_or(i64::MAX)
}

impl PostgresFence {
    /// Raises the locked mark row's mark to `token` (the entry stays as it is).
    pub(crate) async fn raise_mark(
        &self,
        conn: &mut PgConnection,
        domain: &Domain,
        token: FencingToken,
        operation: Operation,
    ) -> Result<(), FenceError> {
        sqlx::query(&format!(
            "UPDATE {} SET hwm = $2::numeric WHERE domain = $1",
            self.schema.marks()
        ))
        .bind(domain.as_str())
        .bind(token.to_string())
        .execute(&mut *conn)
        .await
        .map_err(|e| map_error(e, domain, operation, false))?;
        Ok(())
    }

    /// The operation record of (token, op id): kind, revision, previous mark.
    pub(crate) async fn find_op_row(
        &self,
        conn: &mut PgConnection,
        domain: &Domain,
        token: FencingToken,
        op_id: &OperationId,
    ) -> Result<Option<PgRow>, FenceError> {
        sqlx::query(&format!(
            "SELECT kind, revision, previous::text FROM {} \
             WHERE domain = $1 AND token = $2::numeric AND op_id = $3",
            self.schema.ops()
        ))
        .bind(domain.as_str())
        .bind(token.to_string())
        .bind(op_id.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| map_error(e, domain, Operation::Write, false))
    }

    /// The remembered write of (token, op id), as a one-record memory (empty when not found);
    /// an op id first used for a fenced transaction is [`InvalidInput::OpIdReused`].
    async fn find_write(
        &self,
        conn: &mut PgConnection,
        domain: &Domain,
        token: FencingToken,
        op_id: &OperationId,
    ) -> Result<OpMemory, FenceError> {
        let Some(row) = self.find_op_row(conn, domain, token, op_id).await? else {
            return Ok(OpMemory::new());
        };
        let column = |e: sqlx::Error| corrupt(domain, format!("operation record: {e}"));
        let kind: String = row.try_get(0).map_err(column)?;
        let revision: Option<i64> = row.try_get(1).map_err(column)?;
        let previous: Option<String> = row.try_get(2).map_err(column)?;
        let revision = match (kind.as_str(), revision) {
            ("write", Some(revision)) if revision >= 1 => revision,
            ("transaction", None) => {
                return Err(InvalidInput::OpIdReused {
                    domain: domain.clone(),
                    op_id: op_id.clone(),
                    first: OpKind::Script,
                    now: OpKind::Write,
                }
                .into())
            }
            _ => {
                return Err(corrupt(
                    domain,
                    format!("operation record of kind `{kind}` with revision {revision:?}"),
                ))
            }
        };
        let previous = previous
            .map(|p| p.parse::<FencingToken>())
            .transpose()
            .map_err(|e| corrupt(domain, format!("operation record's previous mark: {e}")))?;
        let outcome = OpOutcome::Write {
            revision: Revision::new(revision.unsigned_abs()),
        };
        Ok(OpMemory::from_records([OpRecord::new(
            token,
            op_id.clone(),
            previous,
            outcome,
        )]))
    }

    /// Remembers (token, op id) — a write with its `revision`, or a fenced transaction
    /// (`None`) — and forgets the domain's records beyond the newest `op_id_retention`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn remember(
        &self,
        conn: &mut PgConnection,
        domain: &Domain,
        token: FencingToken,
        op_id: &OperationId,
        revision: Option<Revision>,
        previous: Option<FencingToken>,
        operation: Operation,
    ) -> Result<(), FenceError> {
        let retention = i64::try_from(self.op_id_retention).unwrap_or(i64::MAX);
        if retention == 0 {
            return Ok(()); // replay detection is off
        }
        let ops = self.schema.ops();
        let kind = if revision.is_some() {
            "write"
        } else {
            "transaction"
        };
        sqlx::query(&format!(
            "INSERT INTO {ops} (domain, token, op_id, kind, revision, previous) \
             VALUES ($1, $2::numeric, $3, $4, $5, $6::numeric)"
        ))
        .bind(domain.as_str())
        .bind(token.to_string())
        .bind(op_id.as_str())
        .bind(kind)
        .bind(revision.map(revision_i64))
        .bind(previous.map(|p| p.to_string()))
        .execute(&mut *conn)
        .await
        .map_err(|e| map_error(e, domain, operation, false))?;
        sqlx::query(&format!(
            "DELETE FROM {ops} WHERE domain = $1 AND seq <= \
             (SELECT seq FROM {ops} WHERE domain = $1 ORDER BY seq DESC OFFSET $2 LIMIT 1)"
        ))
        .bind(domain.as_str())
        .bind(retention)
        .execute(&mut *conn)
        .await
        .map_err(|e| map_error(e, domain, operation, false))?;
        Ok(())
    }
}

impl fmt::Debug for PostgresFence {
    // The pool's options may hold a password: only the schema and limits are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresFence")
            .field("schema", &self.schema.name())
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_retention", &self.op_id_retention)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Fence for PostgresFence {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::per_domain(self.op_id_retention))
            .with_max_value_bytes(Some(self.max_value_bytes))
            .with_survives_restart(true)
    }

    async fn do_claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.claim_now(domain, token).await
    }

    async fn do_high_water_mark(
        &self,
        domain: &Domain,
    ) -> Result<Option<FencingToken>, FenceError> {
        Ok(self.read_now(domain).await?.high_water_mark)
    }
}

#[async_trait]
impl FencedStore for PostgresFence {
    async fn do_write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        self.write_now(request).await
    }

    async fn do_read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.read_now(domain).await
    }
}
