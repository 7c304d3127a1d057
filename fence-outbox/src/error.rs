//! Outbox errors: the fence's own outcomes, plus what is wrong with an effect or the outbox state.

use fence_core::{Domain, FenceError, InvalidInput};

/// What an outbox operation reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The fence refused or failed: a stale token ([`FenceError::Fenced`]), an ambiguous
    /// outcome, a backend error. A fenced transition recorded no entry.
    #[error(transparent)]
    Fence(#[from] FenceError),
    /// The effect's kind is not registered with the outbox.
    #[error("effect kind `{kind}` is not registered with the outbox (domain `{domain}`)")]
    UnknownKind {
        /// The domain of the transition.
        domain: Domain,
        /// The unregistered kind.
        kind: String,
    },
    /// The effect's destination does not fit its kind's rule.
    #[error("destination `{destination}` of effect kind `{kind}` is invalid (domain `{domain}`): {reason}")]
    InvalidDestination {
        /// The domain of the transition.
        domain: Domain,
        /// The effect kind.
        kind: String,
        /// The destination as given.
        destination: String,
        /// Why it was refused.
        reason: String,
    },
    /// An effect's payload is larger than the outbox allows.
    #[error(
        "effect {index} of domain `{domain}` has a {size}-byte payload, above the {max}-byte limit"
    )]
    PayloadTooLarge {
        /// The domain of the transition.
        domain: Domain,
        /// The effect's position in the transition.
        index: usize,
        /// The payload size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A transition carries more effects than the outbox allows.
    #[error("transition on domain `{domain}` carries {count} effects, above the limit of {max}")]
    TooManyEffects {
        /// The domain of the transition.
        domain: Domain,
        /// The number of effects.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An identifier (effect kind, key name) is malformed.
    #[error("invalid {what} `{value}`: {reason}")]
    InvalidName {
        /// What was being named.
        what: &'static str,
        /// The value as given.
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The relay's task panicked or was cancelled.
    #[error("outbox relay task ended abnormally: {0}")]
    RelayTask(String),
    /// The relay's configuration is invalid.
    #[error("invalid outbox configuration: {0}")]
    Configuration(String),
}

impl From<InvalidInput> for OutboxError {
    fn from(error: InvalidInput) -> Self {
        OutboxError::Fence(error.into())
    }
}

impl OutboxError {
    /// True when the fence refused a stale token.
    pub fn is_fenced(&self) -> bool {
        matches!(self, OutboxError::Fence(e) if e.is_fenced())
    }
}
