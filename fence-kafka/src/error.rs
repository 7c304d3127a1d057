//! Kafka errors, and the ONE function that classifies them.

use fence_core::{BackendErrorKind, Domain, FenceError};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

pub(crate) const BACKEND: &str = "kafka";

/// What went wrong talking to Kafka: the `source` of [`FenceError::Backend`] and
/// [`FenceError::Ambiguous`], so callers can downcast and match it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaFenceError {
    /// Every attempt of an append was aborted (a zombie's or a concurrent holder's
    /// `init_transactions` fenced this producer, or the broker asked for an abort), and the
    /// holder re-claimed each time: nothing was written. The holder still owns the domain; the
    /// limit is [`crate::KafkaFenceBuilder::aborted_retries`].
    #[error("append aborted {attempts} times by concurrent producers of the domain; nothing was written (raise aborted_retries, or retry later with the same operation id)")]
    Aborted {
        /// Attempts made.
        attempts: usize,
    },
    /// Every attempt of a claim lost to concurrent claimers re-initialising the domain's
    /// transactional id, and no higher mark was committed meanwhile: nothing was claimed. The
    /// limit is [`crate::KafkaFenceBuilder::aborted_retries`].
    #[error("claim lost {attempts} attempts to concurrent claimers and no higher mark was committed; nothing was claimed (raise aborted_retries, or claim again)")]
    ClaimContended {
        /// Attempts made.
        attempts: usize,
    },
    /// A ledger record that this version of fence-kafka cannot read.
    #[error("unreadable fence ledger record: {0}")]
    Ledger(String),
    /// The topic has no partitions or does not exist.
    #[error("topic `{0}` does not exist or has no partitions")]
    NoSuchTopic(String),
    /// A topic's partition count differs from the one its domains were placed by (recorded in
    /// the ledger's layout record): a domain would now hash to a partition without its records
    /// or its ledger record, where a stale token could pass. Nothing is done on these topics:
    /// Kafka cannot remove partitions, so the fence moves to new topics.
    #[error("topic `{topic}` has {now} partitions, but its domains were placed over {was}: adding partitions moves domains away from their records and marks, so nothing is done on it; move the fence to new topics (a data topic under explicit or record-key partitioning may grow, see the crate docs)")]
    PartitionsChanged {
        /// The topic.
        topic: String,
        /// The count the domains were placed by.
        was: i32,
        /// The count now.
        now: i32,
    },
    /// A read could not reach the end of a partition (its high watermark when the read began)
    /// within the fence's timeout: an open transaction before the end holds read_committed
    /// readers back (a holder that has not committed yet, until it ends or the broker aborts
    /// it after its `transaction.timeout.ms`, or a transaction whose commit markers a broker
    /// crash left unwritten), or the partition's leader did not answer. Nothing was decided
    /// on a partial read; a retry can help.
    #[error("could not read partition {partition} of `{topic}` to its end: read_committed reached offset {reached} of {end} (an open transaction before the end, or an unreachable leader); nothing was decided on a partial read, retry")]
    ReadIncomplete {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// How far read_committed got.
        reached: i64,
        /// The high watermark the read had to reach.
        end: i64,
    },
    /// A commit was refused after the broker had acknowledged its records, and the record read
    /// back to learn whether the transaction committed anyway is no longer in the log (deleted
    /// or compacted since; a read_committed reader would skip it as if aborted): the outcome is
    /// unknown.
    #[error("commit refused, and whether it happened cannot be read back: offset {offset} of partition {partition} of `{topic}` is not in the log")]
    Unverifiable {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The record's offset.
        offset: i64,
    },
    /// A topic the fence needs is missing and it could not create it.
    #[error("topic `{topic}` does not exist: {why}")]
    NotCreated {
        /// The topic.
        topic: String,
        /// Why the fence did not create it, and what to do.
        why: &'static str,
    },
    /// Any other client or broker error.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// A blocking librdkafka call could not run.
    #[error("librdkafka worker failed: {0}")]
    Worker(String),
}

impl KafkaFenceError {
    /// Whether a retry can help: the class this failure reports as.
    pub fn kind(&self) -> BackendErrorKind {
        match self {
            KafkaFenceError::Aborted { .. } | KafkaFenceError::ClaimContended { .. } => {
                BackendErrorKind::Contention
            }
            KafkaFenceError::Ledger(_) | KafkaFenceError::PartitionsChanged { .. } => {
                BackendErrorKind::Rejected
            }
            KafkaFenceError::NoSuchTopic(_) | KafkaFenceError::NotCreated { .. } => {
                BackendErrorKind::NotFound
            }
            KafkaFenceError::Worker(_)
            | KafkaFenceError::ReadIncomplete { .. }
            | KafkaFenceError::Unverifiable { .. } => BackendErrorKind::Unavailable,
            KafkaFenceError::Kafka(error) => kind_of(error),
        }
    }
}

/// The class of a librdkafka error.
fn kind_of(error: &KafkaError) -> BackendErrorKind {
    use RDKafkaErrorCode as C;
    match error {
        KafkaError::ClientConfig(..) | KafkaError::ClientCreation(_) | KafkaError::Nul(_) => {
            return BackendErrorKind::Rejected
        }
        KafkaError::Canceled => return BackendErrorKind::Unavailable,
        // A watermark or metadata request for a partition the fence placed by the counts it
        // checked (the layout record): missing from librdkafka's metadata only while its
        // leadership moves (measured with a partition leader killed).
        KafkaError::MetadataFetch(C::UnknownPartition) => return BackendErrorKind::Unavailable,
        KafkaError::Transaction(e) if e.is_retriable() => return BackendErrorKind::Unavailable,
        _ => {}
    }
    // rdkafka gives no code for admin errors, though they carry one.
    let code = match error {
        KafkaError::AdminOp(code) => Some(*code),
        _ => error.rdkafka_error_code(),
    };
    match code {
        Some(
            C::TopicAuthorizationFailed
            | C::GroupAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::TransactionalIdAuthorizationFailed
            | C::SaslAuthenticationFailed
            | C::Authentication
            | C::DelegationTokenAuthorizationFailed,
        ) => BackendErrorKind::PermissionDenied,
        Some(C::UnknownTopicOrPartition | C::UnknownTopic | C::UnknownPartition) => {
            BackendErrorKind::NotFound
        }
        Some(
            C::BrokerTransportFailure
            | C::AllBrokersDown
            | C::Resolve
            | C::OperationTimedOut
            | C::MessageTimedOut
            | C::RequestTimedOut
            | C::BrokerNotAvailable
            | C::LeaderNotAvailable
            | C::NotLeaderForPartition
            | C::ReplicaNotAvailable
            | C::FencedLeaderEpoch
            | C::UnknownLeaderEpoch
            | C::OffsetNotAvailable
            | C::KafkaStorageError
            | C::DestroyBroker
            | C::NetworkException
            | C::CoordinatorNotAvailable
            | C::NotCoordinator
            | C::CoordinatorLoadInProgress
            | C::NotEnoughReplicas
            | C::NotEnoughReplicasAfterAppend
            | C::ConcurrentTransactions
            | C::QueueFull,
        ) => BackendErrorKind::Unavailable,
        _ => BackendErrorKind::Rejected,
    }
}

/// True when a transaction failed because another producer of the domain's transactional id
/// took over (a concurrent claimer, or a zombie's re-initialisation): the contention that
/// `aborted_retries` is for.
pub(crate) fn fenced_by_another_producer(error: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        error.rdkafka_error_code(),
        Some(
            C::Fenced
                | C::ProducerFenced
                | C::InvalidProducerEpoch
                | C::InvalidProducerIdMapping
                | C::ConcurrentTransactions
        )
    )
}

/// True when retrying a failed transaction cannot help (an ACL refusal, say).
pub(crate) fn permanent(error: &KafkaError) -> bool {
    matches!(
        kind_of(error),
        BackendErrorKind::PermissionDenied | BackendErrorKind::NotFound
    )
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
    /// The outcome is not settled: the coordinator acknowledged the commit, but its markers did
    /// not reach the ledger partition in time (a broker crash can still drop them: Apache Kafka
    /// skips markers for a partition without a known leader), or a commit refused after every
    /// record was acknowledged could not be read back.
    Unsettled(KafkaFenceError),
    /// Anything else: nothing known to be written.
    Failed(KafkaError),
}

impl TxnFailure {
    /// The same failure, with its outcome unknown.
    pub(crate) fn into_ambiguous(self) -> TxnFailure {
        match self {
            TxnFailure::Fenced(error) | TxnFailure::Aborted(error) | TxnFailure::Failed(error) => {
                TxnFailure::Ambiguous(error)
            }
            unknown @ (TxnFailure::Ambiguous(_) | TxnFailure::Unsettled(_)) => unknown,
        }
    }
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

/// The [`FenceError::Backend`] for `error`, classified by [`KafkaFenceError::kind`].
pub(crate) fn backend(domain: Option<&Domain>, error: impl Into<KafkaFenceError>) -> FenceError {
    let error = error.into();
    FenceError::backend(BACKEND, error.kind(), domain, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Measured on a three-node Apache Kafka cluster with a partition leader killed: watermark
    /// and metadata requests fail with these while leadership moves. A retry helps.
    #[test]
    fn a_leader_moving_is_unavailable_not_rejected() {
        for code in [
            RDKafkaErrorCode::DestroyBroker,
            RDKafkaErrorCode::OffsetNotAvailable,
            RDKafkaErrorCode::NotLeaderForPartition,
            RDKafkaErrorCode::FencedLeaderEpoch,
            RDKafkaErrorCode::UnknownLeaderEpoch,
            RDKafkaErrorCode::UnknownPartition,
        ] {
            let error = KafkaFenceError::Kafka(KafkaError::MetadataFetch(code));
            assert_eq!(error.kind(), BackendErrorKind::Unavailable, "{code:?}");
        }
    }
}
