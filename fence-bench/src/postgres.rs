//! PostgreSQL: fenced write vs the same plain `UPDATE`, and a fenced transaction vs the same
//! plain transaction.

use std::sync::Arc;

use fence_core::{Domain, FencedStore, FencingToken, Observed, WriteRequest};
use fence_postgres::{Begun, PostgresFence, TransactionRequest};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::measure::{compare, done, Plan, CONCURRENCY};
use crate::probe::Probe;
use crate::report::Row;

/// Rows (and domains) the cases spread over.
const ROWS: usize = 64;

pub(crate) async fn run() -> Vec<Row> {
    match run_cases().await {
        Ok(rows) => rows,
        Err(error) => vec![Row::note("postgres", "all cases", error)],
    }
}

/// A fresh schema with the fence's tables and `accounts(id, balance, payload)`, rows 0..64.
async fn setup() -> Result<(Observed<PostgresFence>, PgPool, String, Arc<Vec<Domain>>), String> {
    let url = std::env::var("FENCE_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://fence@127.0.0.1:5440/postgres".into());
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect(&url)
        .await
        .map_err(|e| e.to_string())?;
    let run = crate::measure::run_id();
    let schema = format!("bench_{run}");
    fence_postgres::migrate(&pool, &schema)
        .await
        .map_err(|e| e.to_string())?;
    let accounts = format!("{schema}.accounts");
    sqlx::raw_sql(&format!(
        "CREATE TABLE {accounts} (id bigint PRIMARY KEY, balance bigint NOT NULL, payload bytea);
         INSERT INTO {accounts} SELECT g, 0, NULL FROM generate_series(0, {}) g;",
        ROWS - 1
    ))
    .execute(&pool)
    .await
    .map_err(|e| e.to_string())?;
    let fence = PostgresFence::builder(pool.clone(), &schema)
        .build()
        .map_err(|e| e.to_string())?;
    let domains = (0..ROWS)
        .map(|i| Domain::new(format!("account-{i}")))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    Ok((fence, pool, accounts, Arc::new(domains)))
}

async fn run_cases() -> Result<Vec<Row>, String> {
    let (fence, pool, accounts, domains) = setup().await?;
    let payload = Arc::new(vec![b'x'; 1024]);
    let token = FencingToken::MIN;
    let mut rows = Vec::new();
    // The postmaster and its backends.
    let probe = Probe::server("postgres/postgres.pid");
    for concurrency in CONCURRENCY {
        let plan = Plan {
            rounds: 10,
            batch: 200 * concurrency.min(4),
            concurrency,
            group: 1,
        };

        // A fenced write of 1 KiB vs the same UPDATE of one row, each its own transaction.
        let (f, d, p) = (fence.clone(), domains.clone(), payload.clone());
        let (pool2, p2) = (pool.clone(), payload.clone());
        let update = Arc::new(format!("UPDATE {accounts} SET payload = $2 WHERE id = $1"));
        let (fenced, unfenced) = compare(
            plan,
            &probe,
            move |i| {
                let fence = f.clone();
                let request = WriteRequest::put(d[i % d.len()].clone(), token, p.to_vec());
                async move { done(fence.write(&request).await) }
            },
            move |i| {
                let (pool, value, sql) = (pool2.clone(), p2.clone(), update.clone());
                async move {
                    sqlx::query(&sql)
                        .bind((i % ROWS) as i64)
                        .bind(&value[..])
                        .execute(&pool)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            },
        )
        .await;
        rows.push(Row::new(
            "postgres",
            "write 1 KiB vs UPDATE",
            concurrency,
            &fenced,
            &unfenced,
        ));

        // A fenced transaction vs the same plain transaction: one UPDATE of the user's row.
        let (f, d) = (fence.clone(), domains.clone());
        let pool2 = pool.clone();
        let credit = Arc::new(format!(
            "UPDATE {accounts} SET balance = balance + 1 WHERE id = $1"
        ));
        let credit2 = credit.clone();
        let (fenced, unfenced) = compare(
            plan,
            &probe,
            move |i| {
                let (fence, sql) = (f.clone(), credit.clone());
                let request = TransactionRequest::new(d[i % d.len()].clone(), token);
                async move {
                    let Begun::Admitted(mut tx) =
                        fence.begin(&request).await.map_err(|e| e.to_string())?
                    else {
                        return Err("a duplicate without an op id".into());
                    };
                    sqlx::query(&sql)
                        .bind((i % ROWS) as i64)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| e.to_string())?;
                    tx.commit().await.map_err(|e| e.to_string())
                }
            },
            move |i| {
                let (pool, sql) = (pool2.clone(), credit2.clone());
                async move {
                    let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
                    sqlx::query(&sql)
                        .bind((i % ROWS) as i64)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| e.to_string())?;
                    tx.commit().await.map_err(|e| e.to_string())
                }
            },
        )
        .await;
        rows.push(Row::new(
            "postgres",
            "transaction vs plain transaction",
            concurrency,
            &fenced,
            &unfenced,
        ));
    }
    Ok(rows)
}
