//! What an adapter declares it supports, read by users and by the conformance suite.

use std::num::NonZeroU64;
use std::time::Duration;

use crate::BoundsConfig;

/// How long a resource remembers operation ids for replay detection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpIdRetention {
    /// Operation ids are not remembered: every retry is a new operation.
    None,
    /// The most recent `n` operation ids of each domain.
    PerDomain(usize),
    /// Every operation id for this long after its first outcome.
    Window(Duration),
}

impl OpIdRetention {
    /// The last `count` operation ids per domain; `None` when `count` is zero.
    pub const fn per_domain(count: usize) -> Self {
        match count {
            0 => OpIdRetention::None,
            n => OpIdRetention::PerDomain(n),
        }
    }
}

/// The operations and guarantees an adapter declares.
///
/// ```
/// use fence_core::Capabilities;
/// let caps = Capabilities::store().with_max_value_bytes(Some(512 * 1024));
/// assert!(caps.write && caps.delete && !caps.append);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Fenced writes of a value ([`crate::FencedStore::write`] with a put).
    pub write: bool,
    /// Fenced deletes leaving a tombstone.
    pub delete: bool,
    /// Reads of value, writer token and revision.
    pub read: bool,
    /// Fenced batched appends ([`crate::FencedLog::append`]).
    pub append: bool,
    /// Claims that raise the high-water mark without data.
    pub claim: bool,
    /// Compare-and-set on the data's revision.
    pub revision_cas: bool,
    /// The strict equal-token policy.
    pub strict_policy: bool,
    /// How operation ids are remembered for replay.
    pub op_id_retention: OpIdRetention,
    /// The largest value (or record batch, for logs) accepted, in bytes.
    pub max_value_bytes: Option<usize>,
    /// State, high-water marks included, survives a restart of the backend.
    pub survives_restart: bool,
    /// Tokens more than this above the mark are refused ([`crate::FenceError::TokenTooFar`]).
    pub max_token_step: Option<NonZeroU64>,
    /// Tokens the domain's issuer did not issue are refused ([`crate::FenceError::Unissued`]).
    pub issued_only: bool,
}

impl Capabilities {
    /// A key-value or object store supporting everything except appends (not durable).
    pub const fn store() -> Self {
        Capabilities {
            write: true,
            delete: true,
            read: true,
            append: false,
            claim: true,
            revision_cas: true,
            strict_policy: true,
            op_id_retention: OpIdRetention::None,
            max_value_bytes: None,
            survives_restart: false,
            max_token_step: None,
            issued_only: false,
        }
    }

    /// A log supporting appends and claims, but no read-by-key, revision or delete.
    pub const fn log() -> Self {
        Capabilities {
            write: false,
            delete: false,
            read: false,
            append: true,
            claim: true,
            revision_cas: false,
            strict_policy: true,
            op_id_retention: OpIdRetention::None,
            max_value_bytes: None,
            survives_restart: false,
            max_token_step: None,
            issued_only: false,
        }
    }

    /// Sets [`Capabilities::append`].
    pub const fn with_append(mut self, append: bool) -> Self {
        self.append = append;
        self
    }

    /// Sets [`Capabilities::revision_cas`].
    pub const fn with_revision_cas(mut self, revision_cas: bool) -> Self {
        self.revision_cas = revision_cas;
        self
    }

    /// Sets [`Capabilities::strict_policy`].
    pub const fn with_strict_policy(mut self, strict_policy: bool) -> Self {
        self.strict_policy = strict_policy;
        self
    }

    /// Sets [`Capabilities::op_id_retention`].
    pub const fn with_op_id_retention(mut self, retention: OpIdRetention) -> Self {
        self.op_id_retention = retention;
        self
    }

    /// Sets [`Capabilities::max_value_bytes`].
    pub const fn with_max_value_bytes(mut self, max: Option<usize>) -> Self {
        self.max_value_bytes = max;
        self
    }

    /// Sets [`Capabilities::survives_restart`].
    pub const fn with_survives_restart(mut self, survives: bool) -> Self {
        self.survives_restart = survives;
        self
    }

    /// Sets [`Capabilities::max_token_step`].
    pub const fn with_max_token_step(mut self, max_step: Option<NonZeroU64>) -> Self {
        self.max_token_step = max_step;
        self
    }

    /// Sets [`Capabilities::issued_only`].
    pub const fn with_issued_only(mut self, issued_only: bool) -> Self {
        self.issued_only = issued_only;
        self
    }

    /// Sets both admission capabilities from the client's [`BoundsConfig`]: its step bound and
    /// whether it accepts only issued tokens.
    pub const fn with_bounds(self, bounds: BoundsConfig) -> Self {
        self.with_max_token_step(bounds.max_step)
            .with_issued_only(bounds.issued_only)
    }

    /// True when operation ids are remembered at all.
    pub const fn op_id_replay(&self) -> bool {
        !matches!(self.op_id_retention, OpIdRetention::None)
    }
}
