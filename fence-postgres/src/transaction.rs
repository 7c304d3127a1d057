//! Fenced transactions: your SQL on your tables, in the transaction that holds the domain's
//! mark row, so a stale holder's SQL never commits.

use std::fmt;
use std::ops::{Deref, DerefMut};

use fence_core::raw::observe;
use fence_core::raw::pipeline::{self, TransactionDecision};
use fence_core::{
    AdmittedTransaction, BoxFuture, Domain, FenceError, Fencing, FencingToken, Operation,
    OperationId, Transacted, TransactionError, TransactionRequest,
};
use sqlx::{PgConnection, Postgres, Transaction};

use crate::error::{map_error, user_sql_error, BACKEND};
use crate::fence::PostgresFence;
use crate::mark::{commit, MarkChange, Remember};

/// What [`PostgresFence::begin`] found: the admitted [`FencedTransaction`], or a replayed op id.
pub type Begun = fence_core::Begun<FencedTransaction>;

/// A database transaction admitted by the fence: it holds the domain's mark row locked until it
/// ends, so no other holder of the domain commits in between; its commit raises the mark to
/// its token with your statements. Dereferences to
/// the transaction's `PgConnection`; dropping it without [`FencedTransaction::commit`] rolls
/// everything back, the mark included.
pub struct FencedTransaction {
    tx: Transaction<'static, Postgres>,
    fence: PostgresFence,
    /// The request's domain, token, op id and policy, as admitted.
    fencing: Fencing,
    previous_high_water_mark: Option<FencingToken>,
    /// The mark change and op record, written by `commit` just before `COMMIT`: the statement
    /// also tells an aborted transaction (whose `COMMIT` answers `ROLLBACK`, not an error).
    pending: Option<(MarkChange, Option<Remember>)>,
}

impl FencedTransaction {
    /// The domain.
    pub fn domain(&self) -> &Domain {
        self.fencing.domain()
    }

    /// The admitted token (the mark once committed).
    pub fn token(&self) -> FencingToken {
        self.fencing.token()
    }

    /// The op id the transaction is remembered under, if any.
    pub fn op_id(&self) -> Option<&OperationId> {
        self.fencing.op_id()
    }

    /// The request's fencing header (domain, token, op id, equal-token policy), as admitted.
    pub fn fencing(&self) -> &Fencing {
        &self.fencing
    }

    /// A failure of your own statements in this transaction as this backend's error on its
    /// domain, classified as the fence's own are (a lost connection is `Unavailable`, never
    /// `Ambiguous`: nothing commits before [`FencedTransaction::commit`]).
    pub fn sql_error(&self, error: sqlx::Error) -> FenceError {
        user_sql_error(error, self.domain(), Operation::Write, false)
    }

    /// The mark before this transaction.
    pub fn previous_high_water_mark(&self) -> Option<FencingToken> {
        self.previous_high_water_mark
    }

    /// Commits your statements and the mark together. A connection lost once `COMMIT` was sent
    /// is [`FenceError::Ambiguous`]: retry with the same op id to learn the outcome. A
    /// transaction one of your statements aborted commits nothing and is an error here (code
    /// `25P02`), never a success.
    ///
    /// Counted as a `commit` of the domain in the `postgres` backend's metrics (the admission
    /// by [`PostgresFence::begin`] counted as a `write`).
    pub async fn commit(self) -> Result<(), FenceError> {
        let domain = self.fencing.domain().clone();
        let token = self.fencing.token();
        observe(
            BACKEND,
            Operation::Commit,
            &domain,
            Some(token),
            self.commit_now(),
        )
        .await
    }

    /// [`FencedTransaction::commit`], unobserved.
    async fn commit_now(mut self) -> Result<(), FenceError> {
        let (change, remember) = self.pending.take().unwrap_or((MarkChange::Keep, None));
        self.fence
            .apply(
                &mut self.tx,
                self.fencing.domain(),
                Operation::Write,
                change,
                remember,
                true,
            )
            .await?;
        commit(self.tx, self.fencing.domain(), Operation::Write).await
    }

    /// Rolls everything back, the mark included.
    pub async fn rollback(self) -> Result<(), FenceError> {
        self.tx
            .rollback()
            .await
            .map_err(|e| map_error(e, self.fencing.domain(), Operation::Write, false))
    }
}

#[async_trait::async_trait]
impl AdmittedTransaction for FencedTransaction {
    type Connection = PgConnection;

    fn previous_high_water_mark(&self) -> Option<FencingToken> {
        FencedTransaction::previous_high_water_mark(self)
    }

    async fn commit(self) -> Result<(), FenceError> {
        FencedTransaction::commit(self).await
    }
}

impl Deref for FencedTransaction {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.tx
    }
}

impl DerefMut for FencedTransaction {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.tx
    }
}

impl fmt::Debug for FencedTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedTransaction")
            .field("fencing", &self.fencing)
            .field("previous_high_water_mark", &self.previous_high_water_mark)
            .finish_non_exhaustive()
    }
}

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
        let (domain, token, operation) = (request.domain(), request.token(), Operation::Write);
        let op = request.op_id().map(|op_id| (token, op_id));
        let (tx, locked) = self.lock(domain, operation, op).await?;
        let raise = match pipeline::decide_transaction(
            request,
            locked.hwm,
            locked.op.as_ref(),
            locked.bounds(),
        )? {
            TransactionDecision::Replay {
                previous_high_water_mark,
            } => {
                return Ok(Begun::Duplicate {
                    previous_high_water_mark,
                })
            }
            TransactionDecision::Admit { raise } => raise,
        };
        let change = if raise {
            MarkChange::Raise {
                from: locked.hwm,
                to: token,
            }
        } else {
            MarkChange::Keep
        };
        let remember = request.op_id().map(|op_id| Remember {
            token,
            op_id: op_id.clone(),
            previous: locked.hwm,
        });
        Ok(Begun::Admitted(FencedTransaction {
            tx,
            fence: self.clone(),
            pending: Some((change, remember)),
            fencing: request.fencing().clone(),
            previous_high_water_mark: locked.hwm,
        }))
    }
}
