#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod adopt;
mod bounds;
mod cluster;
mod config;
mod connection;
pub mod env;
mod envelope;
mod error;
#[cfg(feature = "unstable-raw")]
mod extension;
mod fence;
mod keys;
mod lease;
mod ops;
mod permissions;
mod rebase;
mod reply;
mod retire;
mod scan;
mod script;
mod scripts;
mod sentinel;
mod state;
mod target;
mod value;

/// The contract this crate implements, so users need one dependency.
pub use fence_core;

pub use redis;

pub use config::{
    RedisFenceBuilder, DEFAULT_MAX_VALUE_BYTES, DEFAULT_OP_ID_WINDOW, DEFAULT_PREFIX,
    DEFAULT_REPLICA_WAIT, DEFAULT_RESPONSE_TIMEOUT, REDIS_MAX_VALUE_BYTES,
};
pub use error::RedisFenceError;
/// Unfenced raw access for crates layered on fence-redis: unstable, behind the `unstable-raw`
/// feature.
#[cfg(feature = "unstable-raw")]
pub mod unstable {
    pub use crate::extension::RedisScript;
    pub use crate::ops::glob_escape;
}
pub(crate) use fence::Inner;
pub use fence::RedisFence;
pub use keys::{FENCE_ACL_COMMANDS, MAX_PREFIX_BYTES, MAX_USER_KEY_BYTES, RETIRE_ACL_COMMANDS};
pub use lease::{RedisIssuer, RedisLeases};
pub use script::{BodyOutcome, FencedBody, FencedScript, ReplicaAcks, ScriptCall, ScriptOutcome};
pub use state::{decode_state, StateHashError, STATE_FIELDS};
pub use value::ScriptValue;
