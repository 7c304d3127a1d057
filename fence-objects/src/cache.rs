//! The bounded cache of the last version and envelope header seen per object, which makes a
//! steady-state write one conditional request.
//!
//! A cached header can only be older than the object: the high-water mark never decreases, so a
//! token the cache already shows as stale is stale for certain and is refused with no request.
//! Everything else the cache suggests is checked by the store itself through its condition.

use fence_core::raw::BoundedCache;

use crate::envelope::Header;

/// An object's last known version `V` (an ETag, or an ETag and a generation) and header.
#[derive(Clone, Debug)]
pub struct Known<V> {
    /// The version the store reported.
    pub version: V,
    /// The header of that version.
    pub header: Header,
}

/// At most `capacity` objects (by key), the oldest insertion evicted first.
pub type VersionCache<V> = BoundedCache<String, Known<V>>;
