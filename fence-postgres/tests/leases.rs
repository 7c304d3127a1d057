//! The PostgreSQL issuer and leases against real servers: fence-testkit's SQL lease tests (the
//! shared lease contract, a counter floored at the mark when its row is recreated, the issuer
//! monotonic across a kill -9 of the server, a retired domain leaving no rows), and what
//! PostgreSQL adds: corrupt counter rows fail closed, and a waiter is notified of a release.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_conformance::lease;
use fence_conformance::services::domain as d;
use fence_core::{FenceError, LeaseManager, OwnerId, TokenIssuer};
use support::shared;

fence_testkit::sql_lease_tests!(fence_postgres::PostgresDialect);

/// Counter rows no issuer wrote (negative, past u64) are refused by the issuer and the leases
/// alike, and left as they are.
#[tokio::test]
async fn corrupt_counter_rows_fail_closed() {
    let Some((fence, pool)) = shared("issuer_corrupt").await else {
        return;
    };
    let (issuer, leases) = (fence.issuer(), fence.leases());
    let counters = format!("{}.fence_counters", fence.schema());
    sqlx::query(&format!(
        "ALTER TABLE {counters} DROP CONSTRAINT fence_counters_last_u64"
    ))
    .execute(&pool)
    .await
    .unwrap();
    for (name, last) in [("negative", "-1"), ("too-big", "18446744073709551616")] {
        sqlx::query(&format!(
            "INSERT INTO {counters} (domain, last) VALUES ($1, {last})"
        ))
        .bind(name)
        .execute(&pool)
        .await
        .unwrap();
        let issued = issuer.issue(&d(name)).await;
        assert!(
            matches!(issued, Err(FenceError::CorruptState { .. })),
            "{name}: {issued:?}"
        );
        let acquired = leases
            .acquire(
                &d(name),
                &OwnerId::new("x").unwrap(),
                Duration::from_secs(1),
            )
            .await;
        assert!(
            matches!(acquired, Err(FenceError::CorruptState { .. })),
            "{name}: {acquired:?}"
        );
        let kept: String = sqlx::query_scalar(&format!(
            "SELECT last::text FROM {counters} WHERE domain = $1"
        ))
        .bind(name)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(kept, last, "a corrupt counter is not overwritten");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_notified_of_the_release() {
    let Some((fence, _)) = shared("lease_notify").await else {
        return;
    };
    lease::waiting_is_notified(Arc::new(fence.leases()), &d("n")).await;
}
