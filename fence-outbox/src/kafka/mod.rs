//! The Kafka outbox: effects are records in the SAME producer transaction as the state records
//! (one fenced [`KafkaFence`](fence_kafka::KafkaFence) append), so an aborted or fenced
//! transition leaves no committed effect.
//!
//! Each effect record carries the fence headers (`fence-domain`, `fence-token`, `fence-op`) and
//! [`KEY_HEADER`], [`KIND_HEADER`], [`DESTINATION_HEADER`]; its Kafka key is its idempotency key
//! and its value the payload. Consumers of the data topic that are not the relay skip records
//! with [`KEY_HEADER`] (effects) or [`PROGRESS_HEADER`] (the relay's progress marks).
//!
//! The relay ([`KafkaRelayStore`]) follows the data topic read_committed and keeps its progress
//! (attempts, delivered, dead-lettered) as records of its own fenced domain
//! `fence-outbox-progress/<relay name>/<partition>` in the same topic: each mark is a fenced
//! append under the relay's token, so a relay that paused past its lease cannot mark anything
//! once its successor has, and the successor replays the predecessor's marks on start.
//! The progress records share the data topic's retention, so they expire together.

mod outbox;
mod progress;
mod store;

pub use outbox::{KafkaOutbox, KafkaRecorded, KafkaTransition};
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
