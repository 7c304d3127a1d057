//! The conformance suite for fenced transactions, an entry point that is not a trait method:
//! each run adds one to a counter row of a user table in the fenced transaction, so the
//! counter, read at the server, counts the runs that committed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use fence_conformance::entry::{Call, EntryHarness, Ran};
use fence_core::{Domain, Fence, FenceError, Observed};
use fence_mysql::{MySqlFence, TransactionError, TransactionRequest};

struct TransactionHarness {
    fence: Observed<MySqlFence>,
    pool: sqlx::MySqlPool,
    counters: String,
}

#[async_trait]
impl EntryHarness for TransactionHarness {
    async fn run(&self, call: &Call) -> Result<Ran, FenceError> {
        let mut request =
            TransactionRequest::new(call.domain.clone(), call.token).with_policy(call.policy);
        if let Some(op_id) = &call.op_id {
            request = request.with_op_id(op_id.clone());
        }
        let sql = format!(
            "INSERT INTO {} (domain, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1",
            self.counters
        );
        let domain = call.domain.as_str().to_owned();
        let outcome = self
            .fence
            .transaction(&request, |conn| {
                Box::pin(async move { sqlx::query(&sql).bind(domain).execute(conn).await })
            })
            .await;
        match outcome {
            Ok(done) => Ok(Ran {
                duplicate: done.is_duplicate(),
                previous: done.previous_high_water_mark(),
            }),
            Err(TransactionError::Fence(e)) => Err(e),
            Err(other) => panic!("the counter update failed: {other}"),
        }
    }

    async fn applied(&self, domain: &Domain) -> Result<u64, FenceError> {
        let n: Option<u64> =
            sqlx::query_scalar(&format!("SELECT n FROM {} WHERE domain = ?", self.counters))
                .bind(domain.as_str())
                .fetch_optional(&self.pool)
                .await
                .expect("read the counter");
        Ok(n.unwrap_or(0))
    }

    fn fence(&self) -> Arc<dyn Fence> {
        Arc::new(self.fence.clone())
    }
}

async fn harness() -> Option<&'static TransactionHarness> {
    let (fence, pool) = support::shared("txn_entry").await?;
    let counters = format!("{}.counters", fence.database());
    sqlx::query(&format!(
        "CREATE TABLE {counters} (domain VARCHAR(256) PRIMARY KEY, n BIGINT UNSIGNED NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    Some(Box::leak(Box::new(TransactionHarness {
        fence,
        pool,
        counters,
    })))
}

fence_conformance::entry_conformance!(harness);
