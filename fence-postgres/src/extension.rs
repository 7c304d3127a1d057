//! Building blocks for crates built on fence-postgres (such as fence-outbox-postgres): this
//! backend's one error mapping, its commit and its corrupt-state reporting, so an extension
//! adds no copy of them. Unstable, behind the `unstable-raw` feature: may change in any
//! release.

pub use crate::error::commit;
pub use crate::error::{corrupt, map_error, token_column, BACKEND};
