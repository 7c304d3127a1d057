//! Kafka errors, and the ONE function that classifies them.

use fence_core::{Domain, FenceError};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

pub(crate) const BACKEND: &str = "kafka";

/// What went wrong talking to Kafka: the `source` of [`FenceError::Backend`] and
/// [`FenceError::Ambiguous`], so callers can downcast and match it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaFenceError {
    /// The transaction was aborted (a zombie's `init_transactions` fenced this producer, or the
    /// broker asked for an abort) and the holder re-claimed: nothing was written. Retry with the
    /// same operation id.
    #[error("transaction aborted after {attempts} attempts; nothing was written, retry with the same operation id")]
    Aborted {
        /// Attempts made.
        attempts: usize,
    },
    /// A ledger record that this version of fence-kafka cannot read.
    #[error("unreadable fence ledger record: {0}")]
    Ledger(String),
    /// The topic has no partitions or does not exist.
    #[error("topic `{0}` does not exist or has no partitions")]
    NoSuchTopic(String),
    /// Any other client or broker error.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// A blocking librdkafka call could not run.
    #[error("librdkafka worker failed: {0}")]
    Worker(String),
}

/// How a transactional step failed.
#[derive(Debug)]
pub(crate) enum TxnFailure {
    /// This producer's epoch is fenced (or it hit another fatal error): re-claim with a new one.
    Fenced(KafkaError),
    /// The transaction must be (and was) aborted: nothing was written; retry.
    Aborted(KafkaError),
    /// The commit may or may not have happened.
    Ambiguous(KafkaError),
    /// Anything else: nothing known to be written.
    Failed(KafkaError),
}

/// Classifies a librdkafka error from a transactional call. Error codes and flags are mapped
/// here and nowhere else.
pub(crate) fn classify(error: KafkaError, during_commit: bool) -> TxnFailure {
    use RDKafkaErrorCode as C;
    let code = error.rdkafka_error_code();
    let (fatal, abortable, retriable) = match &error {
        KafkaError::Transaction(e) => (e.is_fatal(), e.txn_requires_abort(), e.is_retriable()),
        _ => (false, false, false),
    };
    let fenced_code = matches!(
        code,
        Some(
            C::Fenced
                | C::ProducerFenced
                | C::InvalidProducerEpoch
                | C::InvalidProducerIdMapping
                | C::TransactionalIdAuthorizationFailed
        )
    );
    if fatal || fenced_code {
        return TxnFailure::Fenced(error);
    }
    if abortable {
        return TxnFailure::Aborted(error);
    }
    let timed_out = matches!(
        code,
        Some(C::OperationTimedOut | C::MessageTimedOut | C::RequestTimedOut)
    );
    if during_commit && (retriable || timed_out) {
        return TxnFailure::Ambiguous(error);
    }
    TxnFailure::Failed(error)
}

pub(crate) fn backend(domain: Option<&Domain>, error: impl Into<KafkaFenceError>) -> FenceError {
    FenceError::backend(BACKEND, domain, error.into())
}
