//! Every sqlx error mapped in one place, and how a fence's transaction ends.

use fence_core::{Domain, FenceError, Operation};
use sqlx::Transaction;

use crate::Dialect;

/// Maps a sqlx error of the fence's own SQL for `operation` on `domain`: a column missing or
/// of another type is the fence's tables in another shape (`CorruptState`, nothing changed);
/// the rest as [`user_sql_error`]. `after_send`: the request may have taken effect (a `COMMIT`
/// whose answer was lost), so a lost connection is `Ambiguous`, never a guess.
pub fn map_error<D: Dialect>(
    error: sqlx::Error,
    domain: &Domain,
    operation: Operation,
    after_send: bool,
) -> FenceError {
    if D::classify(&error).shape {
        let detail = match &error {
            sqlx::Error::Database(db) => db.message().to_owned(),
            other => other.to_string(),
        };
        return corrupt::<D>(
            domain,
            format!("the fence's tables do not have the expected shape: {detail}"),
        );
    }
    user_sql_error::<D>(error, domain, operation, after_send)
}

/// Maps a sqlx error of a statement of the user's own (a per-row `SET` list, a statement in a
/// fenced transaction): like [`map_error`], but a missing column is the user's mistake, not the
/// fence's corrupt state.
pub fn user_sql_error<D: Dialect>(
    error: sqlx::Error,
    domain: &Domain,
    operation: Operation,
    after_send: bool,
) -> FenceError {
    let class = D::classify(&error);
    if after_send && class.lost {
        return FenceError::Ambiguous {
            domain: domain.clone(),
            operation,
            source: Box::new(D::Error::from(error)),
        };
    }
    FenceError::backend(D::BACKEND, class.kind, Some(domain), D::Error::from(error))
}

/// State at the resource that is not Fence's, or is damaged.
pub fn corrupt<D: Dialect>(domain: &Domain, detail: impl Into<String>) -> FenceError {
    FenceError::corrupt(D::BACKEND, domain, detail)
}

/// Commits a transaction of `operation` on `domain`: a connection lost once `COMMIT` was sent
/// leaves the outcome unknown (`Ambiguous`).
pub async fn commit<D: Dialect>(
    tx: Transaction<'static, D::Db>,
    domain: &Domain,
    operation: Operation,
) -> Result<(), FenceError> {
    tx.commit()
        .await
        .map_err(|e| map_error::<D>(e, domain, operation, true))
}

/// Ends a transaction that changes nothing (a refusal, a replay, a claim at the mark) now, so
/// the rows it locked are free when the call returns: a dropped transaction is rolled back
/// later, on another task, once the pool takes its connection back, and the domain's next
/// holder would wait for that (or skip the row, under `SKIP LOCKED`). A rollback that fails
/// leaves a broken connection, whose transaction the server ends.
pub async fn release<DB: sqlx::Database>(tx: Transaction<'static, DB>) {
    let _ = tx.rollback().await;
}
