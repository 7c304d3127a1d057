#![doc = include_str!("../README.md")]

mod outbox;
mod store;

/// The contracts this crate implements, so users need one dependency.
pub use fence_mysql;
pub use fence_outbox;

pub use fence_outbox::Recorded;
pub use outbox::{migrate, MySqlOutbox, DEFAULT_STEP_TIMEOUT, SCHEMA_SQL};
