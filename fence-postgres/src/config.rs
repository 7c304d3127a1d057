//! `PostgresFenceBuilder`: a fence's settings, checked when it is built.

use std::fmt;
use std::num::NonZeroU64;

use fence_core::{BoundsConfig, FenceError, Observed};
use sqlx::postgres::PgPool;

use crate::fence::{DEFAULT_MAX_VALUE_BYTES, DEFAULT_OP_ID_RETENTION};
use crate::schema::Schema;
use crate::PostgresFence;

/// Builds a [`PostgresFence`] on a pool, with its tables in a schema (created by
/// [`crate::migrate`]). `build` does no I/O: the tables' shape is checked on first use.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = sqlx::PgPool::connect("postgres://fence@127.0.0.1:5440/postgres").await?;
/// let fence = fence_postgres::PostgresFence::builder(pool, "fence")
///     .max_value_bytes(64 * 1024)
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until built"]
pub struct PostgresFenceBuilder {
    pool: PgPool,
    schema: String,
    max_value_bytes: usize,
    op_id_retention: usize,
    bounds: BoundsConfig,
}

impl PostgresFence {
    /// A builder for a fence on `pool`, with its tables in `schema`.
    pub fn builder(pool: PgPool, schema: &str) -> PostgresFenceBuilder {
        PostgresFenceBuilder {
            pool,
            schema: schema.to_owned(),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            op_id_retention: DEFAULT_OP_ID_RETENTION,
            bounds: BoundsConfig::NONE,
        }
    }
}

impl PostgresFence {
    /// A builder with this fence's pool, schema and settings: build a fence that differs in
    /// some of them.
    pub fn to_builder(&self) -> PostgresFenceBuilder {
        PostgresFenceBuilder {
            pool: self.pool().clone(),
            schema: self.schema().to_owned(),
            max_value_bytes: self.max_value_bytes(),
            op_id_retention: self.op_id_retention(),
            bounds: self.client_bounds(),
        }
    }
}

impl PostgresFenceBuilder {
    /// Refuses values larger than `max` bytes, before any I/O (default
    /// [`DEFAULT_MAX_VALUE_BYTES`]).
    pub fn max_value_bytes(mut self, max: usize) -> Self {
        self.max_value_bytes = max;
        self
    }

    /// Remembers the newest `count` operation ids per domain (0 turns replay detection off;
    /// default [`DEFAULT_OP_ID_RETENTION`]).
    pub fn op_id_retention(mut self, count: usize) -> Self {
        self.op_id_retention = count;
        self
    }

    /// Accepts only tokens the schema's own counter issued for the domain ([`crate::PostgresIssuer`]
    /// and [`crate::PostgresLeases`] on the same schema: up to the `fence_counters` row's last
    /// token), refusing others with [`FenceError::Unissued`]. The counter row is read in the
    /// write's own transaction, after the mark row's lock. Use it only for domains whose
    /// tokens come from this schema's issuer or leases. This client's setting: to make every
    /// client of the schema obey it, store it in the schema with
    /// [`PostgresFence::set_resource_bounds`].
    pub fn issued_only(mut self) -> Self {
        self.bounds.issued_only = true;
        self
    }

    /// Refuses tokens more than `max_step` above a domain's mark (above zero for a domain
    /// without one) with [`FenceError::TokenTooFar`], in the same transaction: see
    /// [`fence_core::raw::TokenBounds`]. The schema's own counter grows by one per acquisition; a
    /// step of a few thousand leaves room for acquisitions that never wrote. This client's
    /// setting: to make every client of the schema obey it, store it in the schema with
    /// [`PostgresFence::set_resource_bounds`].
    pub fn max_token_step(mut self, max_step: NonZeroU64) -> Self {
        self.bounds.max_step = Some(max_step);
        self
    }

    /// Checks the schema name and builds the fence, inside the telemetry layer
    /// ([`Observed`]).
    pub fn build(self) -> Result<Observed<PostgresFence>, FenceError> {
        let schema = Schema::new(&self.schema)?;
        Ok(Observed::new(PostgresFence::from_parts(
            self.pool,
            schema,
            self.max_value_bytes,
            self.op_id_retention,
            self.bounds,
        )))
    }
}

/// The pool is left out: its options may hold a password.
impl fmt::Debug for PostgresFenceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresFenceBuilder")
            .field("schema", &self.schema)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_retention", &self.op_id_retention)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}
