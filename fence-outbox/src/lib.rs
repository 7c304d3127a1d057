#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod delivery;
mod effect;
mod entry;
mod error;
mod key;
mod relay;
mod relay_config;
mod retry;
mod sink;
pub mod step;
mod store;
mod transition;
pub mod verdict;
#[cfg(feature = "webhook")]
mod webhook;

/// The contract this crate implements, so users need one dependency.
pub use fence_core;

pub use config::{OutboxConfig, DEFAULT_MAX_EFFECTS, DEFAULT_MAX_PAYLOAD_BYTES};
pub use effect::{
    check_destination, DestinationRule, Effect, EffectKinds, MAX_DESTINATION_BYTES, MAX_KIND_BYTES,
};
pub use entry::{EntryStatus, OutboxEntry, Settlement};
pub use error::OutboxError;
pub use key::IdempotencyKey;
pub use relay::{Relay, RelayHandle};
pub use relay_config::{RelayConfig, RelayReport};
pub use retry::RetryPolicy;
/// The TLS library of the webhook sink, for [`WebhookSink::with_tls`].
#[cfg(feature = "webhook")]
pub use rustls;
pub use sink::{Sink, SinkError};
pub use store::{Candidate, OutboxStore, Purged};
pub use transition::{record_transition, Recorded};
#[cfg(feature = "webhook")]
pub use webhook::{ConflictRule, WebhookSink, EFFECT_KIND_HEADER, IDEMPOTENCY_KEY_HEADER};
