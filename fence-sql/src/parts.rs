//! What every SQL fence holds: its pool, its tables, its limits and this client's bounds.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fence_core::{
    BoundsConfig, Capabilities, Domain, FenceError, OpIdRetention, Operation, OperationId,
    RememberedOp,
};
use sqlx::{ColumnIndex, Database, Executor, IntoArguments, Pool, QueryBuilder, Row};

use crate::{corrupt, map_error, shape_result, Dialect, FenceBuilder, Tables};

/// The parts every SQL fence has (an adapter's fence dereferences to it): the pool it runs on,
/// its tables, the largest value it accepts, the op ids it remembers per domain and this
/// client's own admission settings (the tables' `fence_settings` add to them). Cheap to clone
/// (the pool is shared).
pub struct FenceCore<D: Dialect> {
    pool: Pool<D::Db>,
    tables: Tables<D>,
    max_value_bytes: usize,
    op_id_retention: usize,
    bounds: BoundsConfig,
    /// Set once the tables were found with the expected shape (checked on first use).
    shape_checked: Arc<AtomicBool>,
}

impl<D: Dialect> FenceCore<D> {
    pub(crate) fn new(
        pool: Pool<D::Db>,
        tables: Tables<D>,
        max_value_bytes: usize,
        op_id_retention: usize,
        bounds: BoundsConfig,
    ) -> Self {
        FenceCore {
            pool,
            tables,
            max_value_bytes,
            op_id_retention,
            bounds,
            shape_checked: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The pool the fence runs on.
    pub fn pool(&self) -> &Pool<D::Db> {
        &self.pool
    }

    /// The fence's tables.
    pub fn tables(&self) -> &Tables<D> {
        &self.tables
    }

    /// The largest value accepted (refused before any I/O above it).
    pub fn max_value_bytes(&self) -> usize {
        self.max_value_bytes
    }

    /// Operation ids remembered per domain (0: none).
    pub fn op_id_retention(&self) -> usize {
        self.op_id_retention
    }

    /// This client's own admission settings, as built (the tables' settings add to them).
    pub fn client_bounds(&self) -> BoundsConfig {
        self.bounds
    }

    /// What the fenced store offers: op-id memory per domain, the value limit, durability,
    /// this client's bounds.
    pub fn store_capabilities(&self) -> Capabilities {
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::per_domain(self.op_id_retention))
            .with_max_value_bytes(Some(self.max_value_bytes))
            .with_survives_restart(true)
            .with_bounds(self.bounds)
    }

    /// A builder with this fence's pool, namespace and settings: build a fence that differs in
    /// some of them.
    pub fn to_builder(&self) -> FenceBuilder<D> {
        FenceBuilder::new(self.pool.clone(), self.tables.name())
            .max_value_bytes(self.max_value_bytes)
            .op_id_retention(self.op_id_retention)
            .bounds(self.bounds)
    }

    /// Checks, once per fence, that the tables have the shape the adapter's migration gives
    /// them: tables of another shape fail closed (`CorruptState`), missing ones are a
    /// `NotFound` backend error, before anything is read or written on `domain`.
    pub async fn ensure_shape(
        &self,
        domain: &Domain,
        operation: Operation,
    ) -> Result<(), FenceError> {
        if self.shape_checked.load(Ordering::Acquire) {
            return Ok(());
        }
        let found = D::check_shape(&self.pool, &self.tables)
            .await
            .map_err(|e| map_error::<D>(e, domain, operation, false))?;
        shape_result(found, &self.tables, Some(domain))?;
        self.shape_checked.store(true, Ordering::Release);
        Ok(())
    }
}

impl<D: Dialect> Clone for FenceCore<D> {
    fn clone(&self) -> Self {
        FenceCore {
            pool: self.pool.clone(),
            tables: self.tables.clone(),
            max_value_bytes: self.max_value_bytes,
            op_id_retention: self.op_id_retention,
            bounds: self.bounds,
            shape_checked: Arc::clone(&self.shape_checked),
        }
    }
}

impl<D: Dialect> fmt::Debug for FenceCore<D> {
    // The pool's options may hold a password: only the namespace and limits are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceCore")
            .field("backend", &D::BACKEND)
            .field("namespace", &self.tables.name())
            .field("max_value_bytes", &self.max_value_bytes)
            .field("op_id_retention", &self.op_id_retention)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> FenceCore<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    /// The operation ids `domain` still remembers, oldest first: for operators. A record that
    /// is not Fence's fails closed (`CorruptState`).
    pub async fn remembered_ops(&self, domain: &Domain) -> Result<Vec<RememberedOp>, FenceError> {
        self.ensure_shape(domain, Operation::Read).await?;
        let mut query = QueryBuilder::new(format!(
            "SELECT {}, op_id, kind, revision, {} FROM {} WHERE domain = ",
            D::token_select("token"),
            D::token_select("previous"),
            self.tables.ops()
        ));
        D::push_domain(&mut query, domain);
        query.push(" ORDER BY seq");
        let sql_error = |e| map_error::<D>(e, domain, Operation::Read, false);
        let mut conn = self.pool.acquire().await.map_err(sql_error)?;
        let rows = query
            .build()
            .fetch_all(&mut *conn)
            .await
            .map_err(sql_error)?;
        rows.iter()
            .map(|row| {
                let column =
                    |e: sqlx::Error| corrupt::<D>(domain, format!("operation record: {e}"));
                let token: D::TokenValue = row.try_get(0).map_err(column)?;
                let token = D::token_of(domain, token, "operation record's token")?;
                let op_id: D::TextValue = row.try_get(1).map_err(column)?;
                let op_id =
                    OperationId::new(D::text_of(domain, op_id, "operation record's op id")?)
                        .map_err(|e| {
                            corrupt::<D>(domain, format!("operation record's op id: {e}"))
                        })?;
                D::decode_op(domain, row, 2)?
                    .map(|op| op.remembered(token, op_id))
                    .ok_or_else(|| corrupt::<D>(domain, "operation record without a kind"))
            })
            .collect()
    }
}
