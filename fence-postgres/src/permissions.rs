//! Which of the privileges the fence needs its role has, read from PostgreSQL's own privilege
//! functions (`has_table_privilege` …): nothing is written.

use fence_core::permissions::{Permission, PermissionReport};
use fence_core::FenceError;

use crate::error::{unscoped_error, BACKEND};
use crate::PostgresFence;

/// (privilege, table, what the fence needs it for)
/// The rows of [`TABLES`] only operators need (retirement, re-bases).
const OPERATORS_ONLY: [(&str, &str); 2] = [
    ("DELETE", "fence_counters"),
    ("SELECT, INSERT", "fence_rebases"),
];

const TABLES: [(&str, &str, &str); 7] = [
    (
        "SELECT, INSERT, UPDATE, DELETE",
        "fence_marks",
        "every fenced operation (fence_write deletes the row it created for a refused first write)",
    ),
    (
        "SELECT, INSERT, UPDATE, DELETE",
        "fence_ops",
        "operation ids",
    ),
    (
        "SELECT, INSERT, UPDATE",
        "fence_counters",
        "the issuer, leases and issued-only checks",
    ),
    (
        "DELETE",
        "fence_counters",
        "retire (a worker's role must never have it: a deleted counter would issue its tokens again)",
    ),
    ("SELECT, INSERT, UPDATE, DELETE", "fence_leases", "leases"),
    (
        "SELECT, INSERT",
        "fence_rebases",
        "re-bases",
    ),
    (
        "SELECT",
        "fence_settings",
        "the schema's admission settings, read by every fenced operation (operators set them: INSERT, UPDATE, DELETE)",
    ),
];

impl PostgresFence {
    /// [`PostgresFence::check_permissions`]: the privileges each table needs, probed.
    pub(crate) async fn permissions_now(&self) -> Result<PermissionReport, FenceError> {
        let schema = self.schema();
        let mut report = PermissionReport::new(BACKEND, format!("schema {schema}"));
        let schema_usage = self
            .has("SELECT has_schema_privilege($1, 'USAGE')", schema)
            .await?;
        report.push(permission(
            format!("USAGE on schema {schema}"),
            "every operation",
            schema_usage,
        ));
        for (privileges, table, needed_for) in TABLES {
            let qualified = format!("{schema}.{table}");
            let mut missing = Vec::new();
            let mut unknown = None;
            for privilege in privileges.split(", ") {
                let sql = format!("SELECT has_table_privilege($1, '{privilege}')");
                match self.has(&sql, &qualified).await? {
                    Some(true) => {}
                    Some(false) => missing.push(privilege),
                    None => {
                        unknown = Some(format!(
                            "{qualified} does not exist: run fence_postgres::migrate"
                        ))
                    }
                }
            }
            let name = format!("{privileges} on {qualified}");
            let permission = match (unknown, missing.is_empty()) {
                (Some(why), _) => Permission::unknown(name, needed_for, why),
                (None, true) => Permission::granted(name, needed_for),
                (None, false) => Permission::denied(
                    name,
                    needed_for,
                    format!("the role lacks {}", missing.join(", ")),
                ),
            };
            report.push(if OPERATORS_ONLY.contains(&(privileges, table)) {
                permission.for_operators()
            } else {
                permission
            });
        }
        let sequence = self
            .has(
                "SELECT has_sequence_privilege(pg_get_serial_sequence($1, 'seq'), 'USAGE')",
                &format!("{schema}.fence_ops"),
            )
            .await?;
        report.push(permission(
            format!("USAGE on the sequence of {schema}.fence_ops"),
            "operation ids",
            sequence,
        ));
        for (functions, purpose) in [
            (&["fence_write"][..], "writes and deletes"),
            (
                &["fence_lock", "fence_raise"][..],
                "claims and fenced transactions",
            ),
        ] {
            let names: Vec<String> = functions.iter().map(|f| format!("'{f}'")).collect();
            let granted = self
                .has(
                    &format!(
                        "SELECT bool_and(has_function_privilege(p.oid, 'EXECUTE')) \
                         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
                         WHERE n.nspname = $1 AND p.proname IN ({})",
                        names.join(", ")
                    ),
                    schema,
                )
                .await?;
            let qualified: Vec<String> =
                functions.iter().map(|f| format!("{schema}.{f}")).collect();
            report.push(permission(
                format!("EXECUTE on {}", qualified.join(", ")),
                purpose,
                granted,
            ));
        }
        Ok(report)
    }

    /// One privilege query: `Some(granted)`, or `None` when its object does not exist.
    async fn has(&self, sql: &str, object: &str) -> Result<Option<bool>, FenceError> {
        match sqlx::query_scalar::<_, Option<bool>>(sql)
            .bind(object)
            .fetch_one(self.pool())
            .await
        {
            Ok(granted) => Ok(granted),
            // undefined_table, invalid_schema_name, undefined_object
            Err(sqlx::Error::Database(db))
                if matches!(db.code().as_deref(), Some("42P01" | "3F000" | "42704")) =>
            {
                Ok(None)
            }
            Err(error) => Err(unscoped_error(error)),
        }
    }
}

fn permission(name: String, needed_for: &str, granted: Option<bool>) -> Permission {
    match granted {
        Some(true) => Permission::granted(name, needed_for),
        Some(false) => Permission::denied(name, needed_for, "not granted to the role"),
        None => Permission::unknown(
            name,
            needed_for,
            "does not exist: run fence_postgres::migrate",
        ),
    }
}
