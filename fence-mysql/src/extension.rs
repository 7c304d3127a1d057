//! Building blocks for crates built on fence-mysql (such as fence-outbox-mysql): this backend's
//! one error mapping, its commit, its corrupt-state reporting and its schema runner, so an
//! extension adds no copy of them. Unstable, behind the `unstable-raw` feature: may change in
//! any release.

use fence_core::FenceError;

pub use crate::error::commit;
pub use crate::error::{corrupt, map_error, BACKEND};
pub use crate::mark::token_column;

use crate::fence::MySqlFence;

/// Runs a schema script of the extension's in `fence`'s database: `fence_db` stands for the
/// database, statements end with a `;` at the end of a line, `--` lines are comments.
pub async fn run_script(fence: &MySqlFence, script: &str) -> Result<(), FenceError> {
    crate::schema::run_script(fence.pool(), fence.tables(), script).await
}
