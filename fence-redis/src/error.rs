//! Redis errors, and the ONE function that maps them onto fence outcomes.

use fence_core::{Domain, FenceError, Operation};
use redis::{ErrorKind, RedisError, ServerErrorKind};

pub(crate) const BACKEND: &str = "redis";

/// What went wrong talking to Redis: the `source` of [`FenceError::Backend`] and
/// [`FenceError::Ambiguous`], so callers can downcast and match it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisFenceError {
    /// The server's ACL forbids a command Fence needs.
    #[error("redis ACL denies a command fence-redis needs (grant +evalsha +eval +wait on the fence keys): {0}")]
    PermissionDenied(#[source] RedisError),
    /// A script answered in a shape this version of fence-redis does not know.
    #[error("unexpected reply from the `{script}` script: {detail}")]
    UnexpectedReply {
        /// The script.
        script: &'static str,
        /// What was wrong with the reply.
        detail: String,
    },
    /// Any other client or server error.
    #[error(transparent)]
    Redis(#[from] RedisError),
}

/// Maps a Redis client or server error for `operation` on `domain`.
///
/// A mutating request that timed out or lost its connection after it may have been sent is
/// [`FenceError::Ambiguous`]: the script may have run. A refused connection never sent anything.
pub(crate) fn map_error(
    error: RedisError,
    domain: &Domain,
    operation: Operation,
    mutating: bool,
) -> FenceError {
    if error.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) {
        return FenceError::backend(
            BACKEND,
            Some(domain),
            RedisFenceError::PermissionDenied(error),
        );
    }
    if error.code() == Some("WRONGTYPE") {
        return FenceError::corrupt(
            BACKEND,
            domain,
            format!("a key of the domain holds another Redis type: {error}"),
        );
    }
    // A refused connection sent nothing (redis-rs also counts it as "dropped", so test it first).
    let maybe_sent = !error.is_connection_refusal()
        && (error.is_timeout() || error.is_connection_dropped() || error.is_io_error());
    if mutating && maybe_sent {
        return FenceError::Ambiguous {
            domain: domain.clone(),
            operation,
            source: Box::new(RedisFenceError::Redis(error)),
        };
    }
    FenceError::backend(BACKEND, Some(domain), RedisFenceError::Redis(error))
}

/// An unexpected script reply.
pub(crate) fn unexpected(
    script: &'static str,
    domain: &Domain,
    detail: impl Into<String>,
) -> FenceError {
    FenceError::backend(
        BACKEND,
        Some(domain),
        RedisFenceError::UnexpectedReply {
            script,
            detail: detail.into(),
        },
    )
}
