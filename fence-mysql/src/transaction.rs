//! Fenced transactions: your SQL on your tables, in the transaction that holds the domain's
//! mark row, so a stale holder's SQL never commits.

use fence_core::raw::observe;
use fence_core::{
    BoxFuture, FenceError, Operation, Transacted, TransactionError, TransactionRequest,
};
use fence_sql::admit_transaction;
use sqlx::{Executor, MySqlConnection};

use crate::dialect::{MySqlDialect, SAVEPOINT};
use crate::error::{map_error, BACKEND};
use crate::fence::MySqlFence;
use crate::mark::MarkChange;

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

impl MySqlFence {
    /// Begins a fenced transaction: locks the domain's mark row, answers a remembered op id
    /// with [`Begun::Duplicate`], refuses a stale token ([`FenceError::Fenced`]: below the
    /// mark, or equal under [`fence_core::EqualTokenPolicy::Strict`]) before any of your SQL
    /// runs, and hands you the transaction, which holds the mark row until it ends.
    /// The mark is raised to the token and the op id remembered in it right away, before your
    /// first statement, so whatever of the transaction commits, commits with them;
    /// [`FencedTransaction::commit`] checks that the transaction is still the one it began.
    ///
    /// Holders of one domain serialize on the mark row: keep the transaction short. The mark
    /// is read with a locking read, so the isolation level (REPEATABLE READ by default) does
    /// not matter to the fence; your own reads follow it. Never send `COMMIT` or `ROLLBACK`
    /// yourself.
    ///
    /// ```no_run
    /// # async fn run(fence: fence_mysql::MySqlFence) -> Result<(), Box<dyn std::error::Error>> {
    /// use fence_core::{Domain, FencingToken, TransactionRequest};
    /// use fence_mysql::Begun;
    /// let request = TransactionRequest::new(Domain::new("account-7")?, FencingToken::new(12)?);
    /// if let Begun::Admitted(mut tx) = fence.begin(&request).await? {
    ///     sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 7")
    ///         .execute(&mut *tx)
    ///         .await?;
    ///     tx.commit().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn begin(&self, request: &TransactionRequest) -> Result<Begun, FenceError> {
        observe(
            BACKEND,
            Operation::Write,
            request.domain(),
            Some(request.token()),
            self.begin_now(request),
        )
        .await
    }

    /// Runs `work` — your SQL on your tables — in a fenced transaction ([`MySqlFence::begin`])
    /// and commits only if the fence admitted the token and `work` succeeded; an error from
    /// `work` rolls everything back. `work` gets the transaction's connection and may capture
    /// only owned data (clone or move what it needs); use [`MySqlFence::begin`] to borrow.
    pub async fn transaction<T, E, F>(
        &self,
        request: &TransactionRequest,
        work: F,
    ) -> Result<Transacted<T>, TransactionError<E>>
    where
        F: for<'c> FnOnce(&'c mut MySqlConnection) -> BoxFuture<'c, Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        let begun = self.begin(request).await?;
        fence_core::raw::run_transaction(request.domain(), begun, work).await
    }

    async fn begin_now(&self, request: &TransactionRequest) -> Result<Begun, FenceError> {
        let (domain, operation) = (request.domain(), Operation::Write);
        let op = request.op_id().map(|op_id| (request.token(), op_id));
        let (tx, locked) = self.lock(domain, operation, op).await?;
        admit_transaction::<MySqlDialect, _, _, _>(request, tx, &locked, |mut tx, admitted| {
            async move {
                // The mark and the op id before the caller's first statement: an implicit
                // commit inside the transaction commits them with what ran before it, never
                // that alone.
                let change = match admitted.raise_to {
                    Some(to) => MarkChange::Raise {
                        from: admitted.previous,
                        to,
                    },
                    None => MarkChange::Keep,
                };
                self.apply(&mut tx, domain, operation, change, admitted.remember)
                    .await?;
                (&mut *tx)
                    .execute(SAVEPOINT)
                    .await
                    .map_err(|e| map_error(e, domain, operation, false))?;
                Ok(FencedTransaction::admitted(
                    tx,
                    request.fencing().clone(),
                    admitted.previous,
                    (),
                ))
            }
        })
        .await
    }
}
