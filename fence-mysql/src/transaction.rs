//! Fenced transactions: your SQL on your tables, in the transaction that holds the domain's
//! mark row, so a stale holder's SQL never commits.

use fence_core::{FenceError, Operation, TransactionRequest};
use fence_sql::{admit_transaction, MarkRows, Transactional};
use sqlx::Executor;

use crate::dialect::{MySqlDialect, SavepointSet, SAVEPOINT};
use crate::error::map_error;
use crate::fence::MySqlFence;

/// What [`MySqlFence::begin`] found: the admitted [`FencedTransaction`], or a replayed op id.
pub type Begun = fence_core::Begun<FencedTransaction>;

/// A database transaction admitted by the fence (fence-sql's, for MySQL): it holds the
/// domain's mark row locked until it ends, so no other holder of the domain commits in
/// between; the mark was raised to its token (and its op id recorded) before your first
/// statement, and commits with them. Dereferences to the transaction's `MySqlConnection`;
/// dropping it without `commit` rolls everything back, the mark included.
///
/// Its `commit`: a connection lost once `COMMIT` was sent is [`FenceError::Ambiguous`] (retry
/// with the same op id to learn the outcome). So is a transaction that ended before this
/// commit: an implicit commit inside it (DDL, `LOCK TABLES`, `BEGIN`, `SET autocommit = 1`)
/// committed what ran before it, or the server rolled it back (a deadlock, error 1213) — never
/// reported as this commit's success. (A statement that failed otherwise was rolled back
/// alone, as MySQL does; the rest of the transaction commits.)
pub type FencedTransaction = fence_sql::FencedTransaction<MySqlDialect>;

fence_sql::fenced_transactions!(fence_mysql, MySqlFence, MySqlDialect);

#[async_trait::async_trait]
impl Transactional for MySqlFence {
    type Dialect = MySqlDialect;

    /// [`MySqlFence::begin`] without telemetry: the lock, fence-core's decision, the set-up.
    async fn begin_now(&self, request: &TransactionRequest) -> Result<Begun, FenceError> {
        let (domain, operation) = (request.domain(), Operation::Write);
        let op = request.op_id().map(|op_id| (request.token(), op_id));
        let (tx, locked) = self.lock(domain, operation, op).await?;
        admit_transaction::<MySqlDialect, _, _, _>(request, tx, &locked, |mut tx, admitted| {
            async move {
                // The mark and the op id before the caller's first statement: an implicit
                // commit inside the transaction commits them with what ran before it, never
                // that alone.
                self.change(
                    &mut tx,
                    domain,
                    operation,
                    admitted.change,
                    admitted.remember,
                )
                .await?;
                (&mut *tx)
                    .execute(SAVEPOINT)
                    .await
                    .map_err(|e| map_error(e, domain, operation, false))?;
                Ok(FencedTransaction::admitted(
                    tx,
                    request.fencing().clone(),
                    admitted.previous,
                    SavepointSet::new(),
                ))
            }
        })
        .await
    }
}
