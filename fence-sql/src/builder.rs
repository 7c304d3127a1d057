//! A fence's settings, checked when it is built.

use std::fmt;
use std::num::NonZeroU64;

use fence_core::env::Env;
use fence_core::{BoundsConfig, FenceError, Observed, DEFAULT_OP_ID_RETENTION};
use sqlx::pool::PoolOptions;
use sqlx::{Connection, Database, Pool};

use crate::{Dialect, FenceCore, Tables};

/// Builds an SQL fence on a pool, with its tables in a namespace (a PostgreSQL schema, a MySQL
/// database) created by the adapter's `migrate`. `build` does no I/O: the tables' shape is
/// checked on first use. Each adapter names it (`fence_postgres::PostgresFenceBuilder`,
/// `fence_mysql::MySqlFenceBuilder`) and makes one with its fence's `builder`.
#[must_use = "a builder does nothing until built"]
pub struct FenceBuilder<D: Dialect> {
    pool: Pool<D::Db>,
    namespace: String,
    max_value_bytes: usize,
    op_id_retention: usize,
    bounds: BoundsConfig,
}

impl<D: Dialect> FenceBuilder<D> {
    /// A builder on `pool`, with the fence's tables in `namespace`, the dialect's default
    /// value limit, 1,024 op ids remembered per domain and no bounds of this client's.
    pub fn new(pool: Pool<D::Db>, namespace: &str) -> Self {
        FenceBuilder {
            pool,
            namespace: namespace.to_owned(),
            max_value_bytes: D::DEFAULT_MAX_VALUE_BYTES,
            op_id_retention: DEFAULT_OP_ID_RETENTION,
            bounds: BoundsConfig::NONE,
        }
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

    /// Refuses tokens more than `max_step` above a domain's mark (above zero for a domain
    /// without one) with [`FenceError::TokenTooFar`], in the transaction that locks the mark
    /// (see [`fence_core::raw::TokenBounds`]): a forged or corrupted token would otherwise
    /// fence every honest holder out. The tables' own counter grows by one per acquisition; a
    /// step of a few thousand leaves room for acquisitions that never wrote. This client's
    /// setting: to make every client of the tables obey it, store it there with the fence's
    /// `set_resource_bounds`.
    pub fn max_token_step(mut self, max_step: NonZeroU64) -> Self {
        self.bounds.max_step = Some(max_step);
        self
    }

    /// Accepts only tokens the tables' own counter issued for the domain (the adapter's issuer
    /// and leases on the same tables: up to the domain's `fence_counters` row, read after the
    /// mark row's lock), refusing others with [`FenceError::Unissued`]. Use it only for
    /// domains whose tokens come from that issuer. This client's setting: to make every client
    /// obey it, store it in the tables with the fence's `set_resource_bounds`.
    pub fn issued_only(mut self) -> Self {
        self.bounds.issued_only = true;
        self
    }

    /// This client's admission settings at once (replacing [`Self::max_token_step`] and
    /// [`Self::issued_only`]).
    pub fn bounds(mut self, bounds: BoundsConfig) -> Self {
        self.bounds = bounds;
        self
    }

    /// Checks the namespace's name and builds the fence, inside the telemetry layer
    /// ([`Observed`]).
    pub fn build(self) -> Result<Observed<D::Fence>, FenceError> {
        let tables = Tables::new(&self.namespace)?;
        Ok(Observed::new(D::Fence::from(FenceCore::new(
            self.pool,
            tables,
            self.max_value_bytes,
            self.op_id_retention,
            self.bounds,
        ))))
    }

    /// A builder on a pool opened from the process environment (the adapter's `env` module
    /// lists the variables); the connection is tried here, so an unreachable server fails
    /// now, as a backend error of class `Unavailable`. The tables must exist (the adapter's
    /// `migrate`).
    pub async fn from_env() -> Result<Self, FenceError> {
        Self::from_env_with(&Env::process()).await
    }

    /// [`Self::from_env`] from `env`.
    pub async fn from_env_with(env: &Env) -> Result<Self, FenceError> {
        let settings = env.sql_pool(&D::VARIABLES)?;
        let options = settings
            .url
            .parse::<<<D::Db as Database>::Connection as Connection>::Options>()
            .map_err(|_| settings.invalid_url())?;
        let tables = Tables::<D>::new(&settings.namespace)?; // checked before any connection
        let pool = PoolOptions::<D::Db>::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.acquire_timeout)
            .connect_with(options)
            .await
            .map_err(|e| FenceError::backend(D::BACKEND, D::classify(&e).kind, None, e))?;
        Ok(
            FenceBuilder::new(pool, tables.name()).bounds(BoundsConfig::new(
                settings.max_token_step,
                settings.issued_only,
            )),
        )
    }
}

impl<D: Dialect> Clone for FenceBuilder<D> {
    fn clone(&self) -> Self {
        FenceBuilder {
            pool: self.pool.clone(),
            namespace: self.namespace.clone(),
            max_value_bytes: self.max_value_bytes,
            op_id_retention: self.op_id_retention,
            bounds: self.bounds,
        }
    }
}

/// The pool is left out: its options may hold a password.
impl<D: Dialect> fmt::Debug for FenceBuilder<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceBuilder")
            .field("backend", &D::BACKEND)
            .field("namespace", &self.namespace)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_retention", &self.op_id_retention)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}
