#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod item;
mod outbox;
mod store;

pub use outbox::{DynamoDbOutbox, MAX_EFFECTS, MAX_PAYLOAD_BYTES};

/// The environment variable naming the outbox's table, as `fence outbox … dynamodb` reads it
/// (beside fence-dynamodb's own variables).
pub const TABLE_VARIABLE: &str = "FENCE_DYNAMODB_OUTBOX_TABLE";
