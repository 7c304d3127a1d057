//! The schema: created explicitly by [`migrate`], never implicitly on a call.

use fence_core::raw::{compare_tables, ExpectedTables, Shape};
use fence_core::FenceError;
use sqlx::MySqlPool;

pub(crate) use crate::error::{require_shape, shape_error, unscoped_error as sql_error};

/// The schema's SQL, with `fence_db` standing for the database you choose.
pub const SCHEMA_SQL: &str = include_str!("../sql/schema.sql");

/// The fence's tables in the database chosen.
pub(crate) type Database = fence_sql::Tables<crate::dialect::MySqlDialect>;

/// The columns `migrate` creates, as `information_schema.COLUMNS.COLUMN_TYPE` spells them
/// (display widths dropped: MariaDB writes `bigint(20) unsigned`, MySQL 8 `bigint unsigned`),
/// with ` not null` where the column is.
const EXPECTED: ExpectedTables = &[
    (
        "fence_marks",
        &[
            ("domain", "varbinary(256) not null"),
            ("hwm", "bigint unsigned"),
            ("state", "binary(1)"),
            ("revision", "bigint unsigned"),
            ("writer", "bigint unsigned"),
            ("value", "longblob"),
        ],
    ),
    (
        "fence_ops",
        &[
            ("seq", "bigint unsigned not null"),
            ("domain", "varbinary(256) not null"),
            ("token", "bigint unsigned not null"),
            ("op_id", "varbinary(128) not null"),
            ("kind", "varbinary(16) not null"),
            ("revision", "bigint unsigned"),
            ("previous", "bigint unsigned"),
        ],
    ),
    (
        "fence_counters",
        &[
            ("domain", "varbinary(256) not null"),
            ("last", "bigint unsigned not null"),
        ],
    ),
    (
        "fence_leases",
        &[
            ("domain", "varbinary(256) not null"),
            ("owner", "varbinary(128) not null"),
            ("token", "bigint unsigned not null"),
            ("expires", "datetime(6) not null"),
        ],
    ),
    (
        "fence_settings",
        &[
            ("one", "tinyint unsigned not null"),
            ("max_step", "bigint unsigned"),
            ("issued_only", "tinyint unsigned not null"),
        ],
    ),
    (
        "fence_rebases",
        &[
            ("seq", "bigint unsigned not null"),
            ("domain", "varbinary(256) not null"),
            ("from_mark", "bigint unsigned not null"),
            ("to_mark", "bigint unsigned not null"),
            ("operator", "varbinary(128) not null"),
            ("reason", "blob not null"),
            ("at", "datetime(6) not null"),
        ],
    ),
];

/// `bigint(20) unsigned` as `bigint unsigned` (and so for every integer type): the display
/// width means nothing to Fence, and MySQL 8 no longer shows it.
fn without_display_width(column_type: &str) -> String {
    for integer in ["tinyint", "smallint", "mediumint", "int", "bigint"] {
        if let Some((_, tail)) = column_type
            .strip_prefix(integer)
            .and_then(|rest| rest.strip_prefix('('))
            .and_then(|rest| rest.split_once(')'))
        {
            return format!("{integer}{tail}");
        }
    }
    column_type.to_owned()
}

/// Compares the fence's tables in `database` with what [`migrate`] creates.
pub(crate) async fn check_shape(
    pool: &MySqlPool,
    database: &Database,
) -> Result<Option<Shape>, sqlx::Error> {
    let rows: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT CAST(TABLE_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR), \
         CAST(COLUMN_TYPE AS CHAR), CAST(IS_NULLABLE AS CHAR) \
         FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = ? \
         AND TABLE_NAME IN ('fence_marks', 'fence_ops', 'fence_counters', 'fence_leases', \
         'fence_settings', 'fence_rebases') \
         ORDER BY TABLE_NAME, ORDINAL_POSITION",
    )
    .bind(database.name())
    .fetch_all(pool)
    .await?;
    let columns: Vec<(String, String, String)> = rows
        .into_iter()
        .map(|(table, column, kind, nullable)| {
            let kind = without_display_width(&kind.to_ascii_lowercase());
            let kind = if nullable == "NO" {
                format!("{kind} not null")
            } else {
                kind
            };
            (table, column, kind)
        })
        .collect();
    Ok(compare_tables(database.name(), EXPECTED, &columns))
}

/// Creates the database and the fence's tables in it (idempotent: existing tables are left as
/// they are), then checks their shape: tables that existed with another shape are an error
/// (nothing is altered). Run it from your migrations, or run [`SCHEMA_SQL`] with `fence_db`
/// replaced yourself.
pub async fn migrate(pool: &MySqlPool, database: &str) -> Result<(), FenceError> {
    let database = Database::new(database)?;
    run_script(pool, &database, SCHEMA_SQL).await?;
    require_shape(pool, &database).await
}

/// Runs a schema script, `fence_db` standing for `database`, one statement at a time.
pub(crate) async fn run_script(
    pool: &MySqlPool,
    database: &Database,
    script: &str,
) -> Result<(), FenceError> {
    let sql = script.replace("fence_db", database.name());
    for statement in statements(&sql) {
        sqlx::raw_sql(&statement)
            .execute(pool)
            .await
            .map_err(sql_error)?;
    }
    Ok(())
}

/// The statements of a schema file: `--` comment lines dropped, split at a `;` ending a line.
fn statements(sql: &str) -> Vec<String> {
    let code: Vec<&str> = sql
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect();
    code.join("\n")
        .split(";\n")
        .map(|s| s.trim().trim_end_matches(';').trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_splits_into_its_statements() {
        let statements = statements(SCHEMA_SQL);
        assert_eq!(statements.len(), 8, "{statements:#?}");
        assert!(statements[0].starts_with("CREATE DATABASE"));
        assert!(statements.iter().all(|s| !s.starts_with("--")));
    }

    #[test]
    fn display_widths_are_dropped() {
        assert_eq!(
            without_display_width("bigint(20) unsigned"),
            "bigint unsigned"
        );
        assert_eq!(without_display_width("bigint unsigned"), "bigint unsigned");
        assert_eq!(without_display_width("varbinary(256)"), "varbinary(256)");
        assert_eq!(
            without_display_width("tinyint(3) unsigned"),
            "tinyint unsigned"
        );
        assert_eq!(without_display_width("int(10) unsigned"), "int unsigned");
    }
}
