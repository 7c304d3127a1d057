//! PostgreSQL: fenced write vs the same plain `UPDATE`, `RowFence` vs the same `UPDATE`, a fenced
//! transaction vs the same plain transaction, and the references beside them (the cases are
//! `sql.rs`'s).

use std::sync::Arc;

use fence_postgres::{PostgresFence, RowFence};
use sqlx::postgres::PgPoolOptions;

use crate::probe::Probe;
use crate::report::Row;
use crate::sql::{cases, row_update, Sql, ROWS};

pub(crate) async fn run() -> Vec<Row> {
    let url = std::env::var("FENCE_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://fence@127.0.0.1:5440/postgres".into());
    match setup(&url).await {
        // The postmaster and its backends.
        Ok((fence, pool, (schema, accounts))) => {
            let rows = match RowFence::new(&schema, "accounts", "id", "fence_token") {
                Ok(rows) => Arc::new(rows),
                Err(error) => return vec![Row::note("postgres", "all cases", error.to_string())],
            };
            let begin_fence = fence.clone();
            let row_pool = pool.clone();
            cases(Sql {
                backend: "postgres",
                fence: Arc::new(fence),
                begin: move |request| {
                    let fence = begin_fence.clone();
                    async move { fence.begin(&request).await }
                },
                pool,
                update_payload: format!(
                    "UPDATE {accounts} SET payload = $1, balance = balance + 1 WHERE id = $2"
                ),
                credit: format!("UPDATE {accounts} SET balance = balance + 1 WHERE id = $1"),
                lock_account: format!("SELECT balance FROM {accounts} WHERE id = $1 FOR UPDATE"),
                lock_other: format!("SELECT id FROM {schema}.locks WHERE id = $1 FOR UPDATE"),
                row_update: move |i: usize, value: Arc<Vec<u8>>| {
                    row_update(row_pool.clone(), rows.clone(), value, i)
                },
                probe: Probe::server("postgres/postgres.pid"),
            })
            .await
        }
        Err(error) => vec![Row::note("postgres", "all cases", error)],
    }
}

/// A fresh schema with the fence's tables, `accounts(id, balance, payload, fence_token)` and
/// `locks(id)`, rows 0..64; answers the schema and the table's name beside the fence and pool.
async fn setup(
    url: &str,
) -> Result<
    (
        fence_core::Observed<PostgresFence>,
        sqlx::PgPool,
        (String, String),
    ),
    String,
> {
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let schema = format!("bench_{}", crate::measure::run_id());
    fence_postgres::migrate(&pool, &schema)
        .await
        .map_err(|e| e.to_string())?;
    let accounts = format!("{schema}.accounts");
    sqlx::raw_sql(&format!(
        "CREATE TABLE {accounts} (id bigint PRIMARY KEY, balance bigint NOT NULL, payload bytea,
                                  fence_token numeric(20,0));
         INSERT INTO {accounts} SELECT g, 0, NULL, NULL FROM generate_series(0, {rows}) g;
         CREATE TABLE {schema}.locks (id bigint PRIMARY KEY);
         INSERT INTO {schema}.locks SELECT g FROM generate_series(0, {rows}) g;",
        rows = ROWS - 1
    ))
    .execute(&pool)
    .await
    .map_err(|e| e.to_string())?;
    let fence = PostgresFence::builder(pool.clone(), &schema)
        .build()
        .map_err(|e| e.to_string())?;
    Ok((fence, pool, (schema, accounts)))
}
