//! What the shared-server tests of this crate start from.

use fence_core::Observed;
use fence_postgres::{PostgresDialect, PostgresFence};
use sqlx::PgPool;

/// A fence in a freshly migrated schema named after `test` on the shared server, and its pool
/// (`None`: a loud skip outside the test command).
pub(crate) async fn shared(test: &str) -> Option<(Observed<PostgresFence>, PgPool)> {
    fence_testkit::sql::shared::<PostgresDialect>(test).await
}

/// Begins a fenced transaction for `request`, which the test expects admitted.
#[allow(dead_code)] // each test binary uses its own part of this module
pub(crate) async fn admitted(
    fence: &Observed<PostgresFence>,
    request: &fence_postgres::TransactionRequest,
) -> fence_postgres::FencedTransaction {
    match fence.begin(request).await {
        Ok(fence_postgres::Begun::Admitted(tx)) => tx,
        other => panic!("{request:?} must be admitted, got {other:?}"),
    }
}

/// Waits until `count` sessions wait for a lock in a statement naming `schema` (the test's
/// submissions queued behind a lock), or panics after 10 s.
#[allow(dead_code)] // each test binary uses its own part of this module
pub(crate) async fn wait_for_lock_waiters(pool: &PgPool, schema: &str, count: i64) {
    fence_testkit::postgres::wait_for_sessions(
        pool,
        "wait_event_type = 'Lock' AND position($1 in query) > 0",
        schema,
        count,
        "sessions queued behind the lock",
    )
    .await;
}

/// Waits until a session is inside its COMMIT, sleeping in a deferred trigger (`pg_sleep`),
/// or panics after 10 s.
#[allow(dead_code)] // each test binary uses its own part of this module
pub(crate) async fn wait_for_sleeping_commit(pool: &PgPool) {
    fence_testkit::postgres::wait_for_sessions(
        pool,
        "wait_event = $1 AND query ILIKE '%; COMMIT; BEGIN'",
        "PgSleep",
        1,
        "a COMMIT sleeping in its deferred trigger",
    )
    .await;
}
