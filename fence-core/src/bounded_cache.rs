//! A bounded map of the last known state per key, oldest insertion evicted first.
//!
//! Adapters keep what they last saw of a domain in one (the S3 object's ETag and envelope,
//! etcd's mark revision), so that a steady-state write is one conditional request. A cached
//! state can only be older than the resource's: the resource's own condition (If-Match, a txn
//! compare) decides, the cache only saves the read before it.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// At most `capacity` entries, the oldest insertion evicted first (0: caches nothing).
///
/// ```
/// use fence_core::raw::BoundedCache;
/// let cache = BoundedCache::new(2);
/// for key in ["a", "b", "c"] {
///     cache.insert(key.to_owned(), 1);
/// }
/// assert_eq!((cache.len(), cache.get("a"), cache.get("c")), (2, None, Some(1)));
/// ```
pub struct BoundedCache<K, V> {
    capacity: usize,
    inner: Mutex<Entries<K, V>>,
}

struct Entries<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K: Eq + Hash + Clone, V: Clone> BoundedCache<K, V> {
    /// An empty cache of at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        BoundedCache {
            capacity,
            inner: Mutex::new(Entries {
                map: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }

    fn entries(&self) -> MutexGuard<'_, Entries<K, V>> {
        // Each update is one map and queue step: a poisoned lock still holds whole entries.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value cached for `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries().map.get(key).cloned()
    }

    /// Caches `value` for `key`, evicting the oldest entries beyond the capacity.
    pub fn insert(&self, key: K, value: V) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.entries();
        if entries.map.insert(key.clone(), value).is_none() {
            entries.order.push_back(key);
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

    /// Forgets `key` (its state is unknown now).
    pub fn remove<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut entries = self.entries();
        if entries.map.remove(key).is_some() {
            entries.order.retain(|k| k.borrow() != key);
        }
    }

    /// How many entries are cached.
    pub fn len(&self) -> usize {
        self.entries().map.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most entries kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl<K, V> fmt::Debug for BoundedCache<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundedCache")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_its_bound_and_evicts_the_oldest() {
        let cache = BoundedCache::new(3);
        for i in 0..10 {
            cache.insert(format!("k{i}"), "e");
        }
        assert_eq!(cache.len(), 3);
        assert!(cache.get("k6").is_none() && cache.get("k9").is_some());
        cache.insert("k9".to_owned(), "newer");
        assert_eq!(cache.get("k9"), Some("newer"));
        cache.remove("k9");
        assert_eq!(cache.len(), 2);
        let off = BoundedCache::new(0);
        off.insert("k".to_owned(), "e");
        assert!(off.is_empty());
    }
}
