//! `MySqlFence`: the fenced store on MySQL and MariaDB.

use fence_core::raw::pipeline::{self, Current, Decision};
use fence_core::raw::{EntryHead, OpMemory};
use fence_core::{
    Domain, Entry, FenceError, Mutation, Operation, Snapshot, WriteOutcome, WriteRequest,
};
use fence_sql::{release, MarkRows, Remember};

use crate::dialect::MySqlDialect;
use crate::error::{commit, corrupt, map_error, BACKEND};
use crate::mark::{decode_head, RowChange};

/// Values larger than this are refused by default (keep it under the server's
/// `max_allowed_packet`: 16 MiB by default on MariaDB 10.11, measured here; 64 MiB on MySQL 8
/// by its documentation, unverified here).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 8 * 1024 * 1024;
/// Operation ids remembered per domain by default.
pub use fence_core::DEFAULT_OP_ID_RETENTION;

fence_sql::fenced_store! {
    /// The fenced store on MySQL or MariaDB: one mark row per domain in `<database>.fence_marks`,
    /// locked (`SELECT … FOR UPDATE`) and decided by fence-core's pipeline in the transaction that
    /// changes it, so two holders of one domain serialize at the server and a stale one changes
    /// nothing. The rule is not copied into SQL: the lock holds from the read to the commit.
    ///
    /// Create the tables first with [`crate::migrate`]. Cheap to clone (the pool is shared).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use fence_core::{Domain, FencedStoreExt, FencingToken};
    /// // FENCE_MYSQL_URL=mysql://fence:fence@127.0.0.1:3340/fence, the tables created by
    /// // `fence_mysql::migrate` in the database `fence` (see `fence_mysql::env`).
    /// let fence = fence_mysql::MySqlFenceBuilder::from_env().await?.build()?;
    /// let written = fence.put(&Domain::new("invoice-7")?, FencingToken::new(3)?, "paid").await?;
    /// # Ok(()) }
    /// ```
    pub struct MySqlFence: MySqlDialect;
}

/// Builds a [`MySqlFence`] on a pool, with its tables in a database (created by
/// [`crate::migrate`]): fence-sql's builder, for MySQL. `build` does no I/O: the tables' shape
/// is checked on first use. [`MySqlFenceBuilder::from_env`] reads the variables of
/// [`crate::env`].
pub type MySqlFenceBuilder = fence_sql::FenceBuilder<MySqlDialect>;

impl MySqlFence {
    /// The database holding the fence's tables.
    pub fn database(&self) -> &str {
        self.tables().name()
    }

    /// A write: the mark row locked, fence-core's decision on it, the change and the op id
    /// in the same transaction.
    async fn write_now(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        pipeline::validate_write(request, Some(self.max_value_bytes()))?;
        let value = match request.mutation() {
            Mutation::Put(value) => Some(value.to_vec()),
            Mutation::Delete => None,
            _ => return Err(FenceError::unsupported(BACKEND, "this mutation")),
        };
        let (domain, token, operation) = (request.domain(), request.token(), request.operation());
        let op = request.op_id().map(|op_id| (token, op_id));
        let (mut tx, locked) = self.lock(domain, operation, op).await?;
        let remembered = match (request.op_id(), &locked.op) {
            (Some(op_id), Some(op)) => op.as_write(domain, token, op_id)?,
            _ => OpMemory::new(),
        };
        let current = Current::with_head(locked.hwm, locked.entry);
        // A refusal or a replay ends the transaction: nothing changes.
        let decided = pipeline::decide_write(request, current, &remembered, locked.bounds());
        let accepted = match decided {
            Ok(Decision::Apply { outcome, .. }) => outcome,
            Ok(Decision::Replay(first)) => {
                release(tx).await;
                return Ok(WriteOutcome::Duplicate(first));
            }
            Err(refused) => {
                release(tx).await;
                return Err(refused);
            }
        };
        let head = match value {
            Some(_) => EntryHead::Value {
                token,
                revision: accepted.revision,
            },
            None => EntryHead::Tombstone {
                token,
                revision: accepted.revision,
            },
        };
        let remember = request
            .op_id()
            .map(|op_id| Remember::new(token, op_id.clone(), locked.hwm, Some(accepted.revision)));
        self.apply(
            &mut tx,
            domain,
            operation,
            RowChange::Write {
                from: locked.hwm,
                head,
                value,
            },
            remember,
        )
        .await?;
        commit(tx, domain, operation).await?;
        Ok(WriteOutcome::Accepted(accepted))
    }

    async fn read_now(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.ensure_shape(domain, Operation::Read).await?;
        // An autocommit read: the latest committed row (a row another transaction is creating
        // is not seen until it commits).
        let row = sqlx::query(&format!(
            "SELECT hwm, state, revision, writer, value FROM {} WHERE domain = ?",
            self.tables().marks()
        ))
        .bind(domain.as_str().as_bytes())
        .fetch_optional(self.pool())
        .await
        .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        let Some(row) = row else {
            return Ok(Snapshot::new(None, Entry::Absent));
        };
        let (hwm, entry) = decode_head(domain, &row)?;
        if hwm.is_none() {
            return Err(corrupt(
                domain,
                "committed mark row without a high-water mark",
            ));
        }
        fence_sql::snapshot::<MySqlDialect>(domain, &row, hwm, entry, 4)
    }
}
