//! Redis errors, and the ONE function that maps them onto fence outcomes ([`map_error`]).

use fence_core::{BackendErrorKind, Domain, FenceError, Operation};
use redis::{ErrorKind, RedisError, ServerErrorKind};
use std::time::Duration;

use crate::scripts::LuaScript;

pub(crate) const BACKEND: &str = "redis";

/// What went wrong talking to Redis: the `source` of [`FenceError::Backend`] and
/// [`FenceError::Ambiguous`], so callers can downcast and match it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisFenceError {
    /// The server's ACL forbids a command Fence needs.
    #[error("redis ACL denies a command fence-redis needs (grant fence_redis::FENCE_ACL_COMMANDS on the fence's key prefix, and RETIRE_ACL_COMMANDS to retire): {0}")]
    PermissionDenied(#[source] RedisError),
    /// The server's ACL refused a command one of the fence's scripts calls (Redis checks each
    /// call inside a script): `command` is the refused one, read from the script's line that
    /// Redis names. Redis does not roll a script back: what it changed before the refused call
    /// stays (the mark may have moved even though the caller is told the change was refused).
    /// `RedisFence::check_permissions` finds such a gap before any domain is used.
    #[error("redis ACL denies {} in the `{script}` script, after which what the script had changed stays (grant fence_redis::FENCE_ACL_COMMANDS on the fence's key prefix; check_permissions names every missing one): {source}", command.as_deref().map_or("a command".to_owned(), |c| format!("`{c}`")))]
    ScriptPermissionDenied {
        /// The script.
        script: &'static str,
        /// The refused command, when the script's line names it.
        command: Option<String>,
        /// Redis's answer.
        source: RedisError,
    },
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
            RedisFenceError::PermissionDenied(_)
            | RedisFenceError::ScriptPermissionDenied { .. } => BackendErrorKind::PermissionDenied,
            RedisFenceError::AdoptSourceMissing { .. } => BackendErrorKind::NotFound,
            RedisFenceError::UnexpectedReply { .. } | RedisFenceError::AdoptRefused { .. } => {
                BackendErrorKind::Rejected
            }
            RedisFenceError::Redis(error) => kind_of(error),
        }
    }
}

/// An ACL refusal inside a script: `The user executing the script can't run this command or
/// subcommand` or `… can't access at least one of the keys …`, as a generic error reply.
fn refused_in_script(error: &RedisError) -> bool {
    let text = error.to_string();
    text.contains("user executing the script can't")
}

/// The line a script error names (`… on @user_script:197.`).
fn script_line(error: &RedisError) -> Option<usize> {
    let text = error.to_string();
    let (_, rest) = text.split_once("@user_script:")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The command a script's line calls (`redis.call('HSET', …)`), uppercased.
pub(crate) fn command_on_line(code: &str, line: usize) -> Option<String> {
    let text = code.lines().nth(line.checked_sub(1)?)?;
    let (_, rest) = text.split_once("call(")?;
    let rest = rest.trim_start().strip_prefix(['\'', '"'])?;
    let command: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!command.is_empty()).then(|| command.to_ascii_uppercase())
}

/// [`map_error`] for a script's own call: an ACL refusal inside the script names the refused
/// command, read from the script's line.
pub(crate) fn map_script_error(
    error: RedisError,
    script: &LuaScript,
    domain: Option<&Domain>,
    operation: Operation,
    mutating: bool,
) -> FenceError {
    if refused_in_script(&error) {
        let command = script_line(&error).and_then(|line| command_on_line(&script.code, line));
        return backend_error(
            domain,
            RedisFenceError::ScriptPermissionDenied {
                script: script.name,
                command,
                source: error,
            },
        );
    }
    map_error(error, domain, operation, mutating)
}

/// The class of a client or server error.
pub(crate) fn kind_of(error: &RedisError) -> BackendErrorKind {
    if refused_in_script(error) {
        return BackendErrorKind::PermissionDenied;
    }
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

/// The pause before each resend of a request that provably never reached the server: 50 ms
/// doubling to 200 ms.
pub(crate) const RESEND_BACKOFF: fence_core::Backoff =
    fence_core::Backoff::new(Duration::from_millis(50), Duration::from_millis(200));

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_a_script_line_calls() {
        let code = "local x = 1\n  redis.call('HSET', KEYS[1], 'a', 1)\nredis.pcall(\"pexpire\", k, 5)\nredis.call(cmd, k)\n";
        assert_eq!(command_on_line(code, 2).as_deref(), Some("HSET"));
        assert_eq!(command_on_line(code, 3).as_deref(), Some("PEXPIRE"));
        assert_eq!(command_on_line(code, 4), None, "a command in a variable");
        assert_eq!(command_on_line(code, 1), None);
        assert_eq!(command_on_line(code, 0), None);
        assert_eq!(command_on_line(code, 99), None);
    }
}
