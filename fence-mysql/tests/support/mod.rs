//! What the shared-server tests of this crate start from.

use fence_core::Observed;
use fence_mysql::{MySqlDialect, MySqlFence};
use sqlx::MySqlPool;

/// A fence in a freshly migrated namespace named after `test` on the shared server, and its
/// pool (`None`: a loud skip outside the test command).
pub(crate) async fn shared(test: &str) -> Option<(Observed<MySqlFence>, MySqlPool)> {
    fence_testkit::sql::shared::<MySqlDialect>(test).await
}
