//! Which of the privileges the fence needs its user has, asked of the server itself: each
//! privilege is probed with an `EXPLAIN` of a statement that needs it and nothing else
//! (`EXPLAIN` checks privileges and plans, it never runs the statement), so grants on the
//! table, the database or globally, to the user or to its enabled roles, all count: nothing is
//! written.

use fence_core::permissions::{Permission, PermissionReport};
use fence_core::FenceError;
use sqlx::{Connection, Executor};

use crate::schema::sql_error;
use crate::MySqlFence;

/// (privileges, table, what the fence needs them for, operators only)
const TABLES: [(&str, &str, &str, bool); 9] = [
    (
        "SELECT, INSERT, UPDATE",
        "fence_marks",
        "every fenced operation (the row is read FOR UPDATE, and created with INSERT … ON DUPLICATE KEY UPDATE when missing)",
        false,
    ),
    ("DELETE", "fence_marks", "retire", true),
    (
        "SELECT, INSERT, DELETE",
        "fence_ops",
        "operation ids (the oldest beyond the retention are deleted)",
        false,
    ),
    (
        "SELECT, INSERT, UPDATE",
        "fence_counters",
        "the issuer, leases and issued-only checks",
        false,
    ),
    (
        "DELETE",
        "fence_counters",
        "retire (a worker's user must never have it: a deleted counter would issue its tokens again)",
        true,
    ),
    (
        "SELECT, INSERT, UPDATE, DELETE",
        "fence_leases",
        "leases",
        false,
    ),
    (
        "SELECT",
        "fence_settings",
        "the database's admission settings, read by every fenced operation",
        false,
    ),
    (
        "UPDATE, LOCK TABLES",
        "fence_settings",
        "storing admission settings",
        true,
    ),
    ("SELECT, INSERT", "fence_rebases", "re-bases", true),
];

/// The first column of one of the fence's tables (`table` is `<database>.<name>`).
fn first_column(table: &str) -> &'static str {
    if table.ends_with(".fence_settings") {
        "max_step"
    } else {
        "domain"
    }
}

/// What a privilege probe found.
enum Probe {
    Granted,
    Denied,
    /// The table does not exist.
    Missing,
}

impl MySqlFence {
    /// [`MySqlFence::check_permissions`]: the privileges each table needs, probed.
    pub(crate) async fn permissions_now(&self) -> Result<PermissionReport, FenceError> {
        let database = self.database();
        let mut report =
            PermissionReport::new(crate::error::BACKEND, format!("database {database}"));
        for (privileges, table, needed_for, operators) in TABLES {
            let qualified = format!("{database}.{table}");
            let name = format!("{privileges} on {qualified}");
            let mut missing = Vec::new();
            let mut absent = false;
            for privilege in privileges.split(", ") {
                match self.probe(privilege, &qualified).await? {
                    Probe::Granted => {}
                    Probe::Denied => missing.push(privilege),
                    Probe::Missing => absent = true,
                }
            }
            let permission = if absent {
                Permission::unknown(
                    name,
                    needed_for,
                    format!("{qualified} does not exist: run fence_mysql::migrate"),
                )
            } else if missing.is_empty() {
                Permission::granted(name, needed_for)
            } else {
                Permission::denied(
                    name,
                    needed_for,
                    format!("the user lacks {}", missing.join(", ")),
                )
            };
            report.push(if operators {
                permission.for_operators()
            } else {
                permission
            });
        }
        Ok(report)
    }

    /// Asks the server whether the user may run `privilege` on `table`: an `EXPLAIN` of a
    /// statement needing that privilege alone (no column is read, no row matches).
    async fn probe(&self, privilege: &str, table: &str) -> Result<Probe, FenceError> {
        if privilege == "LOCK TABLES" {
            return self.probe_lock_tables(table).await;
        }
        let statement = match privilege {
            "SELECT" => format!("EXPLAIN SELECT 1 FROM {table} WHERE FALSE"),
            "INSERT" => format!("EXPLAIN INSERT INTO {table} () VALUES ()"),
            // Every table's first column, NULL whatever it holds: nothing is read.
            "UPDATE" => format!(
                "EXPLAIN UPDATE {table} SET {} = NULL WHERE FALSE",
                first_column(table)
            ),
            _ => format!("EXPLAIN DELETE FROM {table} WHERE FALSE"),
        };
        probed(
            sqlx::raw_sql(&statement)
                .execute(self.pool())
                .await
                .map(|_| ()),
        )
    }

    /// `LOCK TABLES` cannot be explained: the table is locked for reading and unlocked at once,
    /// on a connection of its own (closed afterwards, never back in the pool with a lock).
    async fn probe_lock_tables(&self, table: &str) -> Result<Probe, FenceError> {
        let mut conn = self.pool().acquire().await.map_err(sql_error)?.detach();
        let locked = conn
            .execute(format!("LOCK TABLES {table} READ").as_str())
            .await
            .map(|_| ());
        if locked.is_ok() {
            conn.execute("UNLOCK TABLES").await.map_err(sql_error)?;
        }
        conn.close().await.map_err(sql_error)?;
        probed(locked)
    }
}

/// What a probe's answer says: granted, denied (command or column denied, no access to the
/// database), or a table that does not exist.
fn probed(answer: Result<(), sqlx::Error>) -> Result<Probe, FenceError> {
    match answer {
        Ok(()) => Ok(Probe::Granted),
        Err(error) => match crate::dialect::number(&error) {
            Some(1142 | 1143 | 1044) => Ok(Probe::Denied),
            Some(1146) => Ok(Probe::Missing),
            _ => Err(sql_error(error)),
        },
    }
}
