//! Fenced transactions: your SQL on your tables, in the transaction that holds the domain's
//! mark row, so a stale holder's SQL never commits.

use fence_core::{FenceError, Operation, TransactionRequest};
use fence_sql::{admit_transaction, Transactional};

use crate::dialect::{PendingMark, PostgresDialect};
use crate::fence::PostgresFence;

/// What [`PostgresFence::begin`] found: the admitted [`FencedTransaction`], or a replayed op id.
pub type Begun = fence_core::Begun<FencedTransaction>;

/// A database transaction admitted by the fence (fence-sql's, for PostgreSQL): it holds the
/// domain's mark row locked until it ends, so no other holder of the domain commits in
/// between; its commit raises the mark to its token with your statements. Dereferences to the
/// transaction's `PgConnection`; dropping it without `commit` rolls everything back, the mark
/// included.
///
/// Its `commit` raises the mark and remembers the op id just before `COMMIT`. A connection
/// lost once `COMMIT` was sent is [`FenceError::Ambiguous`] (retry with the same op id to
/// learn the outcome). A transaction one of your statements aborted commits nothing and is an
/// error there (code `25P02`), never a success. Savepoints inside it (through
/// `sqlx::Connection::begin` on its connection) are fine.
pub type FencedTransaction = fence_sql::FencedTransaction<PostgresDialect>;

fence_sql::fenced_transactions!(fence_postgres, PostgresFence, PostgresDialect);

#[async_trait::async_trait]
impl Transactional for PostgresFence {
    type Dialect = PostgresDialect;

    /// [`PostgresFence::begin`] without telemetry: the lock, fence-core's decision, the set-up.
    async fn begin_now(&self, request: &TransactionRequest) -> Result<Begun, FenceError> {
        let op = request.op_id().map(|op_id| (request.token(), op_id));
        let (tx, locked, txid) = self
            .lock_row(request.domain(), Operation::Write, op)
            .await?;
        admit_transaction::<PostgresDialect, _, _, _>(request, tx, &locked, |tx, admitted| {
            // The mark is raised and the op id remembered by the commit, just before `COMMIT`.
            let pending = PendingMark {
                fence: self.clone(),
                txid,
                change: admitted.change,
                remember: admitted.remember,
            };
            let fencing = request.fencing().clone();
            async move {
                Ok(FencedTransaction::admitted(
                    tx,
                    fencing,
                    admitted.previous,
                    pending,
                ))
            }
        })
        .await
    }
}
