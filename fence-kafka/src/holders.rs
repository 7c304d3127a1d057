//! The holders a `KafkaFence` keeps: one initialised transactional producer per (domain, token)
//! in use, bounded, and the greatest mark seen per domain.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fence_core::raw::rule;
use fence_core::{Domain, EqualTokenPolicy, FenceError, FencingToken};

use crate::client::TxnProducer;
use crate::ledger::LedgerState;

/// Holders kept by [`crate::KafkaFence::builder`]'s default (`max_holders`).
pub const DEFAULT_MAX_HOLDERS: usize = 1024;

/// One holder (domain, token): its initialised producer and the ledger state it wrote last.
pub(crate) struct Holder {
    pub(crate) producer: Arc<TxnProducer>,
    pub(crate) state: LedgerState,
}

/// A holder's slot: locked for the whole of a claim or an append, so one holder runs one
/// transaction at a time.
pub(crate) type Slot = Arc<tokio::sync::Mutex<Option<Holder>>>;

/// The holders and the known marks.
pub(crate) struct Holders {
    slots: Mutex<HashMap<(Domain, FencingToken), Slot>>,
    /// The greatest mark seen per domain. Marks never decrease, so a token below it is stale
    /// for certain and is refused without initialising a producer, which would abort the
    /// owner's open transaction. Forgetting one costs a ledger read, never safety.
    marks: Mutex<HashMap<Domain, FencingToken>>,
    capacity: usize,
}

impl Holders {
    pub(crate) fn new(capacity: usize) -> Self {
        Holders {
            slots: Mutex::new(HashMap::new()),
            marks: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// The slot of (domain, token), created if needed. Past the capacity, idle slots (not
    /// locked by a running operation) are dropped first, closing their producers.
    pub(crate) fn slot(&self, domain: &Domain, token: FencingToken) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let key = (domain.clone(), token);
        if let Some(slot) = slots.get(&key) {
            return slot.clone();
        }
        if slots.len() >= self.capacity {
            // Idle: nobody holds its lock and no clone is in flight.
            slots.retain(|_, slot| Arc::strong_count(slot) > 1 || slot.try_lock().is_err());
        }
        slots.entry(key).or_default().clone()
    }

    /// Drops the slot of (domain, token) and its producer.
    pub(crate) fn forget(&self, domain: &Domain, token: FencingToken) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.remove(&(domain.clone(), token));
    }

    /// How many holders are kept.
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Notes a mark seen at the resource.
    pub(crate) fn note_mark(&self, domain: &Domain, mark: Option<FencingToken>) {
        let Some(mark) = mark else { return };
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        if marks.len() >= self.capacity && !marks.contains_key(domain) {
            marks.clear();
        }
        let known = marks.entry(domain.clone()).or_insert(mark);
        *known = (*known).max(mark);
    }

    /// Refuses a token already known to be stale, with no I/O.
    pub(crate) fn check_known(
        &self,
        domain: &Domain,
        token: FencingToken,
        policy: EqualTokenPolicy,
    ) -> Result<(), FenceError> {
        let known = self
            .marks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(domain)
            .copied();
        match known {
            // Under the same-owner policy an equal mark may be this holder's own claim.
            Some(mark) if token < mark => rule::check_token(domain, Some(mark), token, policy),
            _ => Ok(()),
        }
    }
}
