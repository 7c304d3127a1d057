//! Every etcd client error mapped in one place.

use etcd_client::Error as ClientError;
use fence_core::{BackendErrorKind, Domain, FenceError, Operation};
use tonic::Code;

/// The backend's name in errors and metrics.
pub const BACKEND: &str = "etcd";

/// What went wrong at etcd.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdFenceError {
    /// An error from the client or the server.
    #[error("etcd: {0}")]
    Client(#[from] ClientError),
    /// A lock key's lease could not be granted.
    #[error("etcd: lease grant refused: {0}")]
    LeaseGrant(String),
    /// The key etcd's Lock API returned no longer exists: the lock is not held.
    #[error("etcd: lock key `{0}` no longer exists: the lock is not held")]
    LockGone(String),
    /// etcd answered in a way the protocol does not allow.
    #[error("etcd: unexpected answer: {0}")]
    Unexpected(String),
    /// The prefix's settings key holds what Fence did not write (as read by
    /// `EtcdFence::resource_bounds`; domain operations report it as the domain's corrupt
    /// state): every operation under the prefix fails closed until an operator stores valid
    /// settings or removes the key.
    #[error("etcd: settings key `{key}` is not Fence's ({why}); store settings again with set_resource_bounds")]
    Settings {
        /// The settings key.
        key: String,
        /// What is wrong with it.
        why: String,
    },
    /// Concurrent writers changed the domain between every read and compare-and-write.
    #[error("etcd: the domain changed under {attempts} consecutive compare-and-write attempts")]
    Contention {
        /// How many attempts were made.
        attempts: u32,
    },
}

/// The message of etcd's `ErrGRPCAuthFailed`.
const AUTH_FAILED: &str = "etcdserver: authentication failed";

/// The class of a client error: whether a retry can help.
pub(crate) fn kind_of(error: &ClientError) -> BackendErrorKind {
    match error {
        ClientError::GRpcStatus(status) => {
            let says = |text: &str| status.message().contains(text);
            match status.code() {
                Code::PermissionDenied => BackendErrorKind::PermissionDenied,
                // etcd answers a refused login with InvalidArgument (ErrGRPCAuthFailed).
                Code::InvalidArgument if says(AUTH_FAILED) => BackendErrorKind::PermissionDenied,
                // An expired or outdated auth token: the client logs in again.
                Code::Unauthenticated => BackendErrorKind::Unavailable,
                // "too many requests" (apply lagging behind commit) passes; "database space
                // exceeded" (the NOSPACE alarm) needs an operator.
                Code::ResourceExhausted if says("too many requests") => {
                    BackendErrorKind::Unavailable
                }
                Code::FailedPrecondition if says("not leader") => BackendErrorKind::Unavailable,
                Code::NotFound => BackendErrorKind::NotFound,
                Code::InvalidArgument
                | Code::OutOfRange
                | Code::FailedPrecondition
                | Code::ResourceExhausted
                | Code::Unimplemented
                | Code::AlreadyExists => BackendErrorKind::Rejected,
                _ => BackendErrorKind::Unavailable,
            }
        }
        ClientError::TransportError(_)
        | ClientError::IoError(_)
        | ClientError::LeaseKeepAliveError(_)
        | ClientError::WatchError(_)
        | ClientError::ElectError(_) => BackendErrorKind::Unavailable,
        _ => BackendErrorKind::Rejected,
    }
}

/// Maps a client error of `operation` on `domain`. `after_send`: the request may have changed
/// etcd (a txn whose answer was lost), so any failure not known to be a refusal before
/// applying is `Ambiguous`, never a guess.
pub(crate) fn map_error(
    error: ClientError,
    domain: &Domain,
    operation: Operation,
    after_send: bool,
) -> FenceError {
    let kind = kind_of(&error);
    if after_send && kind == BackendErrorKind::Unavailable {
        return FenceError::Ambiguous {
            domain: domain.clone(),
            operation,
            source: Box::new(EtcdFenceError::Client(error)),
        };
    }
    FenceError::backend(BACKEND, kind, Some(domain), EtcdFenceError::Client(error))
}

/// State at the resource that is not Fence's, or is damaged.
pub(crate) fn corrupt(domain: &Domain, detail: impl Into<String>) -> FenceError {
    FenceError::corrupt(BACKEND, domain, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, message: &str) -> ClientError {
        ClientError::GRpcStatus(tonic::Status::new(code, message))
    }

    #[test]
    fn failures_are_classified_and_lost_answers_are_ambiguous() {
        let d = Domain::new("d").unwrap_or_else(|e| unreachable!("{e}"));
        let cases = [
            (
                status(Code::Unavailable, "connection refused"),
                BackendErrorKind::Unavailable,
            ),
            (
                status(Code::DeadlineExceeded, "timeout"),
                BackendErrorKind::Unavailable,
            ),
            (
                status(Code::Unauthenticated, "etcdserver: invalid auth token"),
                BackendErrorKind::Unavailable,
            ),
            (
                status(
                    Code::InvalidArgument,
                    "etcdserver: authentication failed, invalid user ID or password",
                ),
                BackendErrorKind::PermissionDenied,
            ),
            (
                status(Code::PermissionDenied, "etcdserver: permission denied"),
                BackendErrorKind::PermissionDenied,
            ),
            (
                status(Code::ResourceExhausted, "etcdserver: too many requests"),
                BackendErrorKind::Unavailable,
            ),
            (
                status(
                    Code::ResourceExhausted,
                    "etcdserver: mvcc: database space exceeded",
                ),
                BackendErrorKind::Rejected,
            ),
            (
                status(Code::InvalidArgument, "etcdserver: request is too large"),
                BackendErrorKind::Rejected,
            ),
            (
                status(Code::FailedPrecondition, "etcdserver: not leader"),
                BackendErrorKind::Unavailable,
            ),
        ];
        for (error, kind) in cases {
            let text = error.to_string();
            assert_eq!(kind_of(&error), kind, "{text}");
            let sent = map_error(error, &d, Operation::Write, true);
            if kind == BackendErrorKind::Unavailable {
                // Sent, and no answer that says it was refused: the outcome is unknown.
                assert!(
                    matches!(sent, FenceError::Ambiguous { .. }),
                    "{text}: {sent:?}"
                );
            } else {
                assert_eq!(sent.backend_kind(), Some(kind), "{text}");
            }
        }
        let unsent = map_error(
            status(Code::Unavailable, "down"),
            &d,
            Operation::Read,
            false,
        );
        assert!(unsent.is_retryable(), "{unsent}");
    }
}
