//! Lock striping: many domains spread over independently locked shards.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard};

/// A fixed set of independently locked shards, chosen by hashing a key.
#[derive(Debug)]
pub(crate) struct Shards<T> {
    shards: Box<[Mutex<T>]>,
    hasher: RandomState,
}

impl<T: Default> Shards<T> {
    /// `count` shards (at least one).
    pub(crate) fn new(count: usize) -> Self {
        Shards {
            shards: (0..count.max(1)).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
        }
    }
}

impl<T> Shards<T> {
    fn lock<K: Hash>(&self, key: &K) -> MutexGuard<'_, T> {
        let index = (self.hasher.hash_one(key) % self.shards.len() as u64) as usize;
        // Critical sections never panic midway, so a poisoned shard still holds whole entries.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` with the shard that owns `key` locked.
    pub(crate) fn with<K: Hash, R>(&self, key: &K, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.lock(key))
    }

    /// Every shard, one at a time (never all locked together).
    pub(crate) fn each(&self, mut f: impl FnMut(&T)) {
        for shard in self.shards.iter() {
            f(&shard
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()));
        }
    }
}
