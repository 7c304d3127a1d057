//! MySQL (MariaDB here): fenced write vs the same plain `UPDATE`, `RowFence` vs the same
//! `UPDATE`, a fenced transaction vs the same plain transaction, and the references beside them
//! (the cases are `sql.rs`'s).

use std::sync::Arc;

use fence_mysql::{MySqlFence, RowFence};
use sqlx::mysql::MySqlPoolOptions;

use crate::probe::Probe;
use crate::report::Row;
use crate::sql::{cases, row_update, Sql, ROWS};

pub(crate) async fn run() -> Vec<Row> {
    let url = std::env::var("FENCE_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://fence:fence@127.0.0.1:3340/fence".into());
    match setup(&url).await {
        Ok((fence, pool, (database, accounts))) => {
            let rows = match RowFence::new(&database, "accounts", "id", "fence_token") {
                Ok(rows) => Arc::new(rows),
                Err(error) => return vec![Row::note("mysql", "all cases", error.to_string())],
            };
            let begin_fence = fence.clone();
            let row_pool = pool.clone();
            cases(Sql {
                backend: "mysql",
                fence: Arc::new(fence),
                begin: move |request| {
                    let fence = begin_fence.clone();
                    async move { fence.begin(&request).await }
                },
                pool,
                update_payload: format!(
                    "UPDATE {accounts} SET payload = ?, balance = balance + 1 WHERE id = ?"
                ),
                credit: format!("UPDATE {accounts} SET balance = balance + 1 WHERE id = ?"),
                lock_account: format!("SELECT balance FROM {accounts} WHERE id = ? FOR UPDATE"),
                lock_other: format!("SELECT id FROM {database}.locks WHERE id = ? FOR UPDATE"),
                row_update: move |i: usize, value: Arc<Vec<u8>>| {
                    row_update(row_pool.clone(), rows.clone(), value, i)
                },
                probe: Probe::server("mariadb/mariadbd.pid"),
            })
            .await
        }
        Err(error) => vec![Row::note("mysql", "all cases", error)],
    }
}

/// A fresh database with the fence's tables, `accounts(id, balance, payload, fence_token)` and
/// `locks(id)`, rows 0..64; answers the database and the table's name beside the fence and pool.
async fn setup(
    url: &str,
) -> Result<
    (
        fence_core::Observed<MySqlFence>,
        sqlx::MySqlPool,
        (String, String),
    ),
    String,
> {
    let pool = MySqlPoolOptions::new()
        .max_connections(16)
        .connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let database = format!("bench_{}", crate::measure::run_id());
    fence_mysql::migrate(&pool, &database)
        .await
        .map_err(|e| e.to_string())?;
    let accounts = format!("{database}.accounts");
    sqlx::raw_sql(&format!(
        "CREATE TABLE {accounts} (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, payload LONGBLOB,
                                  fence_token BIGINT UNSIGNED NULL)"
    ))
    .execute(&pool)
    .await
    .map_err(|e| e.to_string())?;
    let values: Vec<String> = (0..ROWS).map(|i| format!("({i}, 0)")).collect();
    let ids: Vec<String> = (0..ROWS).map(|i| format!("({i})")).collect();
    sqlx::raw_sql(&format!(
        "INSERT INTO {accounts} (id, balance) VALUES {};
         CREATE TABLE {database}.locks (id BIGINT PRIMARY KEY);
         INSERT INTO {database}.locks (id) VALUES {};",
        values.join(", "),
        ids.join(", ")
    ))
    .execute(&pool)
    .await
    .map_err(|e| e.to_string())?;
    let fence = MySqlFence::builder(pool.clone(), &database)
        .build()
        .map_err(|e| e.to_string())?;
    Ok((fence, pool, (database, accounts)))
}
