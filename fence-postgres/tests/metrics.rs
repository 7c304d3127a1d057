//! What PostgreSQL's own entry points report through the `metrics` facade: a fenced
//! transaction's admission counts as a `write` and its commit as a `commit`; a per-row update
//! counts as a `write`; refusals count as `fenced`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use fence_conformance::services::{assert_fenced, domain as d, token as t};
use fence_postgres::{RowFence, TransactionRequest};
use fence_testkit::metrics::{recording, CountingRecorder};

#[test]
fn transactions_and_row_updates_are_counted() {
    let recorder = CountingRecorder::default();
    let ran = recording(&recorder, async {
        {
            let Some((fence, pool)) = support::shared("metrics").await else {
                return false;
            };
            let domain = d("account-9");
            let tx =
                support::admitted(&fence, &TransactionRequest::new(domain.clone(), t(2))).await;
            tx.commit().await.unwrap();
            let stale = fence
                .begin(&TransactionRequest::new(domain.clone(), t(1)))
                .await;
            assert_fenced(stale, 1, 2);

            let schema = fence.schema();
            sqlx::raw_sql(&format!(
                "CREATE TABLE {schema}.accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, \
                 fence_token numeric(20,0)); INSERT INTO {schema}.accounts VALUES (1, 100, NULL)"
            ))
            .execute(&pool)
            .await
            .unwrap();
            let rows = RowFence::new(schema, "accounts", "id", "fence_token").unwrap();
            let mut conn = pool.acquire().await.unwrap();
            for (token, balance) in [(5, 90_i64), (4, 80)] {
                let updated = rows
                    .update(&mut conn, 1_i64, t(token), |set| {
                        set.push("balance = ").push_bind(balance);
                    })
                    .await;
                if token == 4 {
                    assert_fenced(updated, 4, 5);
                } else {
                    updated.unwrap();
                }
            }
            true
        }
    });
    if !ran {
        return;
    }
    let counted = recorder.counted();
    let count = |key: &str| recorder.count(key);
    for (key, expected) in [
        // The admission of the transaction, and the row update with token 5.
        (
            "fence_writes_total{backend=postgres,operation=write,outcome=accepted}",
            2,
        ),
        // The stale admission and the stale row update.
        (
            "fence_writes_total{backend=postgres,operation=write,outcome=fenced}",
            2,
        ),
        (
            "fence_operations_total{backend=postgres,operation=commit,outcome=accepted}",
            1,
        ),
    ] {
        assert_eq!(count(key), expected, "{key}; counted: {counted:#?}");
    }
    let commit_latency = recorder.samples(
        "fence_operation_duration_seconds{backend=postgres,operation=commit,outcome=accepted}",
    );
    assert_eq!(commit_latency.len(), 1, "{counted:#?}");
}
