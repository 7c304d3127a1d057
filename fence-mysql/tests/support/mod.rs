//! What the shared-server tests of this crate start from.

use fence_core::Observed;
use fence_mysql::MySqlFence;
use fence_testkit::mysql::{pool, shared_url, unique_database};
use sqlx::MySqlPool;

/// A fence in a freshly migrated database named after `test` on the shared server, and its
/// pool (`None`: a loud skip outside the test command).
pub(crate) async fn shared(test: &str) -> Option<(Observed<MySqlFence>, MySqlPool)> {
    let url = shared_url()?;
    let pool = pool(&url).await;
    let database = unique_database(test);
    fence_mysql::migrate(&pool, &database)
        .await
        .expect("migrate");
    let fence = MySqlFence::builder(pool.clone(), &database)
        .build()
        .expect("a valid database name");
    Some((fence, pool))
}
