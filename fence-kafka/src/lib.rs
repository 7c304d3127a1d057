#![doc = include_str!("../README.md")]

mod append;
mod claim;
mod client;
mod commit;
mod config;
mod consumer;
mod context;
pub mod env;
mod error;
mod fence;
mod holders;
mod layout;
mod ledger;
mod partitioning;
mod permissions;
#[cfg(test)]
mod read_back_tests;
mod record;
mod txn;

/// The contract this crate implements, so users need one dependency.
pub use fence_core;

pub use rdkafka;

pub use commit::commit_when_delivered;
pub use config::{
    KafkaFenceBuilder, DEFAULT_LEDGER_TOPIC, DEFAULT_MAX_BATCH_BYTES, DEFAULT_OP_ID_RETENTION,
    DEFAULT_TRANSACTIONAL_ID_PREFIX,
};
pub use consumer::{Admission, FencedConsumer, TokenFilter};
pub use context::{KafkaContext, OAuthTokenProvider};
pub use error::KafkaFenceError;
pub(crate) use fence::Inner;
pub use fence::KafkaFence;
pub use holders::DEFAULT_MAX_HOLDERS;
pub use ledger::{LedgerDecodeError, LedgerRecord};
pub use partitioning::{PartitionPicker, Partitioning};
pub use record::{
    CommittedRecord, FenceHeaders, DOMAIN_HEADER, OP_HEADER, SEQ_HEADER, TOKEN_HEADER,
};
