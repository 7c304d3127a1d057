//! Fenced transactions, the entry point of SQL adapters (fence-postgres, fence-mysql): the
//! request, what it did and why it did not commit, shared so that every SQL backend answers
//! alike. Each adapter's `begin` and `transaction` run them on its own database.

use std::future::Future;
use std::ops::DerefMut;
use std::pin::Pin;

use async_trait::async_trait;

use crate::{Domain, FenceError, Fencing, FencingToken};

/// The future your transaction's work returns (`Box::pin(async move { … })`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A fenced transaction's domain, token, op id and equal-token policy. With an op id, the
/// transaction is remembered under it (in the same transaction): a retry after an ambiguous
/// commit answers [`Transacted::Duplicate`] and runs nothing again.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransactionRequest {
    fencing: Fencing,
}

crate::fenced_request!(
    TransactionRequest,
    op_id_doc = "The op id is remembered in the same transaction; a duplicate is [`Transacted::Duplicate`] and runs nothing again."
);

impl TransactionRequest {
    /// A transaction on `domain` under `token`, same-owner policy, no op id.
    pub fn new(domain: Domain, token: FencingToken) -> Self {
        TransactionRequest {
            fencing: Fencing::new(domain, token),
        }
    }
}

/// What a fenced transaction did.
#[derive(Debug, PartialEq, Eq)]
pub enum Transacted<T> {
    /// Your work ran and everything committed; the domain's mark is the request's token.
    Committed {
        /// What your work returned.
        value: T,
        /// The mark before the transaction.
        previous_high_water_mark: Option<FencingToken>,
    },
    /// The op id had committed before: nothing ran again.
    Duplicate {
        /// The mark before the first run.
        previous_high_water_mark: Option<FencingToken>,
    },
}

impl<T> Transacted<T> {
    /// The mark before the (first) run.
    pub fn previous_high_water_mark(&self) -> Option<FencingToken> {
        match self {
            Transacted::Committed {
                previous_high_water_mark,
                ..
            }
            | Transacted::Duplicate {
                previous_high_water_mark,
            } => *previous_high_water_mark,
        }
    }

    /// True for a replayed op id.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Transacted::Duplicate { .. })
    }
}

/// Why a fenced transaction did not commit (or may not have).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransactionError<E> {
    /// The fence refused (`Fenced`, invalid input, corrupt state), the database failed, or the
    /// commit's answer was lost (`Ambiguous`: retry with the same op id to learn the outcome).
    #[error(transparent)]
    Fence(#[from] FenceError),
    /// Your work returned an error: the whole transaction, mark included, was rolled back.
    #[error(
        "the fenced transaction on domain `{domain}` was rolled back: its work failed: {error}"
    )]
    Work {
        /// The domain.
        domain: Domain,
        /// What your work returned.
        error: E,
    },
}

/// What an SQL adapter's `begin` found: the token admitted, with the transaction that holds
/// the domain's mark (run your statements on it, then commit), or an op id that had committed
/// before (nothing to run again).
// Not boxed: the transaction is used through `&mut *tx`, once per call.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Begun<Tx> {
    /// The token was admitted: the transaction holds the domain's mark row locked.
    Admitted(Tx),
    /// The op id had committed before: nothing to run again.
    Duplicate {
        /// The mark before the first run.
        previous_high_water_mark: Option<FencingToken>,
    },
}

impl<Tx> crate::raw::OutcomeLabel for Begun<Tx> {
    fn outcome_label(&self) -> &'static str {
        crate::raw::replay_label(matches!(self, Begun::Duplicate { .. }))
    }
}

/// A database transaction a fence admitted: it dereferences to the database connection your
/// statements run on, and commits them with the raised mark.
#[async_trait]
pub trait AdmittedTransaction: DerefMut<Target = Self::Connection> + Send + Sized {
    /// The connection your statements run on.
    type Connection: ?Sized + Send;

    /// The mark before this transaction.
    fn previous_high_water_mark(&self) -> Option<FencingToken>;

    /// Commits your statements and the mark together (`Ambiguous` when the answer to `COMMIT`
    /// was lost).
    async fn commit(self) -> Result<(), FenceError>;
}

/// Runs `work` in the transaction `begun` admitted and commits only if it succeeded (an error
/// from `work` drops the transaction, which rolls everything back, the mark included); a
/// replayed op id runs nothing. The one body of every SQL adapter's `transaction`.
pub async fn run_transaction<Tx, T, E, F>(
    domain: &Domain,
    begun: Begun<Tx>,
    work: F,
) -> Result<Transacted<T>, TransactionError<E>>
where
    Tx: AdmittedTransaction,
    F: for<'c> FnOnce(&'c mut Tx::Connection) -> BoxFuture<'c, Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    let mut tx = match begun {
        Begun::Admitted(tx) => tx,
        Begun::Duplicate {
            previous_high_water_mark,
        } => {
            return Ok(Transacted::Duplicate {
                previous_high_water_mark,
            })
        }
    };
    let previous_high_water_mark = tx.previous_high_water_mark();
    match work(&mut tx).await {
        Ok(value) => {
            tx.commit().await?;
            Ok(Transacted::Committed {
                value,
                previous_high_water_mark,
            })
        }
        Err(error) => Err(TransactionError::Work {
            domain: domain.clone(),
            error,
        }),
    }
}
