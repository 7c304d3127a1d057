//! A fence that begins fenced transactions, and the two entry points every SQL adapter gives
//! its users on top of that.

use async_trait::async_trait;
use fence_core::raw::{observe, run_transaction};
use fence_core::{
    Begun, BoxFuture, FenceError, Operation, Transacted, TransactionError, TransactionRequest,
};
use sqlx::Database;

use crate::{Dialect, FencedTransaction};

/// The connection a fenced transaction of dialect `D` dereferences to.
pub type ConnectionOf<D> = <<D as Dialect>::Db as Database>::Connection;

/// An SQL fence that begins fenced transactions: the adapter's lock of the mark row,
/// fence-core's decision ([`crate::admit_transaction`]) and the dialect's set-up of the
/// admitted transaction. Users call the fence's `begin` and `transaction` instead.
#[async_trait]
pub trait Transactional: Send + Sync {
    /// The fence's dialect.
    type Dialect: Dialect;

    /// Begins a fenced transaction for `request`, without telemetry.
    async fn begin_now(
        &self,
        request: &TransactionRequest,
    ) -> Result<Begun<FencedTransaction<Self::Dialect>>, FenceError>;
}

/// `fence`'s fenced transaction for `request`, counted as a `write` of its domain in the
/// backend's metrics (the fence's `begin`).
pub async fn begin<F: Transactional>(
    fence: &F,
    request: &TransactionRequest,
) -> Result<Begun<FencedTransaction<F::Dialect>>, FenceError> {
    observe(
        <F::Dialect as Dialect>::BACKEND,
        Operation::Write,
        request.domain(),
        Some(request.token()),
        fence.begin_now(request),
    )
    .await
}

/// Runs `work` in `fence`'s fenced transaction for `request` and commits only if the fence
/// admitted the token and `work` succeeded (the fence's `transaction`).
pub async fn transaction<F, T, E, W>(
    fence: &F,
    request: &TransactionRequest,
    work: W,
) -> Result<Transacted<T>, TransactionError<E>>
where
    F: Transactional,
    ConnectionOf<F::Dialect>: Send,
    W: for<'c> FnOnce(&'c mut ConnectionOf<F::Dialect>) -> BoxFuture<'c, Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    let begun = begin(fence, request).await?;
    run_transaction(request.domain(), begun, work).await
}
