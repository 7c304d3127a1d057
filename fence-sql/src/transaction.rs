//! The fenced transaction an SQL fence hands out: your SQL on your tables, in the transaction
//! that holds the domain's mark row, so a stale holder's SQL never commits.

use std::fmt;
use std::ops::{Deref, DerefMut};

use fence_core::raw::observe;
use fence_core::{
    AdmittedTransaction, Domain, FenceError, Fencing, FencingToken, Operation, OperationId,
};
use sqlx::{Database, Transaction};

use crate::{map_error, user_sql_error, Dialect};

/// A database transaction admitted by the fence: it holds the domain's mark row locked until
/// it ends, so no other holder of the domain commits in between, and commits the mark (raised
/// to its token, its op id remembered) with your statements. Dereferences to the
/// transaction's connection: run every statement on it, and never send `COMMIT` or `ROLLBACK`
/// yourself. Dropping it without [`FencedTransaction::commit`] rolls everything back, the
/// mark included.
///
/// Each adapter names it for its database (`fence_postgres::FencedTransaction`,
/// `fence_mysql::FencedTransaction`) and says there when the mark is written.
pub struct FencedTransaction<D: Dialect> {
    tx: Transaction<'static, D::Db>,
    fencing: Fencing,
    previous_high_water_mark: Option<FencingToken>,
    pending: D::Pending,
}

impl<D: Dialect> FencedTransaction<D> {
    /// The transaction `tx` of `fencing`'s request, admitted by the adapter over the mark
    /// `previous_high_water_mark`; `pending` is what its [`Dialect::commit_admitted`] needs.
    /// For adapters: users get theirs from the fence's `begin`. Only the adapter can make a
    /// [`Dialect::Pending`] (its fields or constructor are its own), so only it can call this:
    /// a `FencedTransaction` is proof that the fence admitted the token.
    #[doc(hidden)]
    pub fn admitted(
        tx: Transaction<'static, D::Db>,
        fencing: Fencing,
        previous_high_water_mark: Option<FencingToken>,
        pending: D::Pending,
    ) -> Self {
        FencedTransaction {
            tx,
            fencing,
            previous_high_water_mark,
            pending,
        }
    }

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

    /// The mark before this transaction.
    pub fn previous_high_water_mark(&self) -> Option<FencingToken> {
        self.previous_high_water_mark
    }

    /// A failure of your own statements in this transaction as this backend's error on its
    /// domain, classified as the fence's own are (a lost connection is `Unavailable`, never
    /// `Ambiguous`: nothing commits before [`FencedTransaction::commit`]).
    pub fn sql_error(&self, error: sqlx::Error) -> FenceError {
        user_sql_error::<D>(error, self.domain(), Operation::Write, false)
    }

    /// Commits your statements and the mark together. A connection lost once `COMMIT` was sent
    /// is [`FenceError::Ambiguous`]: retry with the same op id to learn the outcome. A
    /// transaction that cannot commit what the fence admitted (aborted by one of your
    /// statements, or ended inside by an implicit commit or the server's rollback) is an error
    /// here, never a success: the adapter's docs say which.
    ///
    /// Counted as a `commit` of the domain in the backend's metrics (the admission by the
    /// fence's `begin` counted as a `write`).
    pub async fn commit(self) -> Result<(), FenceError> {
        let domain = self.fencing.domain().clone();
        let token = self.fencing.token();
        observe(
            D::BACKEND,
            Operation::Commit,
            &domain,
            Some(token),
            self.commit_now(),
        )
        .await
    }

    async fn commit_now(self) -> Result<(), FenceError> {
        D::commit_admitted(self.pending, self.tx, self.fencing.domain()).await
    }

    /// Rolls everything back, the mark included.
    pub async fn rollback(self) -> Result<(), FenceError> {
        self.tx
            .rollback()
            .await
            .map_err(|e| map_error::<D>(e, self.fencing.domain(), Operation::Write, false))
    }
}

#[async_trait::async_trait]
impl<D: Dialect> AdmittedTransaction for FencedTransaction<D>
where
    <D::Db as Database>::Connection: Send,
{
    type Connection = <D::Db as Database>::Connection;

    fn previous_high_water_mark(&self) -> Option<FencingToken> {
        FencedTransaction::previous_high_water_mark(self)
    }

    async fn commit(self) -> Result<(), FenceError> {
        FencedTransaction::commit(self).await
    }
}

impl<D: Dialect> Deref for FencedTransaction<D> {
    type Target = <D::Db as Database>::Connection;

    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl<D: Dialect> DerefMut for FencedTransaction<D> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

impl<D: Dialect> fmt::Debug for FencedTransaction<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedTransaction")
            .field("backend", &D::BACKEND)
            .field("fencing", &self.fencing)
            .field("previous_high_water_mark", &self.previous_high_water_mark)
            .finish_non_exhaustive()
    }
}
