//! Outbox entries as the relay and operators see them.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fence_core::{Domain, FencingToken};

use crate::key::IdempotencyKey;

/// Where an entry is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryStatus {
    /// Waiting for delivery; `attempts` so far and the last failure, if any.
    Pending {
        /// Delivery attempts started.
        attempts: u32,
        /// The last retryable failure.
        last_error: Option<String>,
    },
    /// The sink accepted it; kept until the retention window passes.
    Delivered {
        /// Delivery attempts started.
        attempts: u32,
        /// When it was marked delivered (ms since the Unix epoch, server clock).
        at_ms: u64,
    },
    /// Given up: a permanent failure or too many attempts. Kept until an operator acts.
    DeadLettered {
        /// Delivery attempts started.
        attempts: u32,
        /// When it was dead-lettered (ms since the Unix epoch, server clock).
        at_ms: u64,
        /// The last error.
        last_error: String,
    },
}

/// One recorded effect.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxEntry {
    /// The domain whose transition recorded it.
    pub domain: Domain,
    /// Its position in the domain's outbox (1, 2, ...): delivery follows this order.
    pub seq: u64,
    /// The idempotency key to send with it.
    pub key: IdempotencyKey,
    /// The effect kind.
    pub kind: String,
    /// The destination.
    pub destination: String,
    /// The payload.
    pub payload: Bytes,
    /// The token of the transition that recorded it.
    pub token: FencingToken,
    /// When it was recorded (ms since the Unix epoch, server clock).
    pub recorded_at_ms: u64,
    /// Its status.
    pub status: EntryStatus,
}

impl OutboxEntry {
    /// An entry as a backend read it: `effect` recorded by the transition of `token` as the
    /// domain's entry `seq`, under `key`, at `recorded_at_ms`.
    pub fn new(
        domain: Domain,
        seq: u64,
        key: IdempotencyKey,
        effect: crate::Effect,
        token: FencingToken,
        recorded_at_ms: u64,
        status: EntryStatus,
    ) -> Self {
        OutboxEntry {
            domain,
            seq,
            key,
            kind: effect.kind().to_owned(),
            destination: effect.destination().to_owned(),
            payload: effect.payload().clone(),
            token,
            recorded_at_ms,
            status,
        }
    }

    /// Delivery attempts started so far.
    pub fn attempts(&self) -> u32 {
        match &self.status {
            EntryStatus::Pending { attempts, .. }
            | EntryStatus::Delivered { attempts, .. }
            | EntryStatus::DeadLettered { attempts, .. } => *attempts,
        }
    }

    /// True for a dead letter: given up on, kept until an operator acts.
    pub fn is_dead_letter(&self) -> bool {
        matches!(self.status, EntryStatus::DeadLettered { .. })
    }

    /// How long ago it was recorded, by this machine's clock.
    pub fn age(&self) -> Duration {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Duration::from_millis(now.saturating_sub(self.recorded_at_ms))
    }
}

impl fmt::Debug for OutboxEntry {
    // Payloads may hold personal data: only their size is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboxEntry")
            .field("domain", &self.domain)
            .field("seq", &self.seq)
            .field("key", &self.key)
            .field("kind", &self.kind)
            .field("destination", &self.destination)
            .field("payload_bytes", &self.payload.len())
            .field("token", &self.token)
            .field("recorded_at_ms", &self.recorded_at_ms)
            .field("status", &self.status)
            .finish()
    }
}

/// What the relay records after an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settlement {
    /// The sink accepted the entry.
    Delivered,
    /// A retryable failure; the entry stays at the head of its domain.
    Retry {
        /// The failure.
        error: String,
    },
    /// Given up; the next entry of the domain may go.
    DeadLetter {
        /// The last failure.
        error: String,
    },
}

impl Settlement {
    /// The one-letter code backends store (`d` delivered, `r` retry, `x` dead letter) and the
    /// error to keep with it (empty when delivered).
    pub fn code(&self) -> (char, &str) {
        match self {
            Settlement::Delivered => ('d', ""),
            Settlement::Retry { error } => ('r', error),
            Settlement::DeadLetter { error } => ('x', error),
        }
    }
}
