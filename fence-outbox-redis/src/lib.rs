#![doc = include_str!("../README.md")]

mod codec;
mod outbox;
mod reply;
mod scripts;
mod store;

/// The contract this crate implements, so users need one dependency.
pub use fence_core;

pub use codec::{PackedRecord, PackedRecordError};
pub use outbox::{OutboxScript, RedisOutbox, RedisRecorded, RedisTransition};
