//! The schema: created explicitly by [`migrate`], never implicitly on a call.

use fence_core::raw::{compare_tables, ExpectedTables, Shape};
use fence_core::FenceError;
use sqlx::PgPool;

pub(crate) use crate::error::{require_shape, shape_error, unscoped_error as sql_error};

/// The schema's SQL, with `fence_schema` standing for the schema you choose.
pub const SCHEMA_SQL: &str = include_str!("../sql/schema.sql");

/// The fence's tables in the schema chosen.
pub(crate) type Schema = fence_sql::Tables<crate::dialect::PostgresDialect>;

/// The columns `migrate` creates, as `format_type` spells their types (and `not null`).
const EXPECTED: ExpectedTables = &[
    (
        "fence_marks",
        &[
            ("domain", "text not null"),
            ("hwm", "numeric(20,0)"),
            ("state", "\"char\""),
            ("revision", "bigint"),
            ("writer", "numeric(20,0)"),
            ("value", "bytea"),
        ],
    ),
    (
        "fence_ops",
        &[
            ("seq", "bigint not null"),
            ("domain", "text not null"),
            ("token", "numeric(20,0) not null"),
            ("op_id", "text not null"),
            ("kind", "text not null"),
            ("revision", "bigint"),
            ("previous", "numeric(20,0)"),
        ],
    ),
    (
        "fence_counters",
        &[
            ("domain", "text not null"),
            ("last", "numeric(20,0) not null"),
        ],
    ),
    (
        "fence_leases",
        &[
            ("domain", "text not null"),
            ("owner", "text not null"),
            ("token", "numeric(20,0) not null"),
            ("expires", "timestamp with time zone not null"),
        ],
    ),
    (
        "fence_rebases",
        &[
            ("seq", "bigint not null"),
            ("domain", "text not null"),
            ("from_mark", "numeric(20,0) not null"),
            ("to_mark", "numeric(20,0) not null"),
            ("operator", "text not null"),
            ("reason", "text not null"),
            ("at", "timestamp with time zone not null"),
        ],
    ),
    (
        "fence_settings",
        &[
            ("one", "boolean not null"),
            ("max_step", "numeric(20,0)"),
            ("issued_only", "boolean not null"),
        ],
    ),
];

/// Compares the fence's tables in `schema` with what [`migrate`] creates.
pub(crate) async fn check_shape(
    pool: &PgPool,
    schema: &Schema,
) -> Result<Option<Shape>, sqlx::Error> {
    let columns: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod) \
                || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END \
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relname IN ('fence_marks', 'fence_ops', 'fence_counters', 'fence_leases', 'fence_rebases', 'fence_settings') \
         AND a.attnum > 0 AND NOT a.attisdropped ORDER BY c.relname, a.attnum",
    )
    .bind(schema.name())
    .fetch_all(pool)
    .await?;
    if let Some(problem) = compare_tables(schema.name(), EXPECTED, &columns) {
        return Ok(Some(problem));
    }
    // The store's write function, added with the tables (a schema migrated by an older version
    // lacks it, or has one that ignores fence_settings: run `migrate` again).
    // The functions of version 4: fence_write with its bounds, fence_lock and fence_raise.
    let (write, lock, raise): (bool, bool, bool) = sqlx::query_as(
        "SELECT bool_or(p.proname = 'fence_write' AND p.pronargs = 11 \
                        AND 'bound_step' = ANY (p.proargnames)), \
                bool_or(p.proname = 'fence_lock' AND p.pronargs = 4 AND 'txid' = ANY (p.proargnames)), \
                bool_or(p.proname = 'fence_raise' AND p.pronargs = 8) \
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
         WHERE n.nspname = $1 AND p.proname IN ('fence_write', 'fence_lock', 'fence_raise')",
    )
    .bind(schema.name())
    .fetch_optional(pool)
    .await?
    .map(|(w, l, r): (Option<bool>, Option<bool>, Option<bool>)| {
        (w.unwrap_or(false), l.unwrap_or(false), r.unwrap_or(false))
    })
    .unwrap_or_default();
    Ok(if !write {
        Some(Shape::Missing("fence_write"))
    } else if !lock {
        Some(Shape::Missing("fence_lock"))
    } else {
        (!raise).then_some(Shape::Missing("fence_raise"))
    })
}

/// Creates the fence's tables in `schema` (idempotent: existing tables are left as they are),
/// then checks their shape: tables that existed with another shape are an error (nothing is
/// altered). Run it from your migrations, or run [`SCHEMA_SQL`] with `fence_schema` replaced
/// yourself.
pub async fn migrate(pool: &PgPool, schema: &str) -> Result<(), FenceError> {
    let schema = Schema::new(schema)?;
    let sql = SCHEMA_SQL.replace("fence_schema", schema.name());
    sqlx::raw_sql(&sql).execute(pool).await.map_err(sql_error)?;
    require_shape(pool, &schema).await
}
