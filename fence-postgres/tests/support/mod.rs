//! What the shared-server tests of this crate start from.

use fence_postgres::PostgresFence;
use fence_testkit::postgres::{pool, shared_url, unique_schema};
use sqlx::PgPool;

/// A fence in a freshly migrated schema named after `test` on the shared server, and its pool
/// (`None`: a loud skip outside the test command).
pub(crate) async fn shared(test: &str) -> Option<(PostgresFence, PgPool)> {
    let url = shared_url()?;
    let pool = pool(&url).await;
    let schema = unique_schema(test);
    fence_postgres::migrate(&pool, &schema)
        .await
        .expect("migrate");
    let fence = PostgresFence::new(pool.clone(), &schema).expect("a valid schema name");
    Some((fence, pool))
}

/// Begins a fenced transaction for `request`, which the test expects admitted.
#[allow(dead_code)] // each test binary uses its own part of this module
pub(crate) async fn admitted(
    fence: &PostgresFence,
    request: &fence_postgres::TransactionRequest,
) -> fence_postgres::FencedTransaction {
    match fence.begin(request).await {
        Ok(fence_postgres::Begun::Admitted(tx)) => tx,
        other => panic!("{request:?} must be admitted, got {other:?}"),
    }
}
