//! The schema: created explicitly by [`migrate`], never implicitly on a call.

use fence_core::{FenceError, InvalidInput};
use sqlx::PgPool;

use crate::error::BACKEND;

/// The schema's SQL, with `fence_schema` standing for the schema you choose.
pub const SCHEMA_SQL: &str = include_str!("../sql/schema.sql");

/// A validated schema name (`[a-z_][a-z0-9_]*`, at most 63 bytes), safe to splice into SQL.
#[derive(Clone, Debug)]
pub(crate) struct Schema(String);

impl Schema {
    pub(crate) fn new(name: &str) -> Result<Self, InvalidInput> {
        let valid = !name.is_empty()
            && name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if valid {
            Ok(Schema(name.to_owned()))
        } else {
            Err(InvalidInput::Configuration(format!(
                "schema name `{name}` must match [a-z_][a-z0-9_]* and be at most 63 bytes"
            )))
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.0
    }

    pub(crate) fn marks(&self) -> String {
        format!("{}.fence_marks", self.0)
    }

    pub(crate) fn ops(&self) -> String {
        format!("{}.fence_ops", self.0)
    }
}

/// Creates the fence's tables in `schema` (idempotent: existing tables are left as they are).
/// Run it from your migrations, or run [`SCHEMA_SQL`] with `fence_schema` replaced yourself.
pub async fn migrate(pool: &PgPool, schema: &str) -> Result<(), FenceError> {
    let schema = Schema::new(schema)?;
    let sql = SCHEMA_SQL.replace("fence_schema", schema.name());
    sqlx::raw_sql(&sql).execute(pool).await.map_err(|e| {
        FenceError::backend(
            BACKEND,
            crate::error::kind_of(&e),
            None,
            crate::error::PostgresFenceError::Sql(e),
        )
    })?;
    Ok(())
}
