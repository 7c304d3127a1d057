//! Retiring a domain: its mark row, counter row, op-id rows and lease row, deleted in one
//! transaction that refuses under a live lease (re-base rows, the audit trail, are kept).

use fence_core::{Domain, FenceError, Operation, Retired};
use sqlx::{ColumnIndex, Database, Decode, Executor, IntoArguments, Pool, QueryBuilder, Type};

use crate::{commit, map_error, release, Dialect, Tables};

/// Retires `domain` from `tables` (the body of each adapter's `Retirer`; the caller checks the
/// tables' shape first). The lease row is locked first, so an acquisition waits behind the
/// retirement, or wins; a live lease refuses it with [`FenceError::LeaseHeld`]. A lost answer
/// to `COMMIT` is `Ambiguous`: retrying is safe (a retirement is idempotent).
pub async fn retire<D: Dialect>(
    pool: &Pool<D::Db>,
    tables: &Tables<D>,
    domain: &Domain,
) -> Result<Retired, FenceError>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
    bool: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    let operation = Operation::Write;
    let sql_error = |e| map_error::<D>(e, domain, operation, false);
    let mut tx = pool.begin().await.map_err(sql_error)?;
    let mut query = QueryBuilder::new(format!(
        "SELECT expires > {} FROM {} WHERE domain = ",
        D::NOW,
        tables.leases()
    ));
    D::push_domain(&mut query, domain);
    query.push(" FOR UPDATE");
    let live: Option<bool> = query
        .build_query_scalar()
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_error)?;
    if live == Some(true) {
        release(tx).await;
        return Err(FenceError::LeaseHeld {
            domain: domain.clone(),
        });
    }
    let mut removed = 0;
    for table in [
        tables.leases(),
        tables.ops(),
        tables.counters(),
        tables.marks(),
    ] {
        let mut delete = QueryBuilder::new(format!("DELETE FROM {table} WHERE domain = "));
        D::push_domain(&mut delete, domain);
        let deleted = delete.build().execute(&mut *tx).await.map_err(sql_error)?;
        removed += usize::try_from(D::rows_affected(&deleted)).unwrap_or(usize::MAX);
    }
    commit::<D>(tx, domain, operation).await?;
    Ok(Retired::new(removed))
}
