//! Redis errors, and the ONE function that maps them onto fence outcomes ([`map_error`]).

use fence_core::{BackendErrorKind, Domain, FenceError, Operation};
use redis::{ErrorKind, RedisError, ServerErrorKind};

pub(crate) const BACKEND: &str = "redis";

/// What went wrong talking to Redis: the `source` of [`FenceError::Backend`] and
/// [`FenceError::Ambiguous`], so callers can downcast and match it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisFenceError {
    /// The server's ACL forbids a command Fence needs.
    #[error("redis ACL denies a command fence-redis needs (grant fence_redis::FENCE_ACL_COMMANDS on the fence's key prefix): {0}")]
    PermissionDenied(#[source] RedisError),
    /// A script answered in a shape this version of fence-redis does not know.
    #[error("unexpected reply from the `{script}` script: {detail}")]
    UnexpectedReply {
        /// The script.
        script: &'static str,
        /// What was wrong with the reply.
        detail: String,
    },
    /// The key `adopt_value` or `adopt_key` was asked to adopt does not exist.
    #[error("redis key `{key}` cannot be adopted: it does not exist")]
    AdoptSourceMissing {
        /// The key.
        key: String,
    },
    /// A key that `adopt_value` or `adopt_key` cannot bring under fencing.
    #[error("redis key `{key}` cannot be adopted: {reason}")]
    AdoptRefused {
        /// The key.
        key: String,
        /// Why, and what to do about it.
        reason: String,
    },
    /// Any other client or server error.
    #[error(transparent)]
    Redis(#[from] RedisError),
}

impl RedisFenceError {
    /// Whether a retry can help: the class this failure reports as.
    pub fn kind(&self) -> BackendErrorKind {
        match self {
            RedisFenceError::PermissionDenied(_) => BackendErrorKind::PermissionDenied,
            RedisFenceError::AdoptSourceMissing { .. } => BackendErrorKind::NotFound,
            RedisFenceError::UnexpectedReply { .. } | RedisFenceError::AdoptRefused { .. } => {
                BackendErrorKind::Rejected
            }
            RedisFenceError::Redis(error) => kind_of(error),
        }
    }
}

/// The class of a client or server error.
fn kind_of(error: &RedisError) -> BackendErrorKind {
    use ServerErrorKind as S;
    if error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
    {
        return BackendErrorKind::Unavailable;
    }
    match error.kind() {
        ErrorKind::Server(S::NoPerm) | ErrorKind::AuthenticationFailed => {
            BackendErrorKind::PermissionDenied
        }
        // Failover, loading, resharding, a busy script: the same request can succeed later.
        ErrorKind::Server(
            S::BusyLoading
            | S::TryAgain
            | S::ClusterDown
            | S::MasterDown
            | S::ReadOnly
            | S::Moved
            | S::Ask,
        )
        | ErrorKind::ClusterConnectionNotFound => BackendErrorKind::Unavailable,
        // A service no sentinel monitors: a retry cannot find it.
        ErrorKind::MasterNameNotFoundBySentinel => BackendErrorKind::NotFound,
        _ if matches!(error.code(), Some("WRONGPASS" | "NOAUTH")) => {
            BackendErrorKind::PermissionDenied
        }
        _ if matches!(error.code(), Some("OOM" | "BUSY" | "NOREPLICAS")) => {
            BackendErrorKind::Unavailable
        }
        _ => BackendErrorKind::Rejected,
    }
}

/// True when the error proves the request never reached the server: the connection was
/// refused. (A closed connection does not prove it: redis-rs reports a request cut in flight
/// and one written to an already dead connection alike, as "broken pipe", so both stay
/// ambiguous; RESP3 connections make the second rare by replacing a dropped connection at once.)
pub(crate) fn never_sent(error: &RedisError) -> bool {
    error.is_connection_refusal()
}

/// The [`FenceError::Backend`] for `source`, classified by [`RedisFenceError::kind`].
pub(crate) fn backend_error(domain: Option<&Domain>, source: RedisFenceError) -> FenceError {
    FenceError::backend(BACKEND, source.kind(), domain, source)
}

/// Maps a Redis client or server error for `operation` (on `domain`, when it concerns one).
/// Every Redis error fence-redis reports goes through here.
///
/// A mutating request that timed out or lost its connection after it may have been sent is
/// [`FenceError::Ambiguous`]: the script may have run. A request that provably never left
/// (see [`never_sent`]) is not.
pub(crate) fn map_error(
    error: RedisError,
    domain: Option<&Domain>,
    operation: Operation,
    mutating: bool,
) -> FenceError {
    if error.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) {
        return backend_error(domain, RedisFenceError::PermissionDenied(error));
    }
    if let (Some("WRONGTYPE"), Some(domain)) = (error.code(), domain) {
        return FenceError::corrupt(
            BACKEND,
            domain,
            format!("a key of the domain holds another Redis type: {error}"),
        );
    }
    let maybe_sent = !never_sent(&error)
        && (error.is_timeout() || error.is_connection_dropped() || error.is_io_error());
    if let (true, true, Some(domain)) = (mutating, maybe_sent, domain) {
        return FenceError::Ambiguous {
            domain: domain.clone(),
            operation,
            source: Box::new(RedisFenceError::Redis(error)),
        };
    }
    backend_error(domain, RedisFenceError::Redis(error))
}

/// An unexpected script reply.
pub(crate) fn unexpected(
    script: &'static str,
    domain: &Domain,
    detail: impl Into<String>,
) -> FenceError {
    backend_error(
        Some(domain),
        RedisFenceError::UnexpectedReply {
            script,
            detail: detail.into(),
        },
    )
}
