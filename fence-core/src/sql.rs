//! What SQL adapters share beyond the decision: names they splice into their statements.

use std::fmt;

use crate::op_memory::{OpMemory, OpRecord};
use crate::{
    Domain, EqualTokenPolicy, FenceError, FencingToken, InvalidInput, OpKind, OpOutcome,
    OperationId, RememberedOp, Revision,
};

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

/// An operation id's record as SQL adapters keep it (a row of kind `write`, with the revision
/// the write produced, or `transaction`, with none; and the mark before it), validated once
/// when decoded.
// Closed: a new kind of record is a new schema version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredOp {
    /// A fenced write or delete.
    Write {
        /// The revision it produced.
        revision: Revision,
        /// The mark before it.
        previous: Option<FencingToken>,
    },
    /// A fenced transaction (its outcome is the user's: nothing else is kept).
    Transaction {
        /// The mark before it.
        previous: Option<FencingToken>,
    },
}

impl StoredOp {
    /// The record from its columns: `kind` (`write` or `transaction`), the revision (only, and
    /// always, for a write: at least 1) and the previous mark. Anything else is an error saying
    /// what is wrong (the adapter reports it as corrupt state).
    ///
    /// ```
    /// use fence_core::raw::StoredOp;
    /// assert!(matches!(StoredOp::from_columns("write", Some(3), None), Ok(StoredOp::Write { .. })));
    /// assert!(StoredOp::from_columns("transaction", Some(3), None).is_err());
    /// assert!(StoredOp::from_columns("append", None, None).is_err());
    /// ```
    pub fn from_columns(
        kind: &str,
        revision: Option<u64>,
        previous: Option<FencingToken>,
    ) -> Result<StoredOp, String> {
        match (kind, revision) {
            ("write", Some(revision)) if revision >= 1 => Ok(StoredOp::Write {
                revision: Revision::new(revision),
                previous,
            }),
            ("transaction", None) => Ok(StoredOp::Transaction { previous }),
            _ => Err(format!(
                "operation record of kind `{}` with revision {revision:?}",
                kind.chars().take(32).collect::<String>()
            )),
        }
    }

    /// As an operator sees it.
    pub fn remembered(&self, token: FencingToken, op_id: OperationId) -> RememberedOp {
        let (kind, previous, outcome) = match *self {
            StoredOp::Write { revision, previous } => {
                (OpKind::Write, previous, revision.to_string())
            }
            StoredOp::Transaction { previous } => (OpKind::Transaction, previous, String::new()),
        };
        RememberedOp::new(token, op_id, kind, previous, outcome)
    }

    /// As a write's memory; an op id first used for a transaction is `OpIdReused`.
    pub fn as_write(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: &OperationId,
    ) -> Result<OpMemory, FenceError> {
        match *self {
            StoredOp::Write { revision, previous } => Ok(OpMemory::from_records([OpRecord::new(
                token,
                op_id.clone(),
                previous,
                OpOutcome::Write { revision },
            )])),
            StoredOp::Transaction { .. } => {
                Err(reused(domain, op_id, OpKind::Transaction, OpKind::Write))
            }
        }
    }

    /// As a fenced transaction's: the mark before it; an op id first used for a write is
    /// `OpIdReused`.
    pub fn as_transaction(
        &self,
        domain: &Domain,
        op_id: &OperationId,
    ) -> Result<Option<FencingToken>, FenceError> {
        match *self {
            StoredOp::Transaction { previous } => Ok(previous),
            StoredOp::Write { .. } => {
                Err(reused(domain, op_id, OpKind::Write, OpKind::Transaction))
            }
        }
    }
}

fn reused(domain: &Domain, op_id: &OperationId, first: OpKind, now: OpKind) -> FenceError {
    InvalidInput::OpIdReused {
        domain: domain.clone(),
        op_id: op_id.clone(),
        first,
        now,
    }
    .into()
}

/// The table, key column, token column and equal-token policy of a per-row fence (the seeds'
/// `UPDATE … WHERE key = ? AND token <= ?` on your own table), validated once: what every SQL
/// adapter's `RowFence` shares. Each row is its own domain, `<namespace>.<table>/<key>`.
///
/// ```
/// use fence_core::raw::RowTarget;
/// let rows = RowTarget::new("schema name", "shop", "accounts", "id", "fence_token")?;
/// assert_eq!(rows.table(), "shop.accounts");
/// assert_eq!(rows.domain(7).as_str(), "shop.accounts/7");
/// assert_eq!(rows.comparison(), "<=");
/// assert!(RowTarget::new("schema name", "shop", "accounts", "id; --", "t").is_err());
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
#[derive(Clone, Debug)]
pub struct RowTarget {
    table: String,
    key: String,
    token: String,
    policy: EqualTokenPolicy,
}

impl RowTarget {
    /// Rows of `namespace.table` (`namespace_what` names the namespace in errors: a schema, a
    /// database), found by `key_column`, with their token in `token_column`; all plain
    /// identifiers ([`sql_identifier`]); the same-owner policy.
    pub fn new(
        namespace_what: &str,
        namespace: &str,
        table: &str,
        key_column: &str,
        token_column: &str,
    ) -> Result<Self, InvalidInput> {
        Ok(RowTarget {
            table: format!(
                "{}.{}",
                sql_identifier(namespace_what, namespace)?,
                sql_identifier("table name", table)?
            ),
            key: sql_identifier("key column", key_column)?,
            token: sql_identifier("token column", token_column)?,
            policy: EqualTokenPolicy::SameOwner,
        })
    }

    /// The equal-token policy.
    pub fn with_policy(mut self, policy: EqualTokenPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// `namespace.table`.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The key column.
    pub fn key_column(&self) -> &str {
        &self.key
    }

    /// The token column.
    pub fn token_column(&self) -> &str {
        &self.token
    }

    /// The equal-token policy.
    pub fn policy(&self) -> EqualTokenPolicy {
        self.policy
    }

    /// The SQL comparison of the row's token with the presented one that admits it: `<=`
    /// under the same-owner policy, `<` under the strict one.
    pub fn comparison(&self) -> &'static str {
        match self.policy {
            EqualTokenPolicy::Strict => "<",
            _ => "<=",
        }
    }

    /// The domain of the row with `key`, as errors name it: `<namespace>.<table>/<key>`, or
    /// the table alone when that is not a valid domain (a key too long, or with control
    /// characters).
    pub fn domain(&self, key: impl fmt::Display) -> Domain {
        Domain::new(format!("{}/{key}", self.table))
            .or_else(|_| Domain::new(self.table.clone()))
            .unwrap_or_else(|_| unreachable!("a validated `namespace.table` is a valid domain"))
    }
}
