//! The SQL cases, one body for every SQL adapter (PostgreSQL, MySQL): a fenced write vs the same
//! plain `UPDATE`, a `RowFence` update (the token in the user's row) vs the same plain `UPDATE`,
//! and a fenced transaction vs the same plain transaction; and beside the first and the last, a
//! reference each: the same `UPDATE` after a `SELECT … FOR UPDATE` of its row in a transaction
//! (how a client could fence a row with two statements; not a lower bound: one statement can do
//! better), and the floor of a fenced transaction, the plain transaction with a `SELECT … FOR
//! UPDATE` of a row of another table first (a fenced transaction locks its domain's mark row).
//! Each adapter's module sets up its tables and statements.

use std::future::Future;
use std::sync::Arc;

use fence_core::{
    AdmittedTransaction, Begun, Domain, FenceError, FencedStore, FencingToken, TransactionRequest,
    WriteRequest,
};
use sqlx::{Database, Executor, IntoArguments, Pool};

use crate::measure::{compare, done, OpResult, Plan, CONCURRENCY};
use crate::probe::Probe;
use crate::report::Row;

/// Rows (and domains) the cases spread over.
pub(crate) const ROWS: usize = 64;

/// One adapter's side of the cases.
pub(crate) struct Sql<DB: Database, B, R> {
    /// The backend's name in the report.
    pub(crate) backend: &'static str,
    /// The fence, as a store.
    pub(crate) fence: Arc<dyn FencedStore>,
    /// Begins a fenced transaction.
    pub(crate) begin: B,
    /// The same database, plain.
    pub(crate) pool: Pool<DB>,
    /// `UPDATE accounts SET payload = <1st>, balance = balance + 1 WHERE id = <2nd>`, in the
    /// dialect (MySQL's placeholders are positional: the binds follow the text's order). The
    /// balance changes so that every UPDATE writes, as every fenced write does: MySQL skips
    /// writing a row an UPDATE leaves as it was.
    pub(crate) update_payload: String,
    /// `UPDATE accounts SET balance = balance + 1 WHERE id = <1st>`, in the dialect.
    pub(crate) credit: String,
    /// `SELECT balance FROM accounts WHERE id = <1st> FOR UPDATE`, in the dialect.
    pub(crate) lock_account: String,
    /// `SELECT id FROM locks WHERE id = <1st> FOR UPDATE` (a table of 64 rows of its own).
    pub(crate) lock_other: String,
    /// The adapter's `RowFence` update of row `i % ROWS` (its `fence_token` column) under
    /// token 1, setting what `update_payload` sets.
    pub(crate) row_update: R,
    /// The server's processes.
    pub(crate) probe: Probe,
}

/// The domains of the rows.
pub(crate) fn domains() -> Result<Arc<Vec<Domain>>, String> {
    (0..ROWS)
        .map(|i| Domain::new(format!("account-{i}")))
        .collect::<Result<Vec<_>, _>>()
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

pub(crate) async fn cases<DB, B, BF, Tx, R, RF>(sql: Sql<DB, B, R>) -> Vec<Row>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Vec<u8>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    B: Fn(TransactionRequest) -> BF + Clone + Send + Sync + 'static,
    BF: Future<Output = Result<Begun<Tx>, FenceError>> + Send,
    Tx: AdmittedTransaction<Connection = DB::Connection> + 'static,
    R: Fn(usize, Arc<Vec<u8>>) -> RF + Clone + Send + Sync + 'static,
    RF: Future<Output = OpResult> + Send,
{
    let domains = match domains() {
        Ok(domains) => domains,
        Err(error) => return vec![Row::note(sql.backend, "all cases", error)],
    };
    let payload = Arc::new(vec![b'x'; 1024]);
    let token = FencingToken::MIN;
    let update = Arc::new(sql.update_payload);
    let credit = Arc::new(sql.credit);
    let lock_account = Arc::new(sql.lock_account);
    let lock_other = Arc::new(sql.lock_other);
    let mut rows = Vec::new();
    for concurrency in CONCURRENCY {
        let plan = Plan {
            rounds: 10,
            batch: 200 * concurrency.min(4),
            concurrency,
            group: 1,
        };

        // A fenced write of 1 KiB vs the same UPDATE of one row, each its own transaction.
        let (f, d, p) = (sql.fence.clone(), domains.clone(), payload.clone());
        let (pool, p2, update_plain) = (sql.pool.clone(), payload.clone(), update.clone());
        let (fenced, unfenced) = compare(
            plan,
            &sql.probe,
            move |i| {
                let fence = f.clone();
                let request = WriteRequest::put(d[i % d.len()].clone(), token, p.to_vec());
                async move { done(fence.write(&request).await) }
            },
            move |i| plain_update(pool.clone(), p2.clone(), update_plain.clone(), i),
        )
        .await;
        rows.push(Row::new(
            sql.backend,
            "write 1 KiB vs UPDATE",
            concurrency,
            &fenced,
            &unfenced,
        ));

        // The same UPDATE with the rule in its WHERE (RowFence), vs the plain UPDATE.
        let (row_update, p) = (sql.row_update.clone(), payload.clone());
        let (pool, p2, update_plain) = (sql.pool.clone(), payload.clone(), update.clone());
        let (fenced, unfenced) = compare(
            plan,
            &sql.probe,
            move |i| row_update(i, p.clone()),
            move |i| plain_update(pool.clone(), p2.clone(), update_plain.clone(), i),
        )
        .await;
        rows.push(Row::new(
            sql.backend,
            "RowFence update 1 KiB vs UPDATE",
            concurrency,
            &fenced,
            &unfenced,
        ));

        // The write's reference: the row locked by a read, then the same UPDATE, in a transaction.
        let (pool, p, lock, update_locked) = (
            sql.pool.clone(),
            payload.clone(),
            lock_account.clone(),
            update.clone(),
        );
        let (pool2, p2, update_plain) = (sql.pool.clone(), payload.clone(), update.clone());
        let (floor, unfenced) = compare(
            plan,
            &sql.probe,
            move |i| {
                let (pool, lock, statement) = (pool.clone(), lock.clone(), update_locked.clone());
                locked_then(pool, lock, (statement, Some(p.clone())), i)
            },
            move |i| plain_update(pool2.clone(), p2.clone(), update_plain.clone(), i),
        )
        .await;
        rows.push(Row::new(
            sql.backend,
            "reference: SELECT FOR UPDATE + UPDATE in a transaction vs UPDATE",
            concurrency,
            &floor,
            &unfenced,
        ));

        // A fenced transaction vs the same plain transaction: one UPDATE of the user's row.
        let (begin, d, fenced_credit) = (sql.begin.clone(), domains.clone(), credit.clone());
        let (pool, plain_credit) = (sql.pool.clone(), credit.clone());
        let (fenced, unfenced) = compare(
            plan,
            &sql.probe,
            move |i| {
                let (begin, statement) = (begin.clone(), fenced_credit.clone());
                let request = TransactionRequest::new(d[i % d.len()].clone(), token);
                async move {
                    let Begun::Admitted(mut tx) =
                        begin(request).await.map_err(|e| e.to_string())?
                    else {
                        return Err("a duplicate without an op id".into());
                    };
                    let query = sqlx::query::<DB>(&statement).bind((i % ROWS) as i64);
                    (&mut *tx).execute(query).await.map_err(|e| e.to_string())?;
                    done(tx.commit().await)
                }
            },
            move |i| plain_transaction(pool.clone(), plain_credit.clone(), i),
        )
        .await;
        rows.push(Row::new(
            sql.backend,
            "transaction vs plain transaction",
            concurrency,
            &fenced,
            &unfenced,
        ));

        // The transaction's floor: another table's row locked first, as a fence locks the mark.
        let (pool, lock, floor_credit) = (sql.pool.clone(), lock_other.clone(), credit.clone());
        let (pool2, plain_credit) = (sql.pool.clone(), credit.clone());
        let (floor, unfenced) = compare(
            plan,
            &sql.probe,
            move |i| {
                let (pool, lock, statement) = (pool.clone(), lock.clone(), floor_credit.clone());
                locked_then(pool, lock, (statement, None), i)
            },
            move |i| plain_transaction(pool2.clone(), plain_credit.clone(), i),
        )
        .await;
        rows.push(Row::new(
            sql.backend,
            "floor: transaction with a SELECT FOR UPDATE vs plain transaction",
            concurrency,
            &floor,
            &unfenced,
        ));
    }
    rows
}

/// The plain `UPDATE` (`update_payload`) of row `i % ROWS` with `value`, on its own connection.
async fn plain_update<DB>(
    pool: Pool<DB>,
    value: Arc<Vec<u8>>,
    statement: Arc<String>,
    i: usize,
) -> OpResult
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Vec<u8>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let mut conn = pool.acquire().await.map_err(|e| e.to_string())?;
    let query = sqlx::query::<DB>(&statement)
        .bind(value.to_vec())
        .bind((i % ROWS) as i64);
    done((&mut *conn).execute(query).await)
}

/// The plain transaction: `BEGIN`, the credit (`statement`) of row `i % ROWS`, `COMMIT`.
async fn plain_transaction<DB>(pool: Pool<DB>, statement: Arc<String>, i: usize) -> OpResult
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
    let query = sqlx::query::<DB>(&statement).bind((i % ROWS) as i64);
    (&mut *tx).execute(query).await.map_err(|e| e.to_string())?;
    done(tx.commit().await)
}

/// A reference or floor: in a transaction, row `i % ROWS` of the `lock` statement's table locked by its read,
/// then `statement` on row `i % ROWS` (bound after `value`, when given), then `COMMIT`.
async fn locked_then<DB>(
    pool: Pool<DB>,
    lock: Arc<String>,
    (statement, value): (Arc<String>, Option<Arc<Vec<u8>>>),
    i: usize,
) -> OpResult
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Vec<u8>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let row = (i % ROWS) as i64;
    let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
    let read = sqlx::query::<DB>(&lock).bind(row);
    (&mut *tx).execute(read).await.map_err(|e| e.to_string())?;
    let mut query = sqlx::query::<DB>(&statement);
    if let Some(value) = value {
        query = query.bind(value.to_vec());
    }
    (&mut *tx)
        .execute(query.bind(row))
        .await
        .map_err(|e| e.to_string())?;
    done(tx.commit().await)
}

/// `rows`' update of row `i % ROWS` under token 1, setting what `update_payload` sets.
pub(crate) async fn row_update<D>(
    pool: Pool<D::Db>,
    rows: Arc<fence_sql::RowFence<D>>,
    value: Arc<Vec<u8>>,
    i: usize,
) -> OpResult
where
    D: fence_sql::Dialect,
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
    for<'q> i64: sqlx::Encode<'q, D::Db> + sqlx::Type<D::Db>,
    for<'q> Vec<u8>: sqlx::Encode<'q, D::Db> + sqlx::Type<D::Db>,
    usize: sqlx::ColumnIndex<<D::Db as Database>::Row>,
{
    let mut conn = pool.acquire().await.map_err(|e| e.to_string())?;
    let row = (i % ROWS) as i64;
    let updated = rows
        .update(&mut conn, row, fence_core::FencingToken::MIN, |set| {
            set.push("payload = ")
                .push_bind(value.to_vec())
                .push(", balance = balance + 1");
        })
        .await;
    done(updated)
}
