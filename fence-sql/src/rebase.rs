//! What every SQL adapter's `Rebaser` shares: the decision over the locked mark row and the
//! records read back from `fence_rebases`.

use std::time::{Duration, SystemTime};

use fence_core::{
    Domain, FenceError, FencingToken, IssuerView, Operation, OwnerId, Rebase, RebaseRecord,
};
use sqlx::{ColumnIndex, Database, Decode, Executor, IntoArguments, Pool, QueryBuilder, Row};
use sqlx::{Transaction, Type};

use crate::{corrupt, map_error, release, Dialect, Locked, Tables};

/// `rebase`'s decision (see [`Rebase::decide`]) over the mark row `tx` locked as `locked`: the
/// new mark, never below the last token the tables' counter issued for the domain. A refusal
/// releases the row's lock before it returns: nothing changes.
pub async fn decide_rebase<D: Dialect>(
    domain: &Domain,
    rebase: &Rebase,
    tx: Transaction<'static, D::Db>,
    locked: &Locked,
) -> Result<(Transaction<'static, D::Db>, FencingToken), FenceError> {
    match rebase.decide(domain, locked.hwm, IssuerView::IssuedUpTo(locked.issued)) {
        Ok(to) => Ok((tx, to)),
        Err(refused) => {
            release(tx).await;
            Err(refused)
        }
    }
}

/// The re-bases of `domain` in `tables`, oldest first; a record that is not Fence's fails
/// closed (`CorruptState`).
pub async fn rebases<D: Dialect>(
    pool: &Pool<D::Db>,
    tables: &Tables<D>,
    domain: &Domain,
) -> Result<Vec<RebaseRecord>, FenceError>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
    D::TextValue: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    i64: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    let mut query = QueryBuilder::new(format!(
        "SELECT {}, {}, operator, reason, {} FROM {} WHERE domain = ",
        D::token_select("from_mark"),
        D::token_select("to_mark"),
        D::epoch_ms("at"),
        tables.rebases()
    ));
    D::push_domain(&mut query, domain);
    query.push(" ORDER BY seq");
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| map_error::<D>(e, domain, Operation::Read, false))?;
    let rows = query
        .build()
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| map_error::<D>(e, domain, Operation::Read, false))?;
    rows.iter()
        .map(|row| {
            let column = |e: sqlx::Error| corrupt::<D>(domain, format!("re-base record: {e}"));
            let from: D::TokenValue = row.try_get(0).map_err(column)?;
            let to: D::TokenValue = row.try_get(1).map_err(column)?;
            let operator: D::TextValue = row.try_get(2).map_err(column)?;
            let reason: D::TextValue = row.try_get(3).map_err(column)?;
            let at: i64 = row.try_get(4).map_err(column)?;
            let from = D::token_of(domain, from, "re-base's previous mark")?;
            let to = D::token_of(domain, to, "re-base's new mark")?;
            let operator = D::text_of(domain, operator, "re-base's operator")?;
            let reason = D::text_of(domain, reason, "re-base's reason")?;
            let record = OwnerId::new(operator)
                .and_then(|operator| Rebase::new(to, from, operator, reason))
                .map_err(|e| corrupt::<D>(domain, format!("re-base record: {e}")))?;
            Ok(RebaseRecord::new(&record, to, unix_ms(at)))
        })
        .collect()
}

/// A time the database gave as milliseconds since the Unix epoch.
pub fn unix_ms(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
}
