#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
pub mod env;
mod error;
mod fence;
mod options;
mod permissions;
mod pointer;
mod probe;
mod requests;
mod retire;
mod update;

/// The contract this crate implements, so users need one dependency.
pub use fence_core;

pub use aws_sdk_s3;

pub use config::{
    S3FenceBuilder, DEFAULT_MAX_VALUE_BYTES, DEFAULT_MULTIPART_THRESHOLD, DEFAULT_PART_SIZE,
};
pub use error::S3FenceError;
pub(crate) use fence::Inner;
pub use fence::S3Fence;
pub use fence_objects::{
    Envelope, EnvelopeError, Immutable, KeyLayout, Manifest, Resolved, DEFAULT_CACHE_CAPACITY,
    DEFAULT_MAX_KEY_BYTES, DEFAULT_MAX_SEGMENT_BYTES, DEFAULT_OP_ID_RETENTION, DEFAULT_PREFIX,
    MAX_MANIFEST_KEYS, MAX_OP_ID_RETENTION,
};
pub use options::{Encryption, ObjectOptions, MAX_METADATA_BYTES, MAX_TAGS};
