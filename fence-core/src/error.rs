//! Typed errors: every failure a fenced operation can report.

use std::error::Error as StdError;
use std::fmt;
use std::num::NonZeroU64;

use crate::{Domain, FencingToken, IssuerView, Revision, WriteCondition};

/// A boxed error kept as the `source` of backend and ambiguous failures.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// The operation a failure or a metric refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// A fenced write of a value.
    Write,
    /// A fenced delete (leaves a tombstone that keeps the high-water mark).
    Delete,
    /// Raising the high-water mark without writing data.
    Claim,
    /// Reading the current value with its token and revision.
    Read,
    /// Querying the high-water mark.
    HighWaterMark,
    /// A fenced append of a batch of records to a log.
    Append,
    /// Reading a domain's committed log records.
    ReadLog,
    /// Issuing a fencing token.
    Issue,
    /// Acquiring, renewing or releasing a lease.
    Lease,
    /// Asking who holds a domain's lease.
    LeaseHolder,
    /// An operator's re-base of a mark (see [`crate::Rebase`]).
    Rebase,
    /// Listing a domain's re-bases.
    Rebases,
    /// Removing a retired domain's state (see [`crate::Retirer`]).
    Retire,
    /// The commit of a transaction a fence admitted earlier (PostgreSQL's
    /// `FencedTransaction::commit`): the admission counted as a `write`, its commit here.
    Commit,
}

impl Operation {
    /// The lowercase name used in messages, spans and metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Operation::Write => "write",
            Operation::Delete => "delete",
            Operation::Claim => "claim",
            Operation::Read => "read",
            Operation::HighWaterMark => "high_water_mark",
            Operation::Append => "append",
            Operation::ReadLog => "read_log",
            Operation::Issue => "issue",
            Operation::Lease => "lease",
            Operation::LeaseHolder => "lease_holder",
            Operation::Rebase => "rebase",
            Operation::Rebases => "rebases",
            Operation::Retire => "retire",
            Operation::Commit => "commit",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Input that is invalid on its face: rejected before any I/O.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidInput {
    /// A fencing token of zero (tokens start at 1).
    #[error("fencing token must be greater than zero")]
    ZeroToken,
    /// A token string that is not a canonical decimal `u64`.
    #[error("unparsable fencing token `{input}`: {reason}")]
    UnparsableToken {
        /// The offending input, shortened to 40 characters.
        input: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// An empty domain name.
    #[error("domain must not be empty")]
    EmptyDomain,
    /// A domain name over the length limit.
    #[error("domain is {len} bytes long, the limit is {max}")]
    DomainTooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// A domain name holding a control character.
    #[error("domain holds a control character at byte {position}")]
    DomainControlCharacter {
        /// Byte offset of the character.
        position: usize,
    },
    /// An empty operation id (or lease owner id).
    #[error("{what} must not be empty")]
    EmptyIdentifier {
        /// Which identifier: `operation id` or `lease owner`.
        what: &'static str,
    },
    /// An operation id (or lease owner id) over the length limit.
    #[error("{what} is {len} bytes long, the limit is {max}")]
    IdentifierTooLong {
        /// Which identifier.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// An operation id (or lease owner id) holding a control character.
    #[error("{what} holds a control character at byte {position}")]
    IdentifierControlCharacter {
        /// Which identifier.
        what: &'static str,
        /// Byte offset of the character.
        position: usize,
    },
    /// A value larger than the resource accepts.
    #[error("value of {size} bytes for domain `{domain}` exceeds the limit of {max} bytes")]
    ValueTooLarge {
        /// The domain written to.
        domain: Domain,
        /// The value's size in bytes.
        size: usize,
        /// The resource's limit in bytes.
        max: usize,
    },
    /// A domain (or a name under it) whose backend key would exceed a limit of the backend.
    #[error("domain `{domain}` maps to a {what} of {len} bytes in {backend}, over its limit of {max} bytes")]
    KeyTooLong {
        /// The backend's name.
        backend: &'static str,
        /// The domain.
        domain: Domain,
        /// Which part is too long (`object key`, `key segment`).
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// A domain that cannot name a backend key as written (a verbatim key layout refuses
    /// domains that S3 paths would normalise, or that could reach the adapter's own keys).
    #[error("domain `{domain}` cannot be a {backend} key as written: {reason}")]
    DomainNotAKey {
        /// The backend's name.
        backend: &'static str,
        /// The domain.
        domain: Domain,
        /// Why not.
        reason: &'static str,
    },
    /// A backend key given by the caller that the adapter refuses (an S3 key under the fence's
    /// own prefix, or one S3 could not store).
    #[error("{backend} key `{key}` is refused: {reason}")]
    InvalidKey {
        /// The backend's name.
        backend: &'static str,
        /// The key, shortened to 120 characters.
        key: String,
        /// Why.
        reason: &'static str,
    },
    /// A log append with no records.
    #[error("append to domain `{domain}` holds no records")]
    EmptyBatch {
        /// The domain appended to.
        domain: Domain,
    },
    /// A name the adapter reserves for its own state (a fence header on a Kafka record).
    #[error("{what} `{name}` on domain `{domain}` is reserved for the fence")]
    ReservedName {
        /// The domain.
        domain: Domain,
        /// What kind of name (`record header`).
        what: &'static str,
        /// The name.
        name: String,
    },
    /// An operation id the resource remembers for another kind of operation with the same token.
    #[error(
        "operation id `{op_id}` on domain `{domain}` was first used for {} {first}, not {} {now}",
        first.article(),
        now.article()
    )]
    OpIdReused {
        /// The domain.
        domain: Domain,
        /// The reused operation id.
        op_id: crate::OperationId,
        /// The kind it was first used for.
        first: crate::OpKind,
        /// The kind it is used for now.
        now: crate::OpKind,
    },
    /// A configuration value that cannot work.
    #[error("invalid configuration: {0}")]
    Configuration(String),
}

/// Every way a fenced operation can fail.
///
/// `Fenced` is terminal for the holder of the presented token: never retry it automatically.
/// `Ambiguous` means the request was sent and its outcome is unknown: retry with the same
/// operation id to learn it without applying twice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The resource already accepted a newer token for the domain (or, under the strict policy,
    /// the same token).
    #[error("stale token {presented} for domain `{domain}`: resource already accepted {current}")]
    Fenced {
        /// The domain.
        domain: Domain,
        /// The token the request carried.
        presented: FencingToken,
        /// The domain's high-water mark at the resource.
        current: FencingToken,
    },
    /// The write's condition on the data's own revision did not hold.
    #[error("revision mismatch for domain `{domain}`: expected {expected}, found {}", DisplayRevision(*actual))]
    RevisionMismatch {
        /// The domain.
        domain: Domain,
        /// What the request expected.
        expected: WriteCondition,
        /// The revision found (`None`: nothing was ever written).
        actual: Option<Revision>,
    },
    /// The request was sent but its outcome is unknown (timeout, connection cut).
    #[error("outcome of {operation} on domain `{domain}` is unknown: {source}")]
    Ambiguous {
        /// The domain.
        domain: Domain,
        /// The operation.
        operation: Operation,
        /// What went wrong.
        source: BoxError,
    },
    /// Input rejected before any I/O.
    #[error(transparent)]
    InvalidInput(#[from] InvalidInput),
    /// The backend does not support this operation or option.
    #[error("{backend} does not support {what}")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// The operation or option.
        what: String,
    },
    /// State at the resource that is not Fence's, or is damaged: the adapter fails closed.
    #[error("{backend} holds foreign or corrupt fence state for domain `{domain}`: {detail}")]
    CorruptState {
        /// The backend's name.
        backend: &'static str,
        /// The domain.
        domain: Domain,
        /// What was found.
        detail: String,
    },
    /// The resource sees the domain's issuer and it does not vouch for the presented token
    /// (above its last issued token, or not the live lease's): a forged or runaway token.
    /// Terminal like [`FenceError::Fenced`]; see [`crate::raw::TokenBounds`].
    #[error("token {presented} for domain `{domain}` was not issued by its issuer ({issuer})")]
    Unissued {
        /// The domain.
        domain: Domain,
        /// The token the request carried.
        presented: FencingToken,
        /// What the resource saw of the issuer.
        issuer: IssuerView,
    },
    /// The presented token is further above the mark than the resource's configured step:
    /// a runaway token. Terminal like [`FenceError::Fenced`]; see [`crate::raw::TokenBounds`].
    #[error("token {presented} for domain `{domain}` is more than {max_step} above the mark ({})", DisplayMark(*current))]
    TokenTooFar {
        /// The domain.
        domain: Domain,
        /// The token the request carried.
        presented: FencingToken,
        /// The domain's high-water mark (`None`: none yet, the step counts from zero).
        current: Option<FencingToken>,
        /// The configured bound.
        max_step: NonZeroU64,
    },
    /// An operator's re-base was refused; nothing changed (see [`crate::Rebase`]).
    #[error("re-base of domain `{domain}` refused: {detail}")]
    RebaseRefused {
        /// The domain.
        domain: Domain,
        /// Why.
        detail: String,
    },
    /// The token issuer has no token left for the domain (it never wraps around).
    #[error("token issuer for domain `{domain}` is exhausted at u64::MAX")]
    TokenExhausted {
        /// The domain.
        domain: Domain,
    },
    /// Another owner holds the domain's lease.
    #[error("lease on domain `{domain}` is held by another owner")]
    LeaseHeld {
        /// The domain.
        domain: Domain,
    },
    /// The lease expired or passed to another owner.
    #[error("lease on domain `{domain}` with token {token} is no longer held")]
    LeaseLost {
        /// The domain.
        domain: Domain,
        /// The token of the lost lease.
        token: FencingToken,
    },
    /// The change was applied at the primary, but fewer replicas than the caller asked for
    /// acknowledged it in time: a failover now could lose it (and the mark with it). Retry with
    /// the same operation id (a claim: the same token) to wait for the replicas again.
    #[error("{operation} on domain `{domain}` is applied on the primary but acknowledged by {acknowledged} of {requested} replicas: a failover could lose it; retry with the same operation id to wait again")]
    Unreplicated {
        /// The domain.
        domain: Domain,
        /// The operation.
        operation: Operation,
        /// Replicas the caller asked for.
        requested: u32,
        /// Replicas that acknowledged before the timeout.
        acknowledged: u32,
    },
    /// The backend failed; its own error is the source, and `kind` says whether a retry can help.
    #[error("{backend} failed{} ({kind}): {source}", DisplayDomain(domain.as_ref()))]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// What kind of failure, which decides [`FenceError::is_retryable`].
        kind: BackendErrorKind,
        /// The domain, when the failure concerns one.
        domain: Option<Domain>,
        /// The backend's error.
        source: BoxError,
    },
}

/// The class of a [`FenceError::Backend`] failure: whether retrying the same request can help.
///
/// Every adapter classifies each of its failures into one of these, in one place per adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// Transient: the server was unreachable, overloaded, restarting, or timed out. Retrying
    /// (with backoff) can help. A fenced change that may have been applied is reported as
    /// [`FenceError::Ambiguous`] instead; only raw escape hatches that cannot tell (a plain
    /// command through an adapter) report a timed-out write as `Unavailable`.
    Unavailable,
    /// The credentials were refused or lack a permission (ACL, IAM, bucket policy). Retrying
    /// cannot help until access is granted.
    PermissionDenied,
    /// A configured resource does not exist (bucket, topic). Retrying cannot help until it is
    /// created.
    NotFound,
    /// The server or the adapter refused the request or the configuration for good (key too
    /// long, invalid range, conditions ignored by the endpoint, an unexpected reply). Retrying
    /// the same request cannot help.
    Rejected,
    /// Concurrent writers kept winning: the adapter already retried up to its configured
    /// attempt limit with backoff. Not retryable as is: raise the limit or reduce contention.
    Contention,
}

impl BackendErrorKind {
    /// The lowercase name used in messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            BackendErrorKind::Unavailable => "unavailable",
            BackendErrorKind::PermissionDenied => "permission denied",
            BackendErrorKind::NotFound => "not found",
            BackendErrorKind::Rejected => "rejected",
            BackendErrorKind::Contention => "contention",
        }
    }

    /// True for the one class a retry of the same request can cure: [`Self::Unavailable`].
    pub const fn is_retryable(self) -> bool {
        matches!(self, BackendErrorKind::Unavailable)
    }
}

impl fmt::Display for BackendErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FenceError {
    /// Builds a [`FenceError::Backend`] of class `kind`.
    pub fn backend(
        backend: &'static str,
        kind: BackendErrorKind,
        domain: Option<&Domain>,
        source: impl Into<BoxError>,
    ) -> Self {
        FenceError::Backend {
            backend,
            kind,
            domain: domain.cloned(),
            source: source.into(),
        }
    }

    /// Builds a [`FenceError::CorruptState`].
    pub fn corrupt(backend: &'static str, domain: &Domain, detail: impl Into<String>) -> Self {
        FenceError::CorruptState {
            backend,
            domain: domain.clone(),
            detail: detail.into(),
        }
    }

    /// Builds a [`FenceError::Unsupported`].
    pub fn unsupported(backend: &'static str, what: impl Into<String>) -> Self {
        FenceError::Unsupported {
            backend,
            what: what.into(),
        }
    }

    /// True for [`FenceError::Fenced`]: the presented token is stale.
    pub fn is_fenced(&self) -> bool {
        matches!(self, FenceError::Fenced { .. })
    }

    /// True when retrying the same request (same operation id) may succeed or reveal the
    /// outcome: [`FenceError::Ambiguous`], [`FenceError::Unreplicated`], and backend failures of
    /// class [`BackendErrorKind::Unavailable`]. False for everything a retry cannot cure (a
    /// stale token, bad input, corrupt state, permissions, missing resources, refusals).
    ///
    /// ```
    /// use fence_core::{BackendErrorKind, FenceError};
    /// let denied = FenceError::backend("s3", BackendErrorKind::PermissionDenied, None, "403");
    /// assert!(!denied.is_retryable());
    /// let down = FenceError::backend("s3", BackendErrorKind::Unavailable, None, "refused");
    /// assert!(down.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            FenceError::Ambiguous { .. } | FenceError::Unreplicated { .. } => true,
            FenceError::Backend { kind, .. } => kind.is_retryable(),
            _ => false,
        }
    }

    /// The class of a [`FenceError::Backend`] failure; `None` for every other error.
    pub fn backend_kind(&self) -> Option<BackendErrorKind> {
        match self {
            FenceError::Backend { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// The outcome label used in metrics (`fenced`, `invalid_input`, …).
    pub fn outcome_label(&self) -> &'static str {
        match self {
            FenceError::Fenced { .. } => "fenced",
            FenceError::RevisionMismatch { .. } => "revision_mismatch",
            FenceError::Ambiguous { .. } => "ambiguous",
            FenceError::InvalidInput(_) => "invalid_input",
            FenceError::Unsupported { .. } => "unsupported",
            FenceError::CorruptState { .. } => "corrupt_state",
            FenceError::Unissued { .. } => "unissued",
            FenceError::TokenTooFar { .. } => "token_too_far",
            FenceError::RebaseRefused { .. } => "rebase_refused",
            FenceError::TokenExhausted { .. } => "token_exhausted",
            FenceError::LeaseHeld { .. } => "lease_held",
            FenceError::LeaseLost { .. } => "lease_lost",
            FenceError::Unreplicated { .. } => "unreplicated",
            FenceError::Backend { .. } => "backend_error",
        }
    }
}

struct DisplayRevision(Option<Revision>);

impl fmt::Display for DisplayRevision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(revision) => write!(f, "revision {revision}"),
            None => f.write_str("nothing written"),
        }
    }
}

struct DisplayMark(Option<FencingToken>);

impl fmt::Display for DisplayMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(mark) => write!(f, "{mark}"),
            None => f.write_str("none yet"),
        }
    }
}

struct DisplayDomain<'a>(Option<&'a Domain>);

impl fmt::Display for DisplayDomain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(domain) => write!(f, " on domain `{domain}`"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain() -> Domain {
        Domain::new("d").unwrap_or_else(|_| unreachable!())
    }

    #[test]
    fn a_reused_op_id_names_both_kinds_in_english() {
        let reused = |first, now| {
            InvalidInput::OpIdReused {
                domain: domain(),
                op_id: crate::OperationId::new("op").unwrap_or_else(|_| unreachable!()),
                first,
                now,
            }
            .to_string()
        };
        assert_eq!(
            reused(crate::OpKind::Append, crate::OpKind::Extension),
            "operation id `op` on domain `d` was first used for an append, not an extension operation"
        );
        assert_eq!(
            reused(crate::OpKind::Write, crate::OpKind::Transaction),
            "operation id `op` on domain `d` was first used for a write, not a fenced transaction"
        );
    }

    #[test]
    fn only_transient_failures_are_retryable() {
        let kind = |kind| FenceError::backend("test", kind, Some(&domain()), "boom");
        assert!(kind(BackendErrorKind::Unavailable).is_retryable());
        for fatal in [
            BackendErrorKind::PermissionDenied,
            BackendErrorKind::NotFound,
            BackendErrorKind::Rejected,
            BackendErrorKind::Contention,
        ] {
            let error = kind(fatal);
            assert!(!error.is_retryable(), "{fatal} must not be retryable");
            assert_eq!(error.backend_kind(), Some(fatal));
            assert!(error.to_string().contains(fatal.as_str()), "{error}");
        }
        let ambiguous = FenceError::Ambiguous {
            domain: domain(),
            operation: Operation::Write,
            source: "cut".into(),
        };
        assert!(ambiguous.is_retryable());
        let unreplicated = FenceError::Unreplicated {
            domain: domain(),
            operation: Operation::Claim,
            requested: 2,
            acknowledged: 0,
        };
        assert!(unreplicated.is_retryable());
        assert_eq!(unreplicated.outcome_label(), "unreplicated");
        assert!(unreplicated.to_string().contains("0 of 2 replicas"));
        let fenced = FenceError::Fenced {
            domain: domain(),
            presented: FencingToken::MIN,
            current: FencingToken::MAX,
        };
        assert!(!fenced.is_retryable() && fenced.backend_kind().is_none());
        assert!(!FenceError::corrupt("test", &domain(), "x").is_retryable());
        assert!(!FenceError::from(InvalidInput::ZeroToken).is_retryable());
    }
}
