#![doc = include_str!("../README.md")]

mod notify;
mod outbox;
mod store;

/// The contracts this crate implements, so users need one dependency.
pub use fence_outbox;
pub use fence_postgres;

pub use outbox::{migrate, PostgresOutbox, PostgresRecorded, DEFAULT_STEP_TIMEOUT, SCHEMA_SQL};
