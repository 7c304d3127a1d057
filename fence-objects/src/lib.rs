#![doc = include_str!("../README.md")]

mod cache;
pub mod decide;
mod envelope;
mod keys;
mod manifest;

/// The contract this crate's formats serve.
pub use fence_core;

pub use cache::{Known, VersionCache};
pub use envelope::{decode, fresh_nonce, Envelope, EnvelopeError, Header, MAGIC, MAX_HEADER_BYTES};
pub use keys::{KeyLayout, KeyScheme, DEFAULT_MAX_KEY_BYTES, DEFAULT_MAX_SEGMENT_BYTES};
pub use manifest::{Manifest, MAX_MANIFEST_KEYS};
