//! The bounded cache of the last ETag and envelope header seen per object, which makes a
//! steady-state write one conditional PUT.
//!
//! A cached header can only be older than the object: the high-water mark never decreases, so a
//! token the cache already shows as stale is stale for certain and is refused with no request.
//! Everything else the cache suggests is checked by S3 itself through `If-Match`.

use fence_core::raw::BoundedCache;

use crate::envelope::Header;

/// An object's last known version.
#[derive(Clone, Debug)]
pub(crate) struct Known {
    pub(crate) etag: String,
    pub(crate) header: Header,
}

/// At most `capacity` objects (by key), the oldest insertion evicted first.
pub(crate) type EtagCache = BoundedCache<String, Known>;
