//! The bounded cache of the last ETag and envelope header seen per object, which makes a
//! steady-state write one conditional PUT.
//!
//! A cached header can only be older than the object: the high-water mark never decreases, so a
//! token the cache already shows as stale is stale for certain and is refused with no request.
//! Everything else the cache suggests is checked by S3 itself through `If-Match`.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::envelope::Header;

/// An object's last known version.
#[derive(Clone, Debug)]
pub(crate) struct Known {
    pub(crate) etag: String,
    pub(crate) header: Header,
}

/// At most `capacity` objects, the oldest insertion evicted first.
#[derive(Debug)]
pub(crate) struct EtagCache {
    capacity: usize,
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<String, Known>,
    order: VecDeque<String>,
}

impl EtagCache {
    pub(crate) fn new(capacity: usize) -> Self {
        EtagCache {
            capacity,
            inner: Mutex::default(),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Each update below is one map and queue step; a poisoned lock still holds whole entries.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, key: &str) -> Option<Known> {
        self.entries().map.get(key).cloned()
    }

    pub(crate) fn insert(&self, key: &str, known: Known) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.entries();
        if entries.map.insert(key.to_owned(), known).is_none() {
            entries.order.push_back(key.to_owned());
        }
        while entries.map.len() > self.capacity {
            match entries.order.pop_front() {
                Some(oldest) => {
                    entries.map.remove(&oldest);
                }
                None => break,
            }
        }
    }

    pub(crate) fn remove(&self, key: &str) {
        let mut entries = self.entries();
        if entries.map.remove(key).is_some() {
            entries.order.retain(|k| k != key);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries().map.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Head;
    use fence_core::FencingToken;

    fn known(etag: &str) -> Known {
        Known {
            etag: etag.to_owned(),
            header: Header {
                hwm: FencingToken::MIN,
                head: Head::None,
                nonce: 0,
                ops: Default::default(),
            },
        }
    }

    #[test]
    fn stays_within_its_bound_and_evicts_the_oldest() {
        let cache = EtagCache::new(3);
        for i in 0..10 {
            cache.insert(&format!("k{i}"), known("e"));
        }
        assert_eq!(cache.len(), 3);
        assert!(cache.get("k6").is_none() && cache.get("k9").is_some());
        cache.insert("k9", known("newer"));
        assert_eq!(cache.get("k9").map(|k| k.etag), Some("newer".to_owned()));
        cache.remove("k9");
        assert_eq!(cache.len(), 2);
        let off = EtagCache::new(0);
        off.insert("k", known("e"));
        assert_eq!(off.len(), 0);
    }
}
