//! `PostgresFenceBuilder`: a fence's settings, checked when it is built.

use crate::dialect::PostgresDialect;

/// Builds a [`crate::PostgresFence`] on a pool, with its tables in a schema (created by
/// [`crate::migrate`]): fence-sql's builder, for PostgreSQL. `build` does no I/O: the tables'
/// shape is checked on first use. `PostgresFenceBuilder::from_env` reads the variables of
/// [`crate::env`].
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = sqlx::PgPool::connect("postgres://fence@127.0.0.1:5440/postgres").await?;
/// let fence = fence_postgres::PostgresFence::builder(pool, "fence")
///     .max_value_bytes(64 * 1024)
///     .build()?;
/// # Ok(()) }
/// ```
pub type PostgresFenceBuilder = fence_sql::FenceBuilder<PostgresDialect>;
