//! `DynamoDbFenceBuilder`: a fence's settings.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

use fence_core::raw::BoundedCache;
use fence_core::{BoundsConfig, FenceError, InvalidInput, Observed};

use crate::fence::{
    DEFAULT_CACHE_CAPACITY, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_VALUE_BYTES, DEFAULT_OP_ID_RETENTION,
    MAX_OP_ID_RETENTION, MAX_VALUE_BYTES,
};
use crate::{DynamoDb, DynamoDbFence};

/// Builds a [`DynamoDbFence`] ([`DynamoDb::fence_builder`]; [`DynamoDb::fence`] builds one
/// with the defaults). `build` does no I/O.
///
/// ```no_run
/// # fn run(dynamodb: fence_dynamodb::DynamoDb) -> Result<(), fence_core::FenceError> {
/// let fence = dynamodb.fence_builder().max_value_bytes(64 * 1024).issued_only().build()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until built"]
pub struct DynamoDbFenceBuilder {
    dynamodb: DynamoDb,
    max_value_bytes: usize,
    op_id_retention: usize,
    max_attempts: u32,
    bounds: BoundsConfig,
    cache_capacity: usize,
}

impl DynamoDbFenceBuilder {
    pub(crate) fn new(dynamodb: DynamoDb) -> Self {
        DynamoDbFenceBuilder {
            dynamodb: dynamodb.clone(),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            op_id_retention: DEFAULT_OP_ID_RETENTION,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            bounds: dynamodb.fence_bounds,
            cache_capacity: DEFAULT_CACHE_CAPACITY,
        }
    }

    /// Remembers the last state seen of at most `domains` domains (0: read before every
    /// write). A remembered state makes a write one request; DynamoDB's condition decides
    /// regardless.
    pub fn cache_capacity(mut self, domains: usize) -> Self {
        self.cache_capacity = domains;
        self
    }

    /// Refuses values larger than `max` bytes, before any I/O (at most [`MAX_VALUE_BYTES`]:
    /// a DynamoDB item holds 400 KB).
    pub fn max_value_bytes(mut self, max: usize) -> Self {
        self.max_value_bytes = max;
        self
    }

    /// Remembers the newest `count` operation ids per domain (0 turns replay detection off;
    /// at most [`MAX_OP_ID_RETENTION`]).
    pub fn op_id_retention(mut self, count: usize) -> Self {
        self.op_id_retention = count;
        self
    }

    /// Gives up after `attempts` conditional writes that found the domain changed by
    /// concurrent writers (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Accepts only tokens this table issued for the domain ([`crate::DynamoDbIssuer`] and
    /// [`crate::DynamoDbLeases`] share its counter), refusing any above the domain's counter
    /// with [`FenceError::Unissued`]: every write's condition compares the token with the
    /// counter, so a forged token changes nothing even when above the mark.
    pub fn issued_only(mut self) -> Self {
        self.bounds.issued_only = true;
        self
    }

    /// Refuses tokens more than `max_step` above a domain's mark (above zero for a domain
    /// without one) with [`FenceError::TokenTooFar`].
    pub fn max_token_step(mut self, max_step: NonZeroU64) -> Self {
        self.bounds.max_step = Some(max_step);
        self
    }

    /// The fence, inside the telemetry layer ([`Observed`]); a limit out of range is an
    /// [`InvalidInput::Configuration`].
    pub fn build(self) -> Result<Observed<DynamoDbFence>, FenceError> {
        if self.max_value_bytes > MAX_VALUE_BYTES {
            return Err(InvalidInput::Configuration(format!(
                "dynamodb max_value_bytes {} is above {MAX_VALUE_BYTES}: a DynamoDB item holds at most 400 KB",
                self.max_value_bytes
            ))
            .into());
        }
        if self.op_id_retention > MAX_OP_ID_RETENTION {
            return Err(InvalidInput::Configuration(format!(
                "dynamodb op_id_retention {} is above {MAX_OP_ID_RETENTION}: they share the item's 400 KB",
                self.op_id_retention
            ))
            .into());
        }
        Ok(self.into_fence())
    }

    /// The fence, its limits already checked (the defaults are within them).
    pub(crate) fn into_fence(self) -> Observed<DynamoDbFence> {
        Observed::new(DynamoDbFence {
            dynamodb: self.dynamodb,
            max_value_bytes: self.max_value_bytes,
            op_id_retention: self.op_id_retention,
            max_attempts: self.max_attempts,
            bounds: self.bounds,
            cache: Arc::new(BoundedCache::new(self.cache_capacity)),
        })
    }
}

impl DynamoDbFence {
    /// A builder with this fence's table and settings (it builds a fence with a cache of its
    /// own).
    pub fn to_builder(&self) -> DynamoDbFenceBuilder {
        DynamoDbFenceBuilder {
            dynamodb: self.dynamodb.clone(),
            max_value_bytes: self.max_value_bytes,
            op_id_retention: self.op_id_retention,
            max_attempts: self.max_attempts,
            bounds: self.bounds,
            cache_capacity: self.cache.capacity(),
        }
    }
}

impl fmt::Debug for DynamoDbFenceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbFenceBuilder")
            .field("dynamodb", &self.dynamodb)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_retention", &self.op_id_retention)
            .field("max_attempts", &self.max_attempts)
            .field("bounds", &self.bounds)
            .field("cache_capacity", &self.cache_capacity)
            .finish_non_exhaustive()
    }
}
