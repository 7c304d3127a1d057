//! `PostgresFence`: the fenced store on PostgreSQL.

use fence_core::raw::pipeline::{self, Current, Decision};
use fence_core::raw::OpMemory;
use fence_core::{
    BoundsConfig, Domain, Entry, EqualTokenPolicy, FenceError, IssuerView, Mutation, Operation,
    OperationId, Snapshot, WriteCondition, WriteOutcome, WriteRequest,
};
use sqlx::Row;

use crate::dialect::PostgresDialect;
use crate::error::{corrupt, map_error, PostgresFenceError, BACKEND};
use crate::mark::{decode_head, decode_op, issued_column, revision_i64, step_column};

/// Values larger than this are refused by default (PostgreSQL's `bytea` holds up to 1 GiB).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 16 * 1024 * 1024;
/// Operation ids remembered per domain by default.
pub use fence_core::DEFAULT_OP_ID_RETENTION;

fence_sql::fenced_store! {
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
    /// let fence = fence_postgres::PostgresFence::builder(pool, "fence").build()?;
    /// fence.put(&Domain::new("invoice-7")?, FencingToken::new(3)?, "paid").await?;
    /// # Ok(()) }
    /// ```
    pub struct PostgresFence: PostgresDialect;
}

impl PostgresFence {
    /// The schema holding the fence's tables.
    pub fn schema(&self) -> &str {
        self.tables().name()
    }

    /// A write in one statement: the schema's `fence_write` locks the mark row and applies the
    /// write only where fence-core's decision would; the outcome is fence-core's decision on
    /// the row as it was, which must agree with what the server did.
    async fn write_now(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        pipeline::validate_write(request, Some(self.max_value_bytes()))?;
        let (state, value) = match request.mutation() {
            Mutation::Put(value) => (b'v', Some(value.to_vec())),
            Mutation::Delete => (b't', None),
            _ => return Err(FenceError::unsupported(BACKEND, "this mutation")),
        };
        let (condition, expected) = match request.condition() {
            WriteCondition::Any => ("any", None),
            WriteCondition::Absent => ("absent", None),
            WriteCondition::Revision(revision) => ("revision", Some(revision_i64(revision))),
            _ => return Err(FenceError::unsupported(BACKEND, "this write condition")),
        };
        let (domain, operation) = (request.domain(), request.operation());
        self.ensure_shape(domain, operation).await?;
        let mut conn = self
            .pool()
            .acquire()
            .await
            .map_err(|e| map_error(e, domain, operation, false))?;
        // One autocommit statement: once it is sent, a lost answer leaves the outcome unknown.
        let row = sqlx::query(&format!(
            "SELECT * FROM {}.fence_write($1, $2::numeric, $3, $4, $5, $6, $7, $8, $9, \
             $10::numeric, $11)",
            self.tables().name()
        ))
        .bind(domain.as_str())
        .bind(request.token().to_string())
        .bind(request.policy() == EqualTokenPolicy::Strict)
        .bind(request.op_id().map(OperationId::as_str))
        .bind(condition)
        .bind(expected)
        .bind(state as i8)
        .bind(value)
        .bind(i64::try_from(self.op_id_retention()).unwrap_or(i64::MAX))
        .bind(self.client_bounds().max_step.map(|step| step.to_string()))
        .bind(self.client_bounds().issued_only)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| map_error(e, domain, operation, true))?;
        let column = |e: sqlx::Error| corrupt(domain, format!("write result: {e}"));
        let created: bool = row.try_get(4).map_err(column)?;
        let applied: bool = row.try_get(8).map_err(column)?;
        let issued: Option<String> = row.try_get(9).map_err(column)?;
        let issued = issued_column(domain, issued)?;
        // The bounds the server applied: this client's and the schema's, the tighter of each,
        // so never looser than this client's own.
        let step: Option<String> = row.try_get(10).map_err(column)?;
        let issued_only: bool = row.try_get(11).map_err(column)?;
        let in_force = BoundsConfig::new(step_column(domain, step)?, issued_only);
        if self.client_bounds().tighter(in_force) != in_force {
            return Err(corrupt(
                domain,
                format!(
                    "fence_write applied {in_force:?}, looser than this client's {:?}",
                    self.client_bounds()
                ),
            ));
        }
        let bounds = in_force.with_issuer(IssuerView::IssuedUpTo(issued));
        let (hwm, entry) = decode_head(domain, &row, created)?;
        let current = Current::with_head(hwm, entry);
        let remembered = match (request.op_id(), decode_op(domain, &row, 5)?) {
            (Some(op_id), Some(op)) => op.as_write(domain, request.token(), op_id)?,
            _ => OpMemory::new(),
        };
        match (
            applied,
            pipeline::decide_write(request, current, &remembered, bounds),
        ) {
            (true, Ok(Decision::Apply { outcome, .. })) => Ok(WriteOutcome::Accepted(outcome)),
            (false, Ok(Decision::Replay(first))) => Ok(WriteOutcome::Duplicate(first)),
            (false, Err(refused)) => Err(refused),
            (applied, decided) => Err(FenceError::backend(
                BACKEND,
                fence_core::BackendErrorKind::Rejected,
                Some(domain),
                PostgresFenceError::Disagreement(if applied {
                    format!("was applied, though fence-core decides {decided:?}")
                } else {
                    format!("was not applied, though fence-core decides {decided:?}")
                }),
            )),
        }
    }

    async fn read_now(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.ensure_shape(domain, Operation::Read).await?;
        let row = sqlx::query(&format!(
            "SELECT hwm::text, state, revision, writer::text, value FROM {} WHERE domain = $1",
            self.tables().marks()
        ))
        .bind(domain.as_str())
        .fetch_optional(self.pool())
        .await
        .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        let Some(row) = row else {
            return Ok(Snapshot::new(None, Entry::Absent));
        };
        let (hwm, entry) = decode_head(domain, &row, false)?;
        fence_sql::snapshot::<PostgresDialect>(domain, &row, hwm, entry, 4)
    }
}
