//! Fenced transactions: your SQL on your tables, in the transaction that holds the domain's
//! mark row, so a stale holder's SQL never commits.

use fence_core::raw::observe;
use fence_core::{
    BoxFuture, FenceError, Operation, Transacted, TransactionError, TransactionRequest,
};
use fence_sql::admit_transaction;
use sqlx::PgConnection;

use crate::dialect::{PendingMark, PostgresDialect};
use crate::error::BACKEND;
use crate::fence::PostgresFence;
use crate::mark::MarkChange;

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
/// error there (code `25P02`), never a success.
pub type FencedTransaction = fence_sql::FencedTransaction<PostgresDialect>;

impl PostgresFence {
    /// Begins a fenced transaction: locks the domain's mark row, answers a remembered op id
    /// with [`Begun::Duplicate`], refuses a stale token ([`FenceError::Fenced`]: below the
    /// mark, or equal under [`fence_core::EqualTokenPolicy::Strict`]) before any of your SQL
    /// runs, and hands you the transaction, which holds the mark row until it ends.
    /// [`FencedTransaction::commit`] raises the mark to the token and remembers the op id in
    /// it, just before `COMMIT`.
    ///
    /// Holders of one domain serialize on the mark row: keep the transaction short. Run every
    /// statement on it (savepoints through `sqlx::Connection::begin` are fine); never send
    /// `COMMIT` or `ROLLBACK` yourself.
    ///
    /// ```no_run
    /// # async fn run(fence: fence_postgres::PostgresFence) -> Result<(), Box<dyn std::error::Error>> {
    /// use fence_core::{Domain, FencingToken};
    /// use fence_postgres::{Begun, TransactionRequest};
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

    /// Runs `work` — your SQL on your tables — in a fenced transaction ([`PostgresFence::begin`])
    /// and commits only if the fence admitted the token and `work` succeeded; an error from
    /// `work` rolls everything back. `work` gets the transaction's connection and may capture
    /// only owned data (clone or move what it needs); use [`PostgresFence::begin`] to borrow.
    ///
    /// ```no_run
    /// # async fn run(fence: fence_postgres::PostgresFence) -> Result<(), Box<dyn std::error::Error>> {
    /// use fence_core::{Domain, FencingToken};
    /// use fence_postgres::TransactionRequest;
    /// let request = TransactionRequest::new(Domain::new("account-7")?, FencingToken::new(12)?);
    /// let outcome = fence
    ///     .transaction(&request, |conn| {
    ///         Box::pin(async move {
    ///             sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 7")
    ///                 .execute(&mut *conn)
    ///                 .await
    ///         })
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn transaction<T, E, F>(
        &self,
        request: &TransactionRequest,
        work: F,
    ) -> Result<Transacted<T>, TransactionError<E>>
    where
        F: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        let begun = self.begin(request).await?;
        fence_core::raw::run_transaction(request.domain(), begun, work).await
    }

    async fn begin_now(&self, request: &TransactionRequest) -> Result<Begun, FenceError> {
        let op = request.op_id().map(|op_id| (request.token(), op_id));
        let (tx, locked) = self.lock(request.domain(), Operation::Write, op).await?;
        admit_transaction::<PostgresDialect, _, _, _>(request, tx, &locked, |tx, admitted| {
            // The mark is raised and the op id remembered by the commit, just before `COMMIT`.
            let change = match admitted.raise_to {
                Some(to) => MarkChange::Raise {
                    from: admitted.previous,
                    to,
                },
                None => MarkChange::Keep,
            };
            let pending = PendingMark {
                fence: self.clone(),
                change,
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
