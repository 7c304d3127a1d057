//! `EtcdFenceBuilder`: a fence's settings.

use std::fmt;
use std::num::NonZeroU64;

use fence_core::{BoundsConfig, Observed};

use crate::fence::{
    DEFAULT_CACHE_CAPACITY, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_VALUE_BYTES, DEFAULT_OP_ID_RETENTION,
};
use crate::{Etcd, EtcdFence};

/// Builds an [`EtcdFence`] from an [`Etcd`] ([`Etcd::fence_builder`]; [`Etcd::fence`] builds
/// one with the defaults). `build` does no I/O.
///
/// ```no_run
/// # async fn run() -> Result<(), fence_core::FenceError> {
/// let etcd = fence_etcd::Etcd::connect(&["http://127.0.0.1:2379"], None, "/fence").await?;
/// let fence = etcd.fence_builder().max_value_bytes(64 * 1024).build();
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until built"]
pub struct EtcdFenceBuilder {
    etcd: Etcd,
    max_value_bytes: usize,
    op_id_retention: usize,
    max_attempts: u32,
    bounds: BoundsConfig,
    cache_capacity: usize,
}

impl Etcd {
    /// A builder for a fenced store on etcd's KV, starting from the defaults and the bounds
    /// [`Etcd::from_env`] read.
    pub fn fence_builder(&self) -> EtcdFenceBuilder {
        EtcdFenceBuilder {
            etcd: self.clone(),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            op_id_retention: DEFAULT_OP_ID_RETENTION,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            bounds: self.fence_bounds,
            cache_capacity: DEFAULT_CACHE_CAPACITY,
        }
    }

    /// The fenced store on etcd's KV with the defaults, inside the telemetry layer.
    pub fn fence(&self) -> Observed<EtcdFence> {
        self.fence_builder().build()
    }
}

impl EtcdFence {
    /// A builder with this fence's client, prefix and settings: build a fence that differs in
    /// some of them (it starts with a cache of its own).
    pub fn to_builder(&self) -> EtcdFenceBuilder {
        EtcdFenceBuilder {
            etcd: self.etcd.clone(),
            max_value_bytes: self.max_value_bytes,
            op_id_retention: self.op_id_retention,
            max_attempts: self.max_attempts,
            bounds: self.bounds,
            cache_capacity: self.cache.capacity(),
        }
    }
}

impl EtcdFenceBuilder {
    /// Remembers the last state seen of at most `domains` domains (0: read before every
    /// write). A remembered state makes a write one txn; etcd's compare decides regardless.
    pub fn cache_capacity(mut self, domains: usize) -> Self {
        self.cache_capacity = domains;
        self
    }

    /// Refuses values larger than `max` bytes, before any I/O.
    pub fn max_value_bytes(mut self, max: usize) -> Self {
        self.max_value_bytes = max;
        self
    }

    /// Remembers the newest `count` operation ids per domain (0 turns replay detection off).
    pub fn op_id_retention(mut self, count: usize) -> Self {
        self.op_id_retention = count;
        self
    }

    /// Gives up after `attempts` compare-and-writes that found the domain changed by
    /// concurrent writers (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Accepts only the token of the domain's live lease from [`crate::EtcdLeases`] under the
    /// same prefix (the lock key's `create_revision`), refusing any other with
    /// [`fence_core::FenceError::Unissued`]: etcd's canonical guard. Every write's txn compares the lock
    /// key's `create_revision` with the token, so a forged token, and the token of a lease
    /// that expired or was revoked, change nothing, even when above the mark. Tokens of
    /// [`crate::EtcdIssuer`] or another issuer are refused under it: use it only for domains
    /// whose holders take [`crate::EtcdLeases`]. This fence's setting: to make every fence
    /// under the prefix obey it, store it with [`EtcdFence::set_resource_bounds`].
    pub fn issued_only(mut self) -> Self {
        self.bounds.issued_only = true;
        self
    }

    /// Refuses tokens more than `max_step` above a domain's mark (above zero for a domain
    /// without one) with [`fence_core::FenceError::TokenTooFar`]: see [`fence_core::raw::TokenBounds`]. etcd
    /// tokens are revisions, which grow with every write in the cluster: choose a step above
    /// the number of writes the cluster takes between two acquisitions of a domain (and above
    /// the cluster's revision, for a domain's first token). This fence's setting: to make
    /// every fence under the prefix obey it, store it with [`EtcdFence::set_resource_bounds`].
    pub fn max_token_step(mut self, max_step: NonZeroU64) -> Self {
        self.bounds.max_step = Some(max_step);
        self
    }

    /// The fence, inside the telemetry layer ([`Observed`]).
    pub fn build(self) -> Observed<EtcdFence> {
        Observed::new(EtcdFence::from_parts(
            self.etcd,
            self.max_value_bytes,
            self.op_id_retention,
            self.max_attempts,
            self.bounds,
            self.cache_capacity,
        ))
    }
}

impl fmt::Debug for EtcdFenceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdFenceBuilder")
            .field("prefix", &self.etcd.prefix())
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_retention", &self.op_id_retention)
            .field("max_attempts", &self.max_attempts)
            .field("bounds", &self.bounds)
            .field("cache_capacity", &self.cache_capacity)
            .finish_non_exhaustive()
    }
}
