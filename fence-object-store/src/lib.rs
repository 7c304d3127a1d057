#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cas;
mod config;
pub mod env;
mod error;
mod fence;
mod permissions;
mod pointer;
mod probe;
mod requests;
mod retire;

/// The contract this crate implements, so users need one dependency.
pub use fence_core;
/// The object_store crate this one is built on, so the versions match.
pub use object_store;

pub use config::{ObjectStoreFenceBuilder, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_VALUE_BYTES};
pub use error::ObjectStoreFenceError;
pub use fence::ObjectStoreFence;
pub use fence_objects::{
    Envelope, EnvelopeError, Immutable, KeyLayout, Manifest, Resolved, DEFAULT_CACHE_CAPACITY,
    DEFAULT_MAX_KEY_BYTES, DEFAULT_MAX_SEGMENT_BYTES, DEFAULT_OP_ID_RETENTION, DEFAULT_PREFIX,
    MAX_OP_ID_RETENTION,
};
pub use retire::delete_under;
