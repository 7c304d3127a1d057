//! The `Sink` trait: where the relay delivers entries.

use std::time::Duration;

use async_trait::async_trait;

use crate::entry::OutboxEntry;

/// Why a delivery failed, and whether to try again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// Try again later (timeouts, 5xx, 429, a conflicting in-flight request).
    #[error("retryable delivery failure: {reason}")]
    Retryable {
        /// What happened.
        reason: String,
        /// The receiver's requested wait (`Retry-After`), if any.
        retry_after: Option<Duration>,
    },
    /// Will never succeed (refused payload, bad destination): dead-letter now.
    #[error("permanent delivery failure: {reason}")]
    Permanent {
        /// What happened.
        reason: String,
    },
}

impl SinkError {
    /// A retryable failure.
    pub fn retryable(reason: impl Into<String>) -> Self {
        SinkError::Retryable {
            reason: reason.into(),
            retry_after: None,
        }
    }

    /// A permanent failure.
    pub fn permanent(reason: impl Into<String>) -> Self {
        SinkError::Permanent {
            reason: reason.into(),
        }
    }
}

/// Where entries go: your email service client, payment API client, or the shipped
/// [`WebhookSink`](crate::WebhookSink).
///
/// Delivery is at least once: the same entry may be delivered again after a crash, a timeout
/// or a relay handover, always with the same [`OutboxEntry::key`]. Pass that key to the
/// receiver as its idempotency key so it applies the effect once.
#[async_trait]
pub trait Sink: Send + Sync {
    /// Delivers one entry. `Ok` means the receiver has it.
    async fn deliver(&self, entry: &OutboxEntry) -> Result<(), SinkError>;
}
