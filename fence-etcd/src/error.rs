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
        ClientError::GRpcStatus(status) => match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => BackendErrorKind::PermissionDenied,
            // etcd answers a refused login with InvalidArgument (rpctypes.ErrGRPCAuthFailed).
            Code::InvalidArgument if status.message().contains(AUTH_FAILED) => {
                BackendErrorKind::PermissionDenied
            }
            Code::NotFound => BackendErrorKind::NotFound,
            Code::InvalidArgument
            | Code::OutOfRange
            | Code::FailedPrecondition
            | Code::ResourceExhausted
            | Code::Unimplemented
            | Code::AlreadyExists => BackendErrorKind::Rejected,
            _ => BackendErrorKind::Unavailable,
        },
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
