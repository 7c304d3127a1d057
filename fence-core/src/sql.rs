//! What SQL adapters share beyond the decision: names they splice into their statements.

use crate::InvalidInput;

/// `name` if it is a plain SQL identifier (`[a-z_][a-z0-9_]*`, at most 63 bytes): safe to
/// splice into SQL without quoting on PostgreSQL, MySQL and MariaDB alike; `what` names it in
/// the error.
///
/// ```
/// use fence_core::raw::sql_identifier;
/// assert_eq!(sql_identifier("table name", "orders")?, "orders");
/// assert!(sql_identifier("table name", "orders; DROP TABLE x").is_err());
/// assert!(sql_identifier("table name", "Orders").is_err());
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
pub fn sql_identifier(what: &str, name: &str) -> Result<String, InvalidInput> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if valid {
        Ok(name.to_owned())
    } else {
        Err(InvalidInput::Configuration(format!(
            "{what} `{name}` must match [a-z_][a-z0-9_]* and be at most 63 bytes"
        )))
    }
}

/// The columns of each table an adapter's migration creates: `(table, [(column, type)])`, the
/// type as the adapter's catalogue query spells it.
pub type ExpectedTables = &'static [(&'static str, &'static [(&'static str, &'static str)])];

/// What is wrong with the tables found where an adapter's migration put them.
// Closed: a table is there with its columns, missing, or wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A table is missing: the migration has not run there.
    Missing(&'static str),
    /// A table exists with other columns (the message lists both).
    Wrong(String),
}

/// Compares `found` — `(table, column, type)` rows from the database's catalogue, in column
/// order — with `expected`, in `namespace` (the schema or database, for the message). `None`
/// when every table has exactly its columns: tables of another shape fail closed.
///
/// ```
/// use fence_core::raw::{compare_tables, Shape};
/// let expected: &[(&str, &[(&str, &str)])] = &[("fence_marks", &[("domain", "varbinary(256) not null")])];
/// let row = |c: &str, t: &str| ("fence_marks".to_string(), c.to_string(), t.to_string());
/// assert_eq!(compare_tables("app", expected, &[row("domain", "varbinary(256) not null")]), None);
/// assert_eq!(compare_tables("app", expected, &[]), Some(Shape::Missing("fence_marks")));
/// assert!(matches!(compare_tables("app", expected, &[row("domain", "text")]), Some(Shape::Wrong(_))));
/// ```
pub fn compare_tables(
    namespace: &str,
    expected: ExpectedTables,
    found: &[(String, String, String)],
) -> Option<Shape> {
    for (table, columns) in expected {
        let present: Vec<(&str, &str)> = found
            .iter()
            .filter(|(t, _, _)| t == table)
            .map(|(_, name, kind)| (name.as_str(), kind.as_str()))
            .collect();
        if present.is_empty() {
            return Some(Shape::Missing(table));
        }
        if present != *columns {
            let list = |columns: &[(&str, &str)]| {
                columns
                    .iter()
                    .map(|(name, kind)| format!("{name} {kind}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Some(Shape::Wrong(format!(
                "{namespace}.{table} has columns ({}), expected ({})",
                list(&present),
                list(columns)
            )));
        }
    }
    None
}
