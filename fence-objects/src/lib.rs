#![doc = include_str!("../README.md")]

mod cache;
pub mod decide;
mod envelope;
mod keys;
mod manifest;
mod pointer;
pub mod settings;

/// The contract this crate's formats serve.
pub use fence_core;

pub use cache::{Known, VersionCache};
pub use envelope::{decode, fresh_nonce, Envelope, EnvelopeError, Header, MAGIC, MAX_HEADER_BYTES};
pub use keys::{KeyLayout, KeyScheme, DEFAULT_MAX_KEY_BYTES, DEFAULT_MAX_SEGMENT_BYTES};
pub use manifest::{Manifest, MAX_MANIFEST_KEYS};
pub use pointer::{resolved, Immutable, Resolved};

/// Default key prefix of fenced objects.
pub const DEFAULT_PREFIX: &str = "fence/";
/// Default number of objects whose last version and header are cached.
pub const DEFAULT_CACHE_CAPACITY: usize = 10_000;
/// Default number of operation ids remembered per object.
pub const DEFAULT_OP_ID_RETENTION: usize = 16;
/// The most operation ids an envelope may remember (its header stays within
/// [`MAX_HEADER_BYTES`]).
pub const MAX_OP_ID_RETENTION: usize = 32;
