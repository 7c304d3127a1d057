#![doc = include_str!("../README.md")]

mod config;
mod connection;
mod error;
mod extension;
mod fence;
mod keys;
mod lease;
mod reply;
mod script;
mod scripts;

pub use redis;

pub use config::{
    RedisFenceBuilder, DEFAULT_MAX_VALUE_BYTES, DEFAULT_OP_ID_RETENTION, DEFAULT_PREFIX,
    DEFAULT_RESPONSE_TIMEOUT, REDIS_MAX_VALUE_BYTES,
};
pub use error::RedisFenceError;
pub use extension::{RedisScript, ReplicaAcks};
pub(crate) use fence::Inner;
pub use fence::RedisFence;
pub use keys::{MAX_PREFIX_BYTES, MAX_USER_KEY_BYTES};
pub use lease::{RedisIssuer, RedisLeases};
pub use script::{FencedScript, ScriptCall, ScriptOutcome};
