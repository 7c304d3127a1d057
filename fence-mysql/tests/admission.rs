//! Issued-only acceptance, the bounded step and re-bases on MariaDB (fence-conformance's SQL
//! admission suite): the database's settings and the domain's counter are read in the
//! transaction that locks the mark row (claims, writes and fenced transactions alike), and an
//! operator's settings bind every client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use fence_conformance::services::domain as d;
use fence_core::FenceError;
use fence_mysql::MySqlFence;
use support::shared;

fence_testkit::sql_admission_tests!(MySqlFence, fence_mysql::MySqlDialect);

/// Settings the database cannot hold are refused by the table itself (a step of 0, a second
/// row), and a settings row deleted by hand fails closed instead of lifting the bounds.
#[tokio::test]
async fn settings_the_table_cannot_hold_are_refused_and_a_lost_row_fails_closed() {
    let Some((fence, pool)) = shared("adm_zero").await else {
        return;
    };
    let settings = format!("{}.fence_settings", fence.database());
    for statement in [
        format!("UPDATE {settings} SET max_step = 0"),
        format!("INSERT INTO {settings} (one, max_step, issued_only) VALUES (2, NULL, 0)"),
    ] {
        let refused = sqlx::query(&statement).execute(&pool).await;
        assert!(refused.is_err(), "stored: {statement}");
    }
    sqlx::query(&format!("DELETE FROM {settings}"))
        .execute(&pool)
        .await
        .unwrap();
    match fence_conformance::services::put(&fence, &d("x"), 1, "v").await {
        Err(FenceError::CorruptState { detail, .. }) => {
            assert!(detail.contains("fence_settings"), "{detail}")
        }
        other => panic!("a write without the settings row: {other:?}"),
    }
    fence_mysql::migrate(&pool, fence.database()).await.unwrap();
    fence_conformance::services::put(&fence, &d("x"), 1, "v")
        .await
        .unwrap();
}
