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
