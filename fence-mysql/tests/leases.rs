//! The MySQL issuer and leases against MariaDB: the shared lease contract, a counter floored at
//! the mark when its row is recreated, exhaustion, and the issuer monotonic across a kill -9 of
//! the server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_conformance::lease;
use fence_conformance::services::domain as d;
use fence_core::{FenceError, LeaseManager, OwnerId, TokenIssuer};
use fence_mysql::MySqlFence;
use fence_testkit::mysql::{pool, MariaDbServer};
use support::shared;

#[tokio::test]
async fn an_expired_holder_is_fenced_by_the_next_owner() {
    let Some((fence, _)) = shared("lease_story").await else {
        return;
    };
    let (leases, issuer) = (fence.leases(), fence.issuer());
    lease::expired_holder_is_fenced_by_the_next_owner(
        &fence,
        &leases,
        Some(&issuer),
        &d("shard-7"),
    )
    .await;
}

#[tokio::test]
async fn the_holder_gives_up_first_under_the_drift_bound() {
    let Some((fence, _)) = shared("lease_drift").await else {
        return;
    };
    // Remaining time in milliseconds.
    let unit = Duration::from_millis(1);
    lease::the_holder_gives_up_first_under_the_drift_bound(&fence.leases(), &d("drift"), unit)
        .await;
}

#[tokio::test]
async fn the_holder_is_reported() {
    let Some((fence, _)) = shared("lease_holder").await else {
        return;
    };
    lease::holder_is_reported(&fence.leases(), &d("held")).await;
}

#[tokio::test]
async fn ttls_out_of_range_are_refused() {
    let Some((fence, _)) = shared("lease_ttl").await else {
        return;
    };
    lease::ttls_out_of_range_are_refused(&fence.leases(), &d("ttl")).await;
    // Past what a DATETIME holds: refused before any I/O, not an overflow at the server.
    let too_long = fence
        .leases()
        .acquire(
            &d("ttl"),
            &OwnerId::new("x").unwrap(),
            fence_mysql::MAX_LEASE_TTL + Duration::from_secs(1),
        )
        .await;
    assert!(
        matches!(too_long, Err(FenceError::InvalidInput(_))),
        "{too_long:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acquires_have_exactly_one_winner() {
    let Some((fence, _)) = shared("lease_race").await else {
        return;
    };
    lease::concurrent_acquires_have_exactly_one_winner(
        Arc::new(fence.leases()),
        &d("contended"),
        lease::TokenSequence::Consecutive,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_guard_renews_waits_and_signals_loss() {
    let Some((fence, _)) = shared("lease_guard").await else {
        return;
    };
    lease::guard_renews_waits_and_signals_loss(Arc::new(fence.leases()), &d("guarded")).await;
}

#[tokio::test]
async fn the_counter_is_floored_at_the_mark_and_exhausts_cleanly() {
    let Some((fence, pool)) = shared("issuer").await else {
        return;
    };
    let (issuer, leases) = (fence.issuer(), fence.leases());
    lease::issuer_is_strictly_increasing(&issuer, &d("issued")).await;

    let counters = format!("{}.fence_counters", fence.database());
    let set_counter = |last: Option<u64>| -> fence_core::BoxFuture<'static, ()> {
        let (pool, counters) = (pool.clone(), counters.clone());
        Box::pin(async move {
            let sql = match last {
                None => format!("DELETE FROM {counters} WHERE domain = 'recreated'"),
                Some(last) => {
                    format!("UPDATE {counters} SET last = {last} WHERE domain = 'recreated'")
                }
            };
            let changed = sqlx::query(&sql).execute(&pool).await.unwrap();
            assert_eq!(changed.rows_affected(), 1, "{sql}");
        })
    };
    lease::issuer_is_floored_at_the_mark_and_exhausts_cleanly(
        &fence,
        &issuer,
        &leases,
        &d("recreated"),
        &set_counter,
    )
    .await;
    let kept: u64 = sqlx::query_scalar(&format!(
        "SELECT last FROM {counters} WHERE domain = 'recreated'"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(kept, u64::MAX, "an exhausted counter is left as it was");
}

#[tokio::test]
async fn the_issuer_is_monotonic_across_a_crash_of_the_server() {
    let Some(server) = MariaDbServer::start("issuer-restart") else {
        return;
    };
    let connect = |url: String| async move {
        let pool = pool(&url).await;
        fence_mysql::migrate(&pool, "fence").await.unwrap();
        MySqlFence::builder(pool, "fence").build().unwrap()
    };
    let fence = connect(server.url()).await;
    let domain = d("durable");
    let mut last = fence_core::FencingToken::MIN;
    for _ in 0..5 {
        last = fence.issuer().issue(&domain).await.unwrap();
    }
    let lease = fence
        .leases()
        .acquire(
            &domain,
            &OwnerId::new("a").unwrap(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert!(lease.token > last);
    server.kill_and_restart();
    let fence = connect(server.url()).await;
    let next = fence.issuer().issue(&domain).await.unwrap();
    assert!(
        next > lease.token,
        "after a crash the issuer went on from {}: issued {next}",
        lease.token
    );
    let held = fence.leases().holder(&domain).await.unwrap();
    assert_eq!(
        held.map(|h| h.token),
        Some(lease.token),
        "the lease survived the crash"
    );
}

#[tokio::test]
async fn a_retired_domain_leaves_no_rows() {
    let Some((fence, pool)) = shared("retire").await else {
        return;
    };
    let domain = d("retired");
    fence_conformance::retirement::retirement_removes_the_domain_and_nothing_else(
        &fence,
        &fence,
        Some(&fence.leases()),
        &domain,
    )
    .await;
    for table in ["fence_marks", "fence_counters", "fence_ops", "fence_leases"] {
        let rows: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {}.{table} WHERE domain = ?",
            fence.database()
        ))
        .bind(domain.as_str().as_bytes())
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(rows, 0, "{table} kept rows of the retired domain");
    }
}
