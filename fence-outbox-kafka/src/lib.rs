#![doc = include_str!("../README.md")]

mod outbox;
mod progress;
mod store;

/// The contract this crate implements, so users need one dependency.
pub use fence_core;

pub use outbox::{KafkaOutbox, KafkaRecorded, KafkaTransition};
pub use progress::{Progress, ProgressDecodeError};
pub use store::KafkaRelayStore;

/// Header carrying an effect's idempotency key.
pub const KEY_HEADER: &str = "fence-outbox-key";
/// Header carrying an effect's kind.
pub const KIND_HEADER: &str = "fence-outbox-kind";
/// Header carrying an effect's destination.
pub const DESTINATION_HEADER: &str = "fence-outbox-destination";
/// Header marking a relay's progress record (its value names the relay and partition), so that
/// consumers of the business topic can skip it like an effect record.
pub const PROGRESS_HEADER: &str = "fence-outbox-progress";
