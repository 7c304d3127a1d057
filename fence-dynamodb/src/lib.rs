#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
pub mod env;
mod error;
mod expr;
#[cfg(feature = "unstable-raw")]
#[cfg_attr(docsrs, doc(cfg(feature = "unstable-raw")))]
pub mod extension;
mod fence;
mod issuer;
mod item;
mod lease;
mod permissions;
mod retire;
mod table;
mod transaction;

pub use aws_sdk_dynamodb;
pub use config::DynamoDbFenceBuilder;
pub use error::{DynamoDbFenceError, BACKEND};
pub use fence::{
    DynamoDbFence, DEFAULT_CACHE_CAPACITY, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_OP_ID_RETENTION, MAX_OP_ID_RETENTION, MAX_VALUE_BYTES,
};
pub use issuer::DynamoDbIssuer;
pub use lease::{DynamoDbLeases, DEFAULT_OBSERVED_LEASES};
pub use table::{DynamoDb, MAX_NAMESPACE_BYTES};
pub use transaction::MAX_TRANSACTION_ACTIONS;
