//! `MySqlFence::check_permissions` against the shared MariaDB: the test user (granted
//! everything) has every privilege; a user granted only some, on the database, on tables and
//! through a role, is told which it lacks, by name; a database not migrated is reported as such.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_core::permissions::{Access, Role};
use fence_mysql::{MySqlDialect, MySqlFence};
use fence_testkit::mysql::{pool, shared_url};

#[tokio::test]
async fn the_check_names_each_missing_privilege() {
    let Some((fence, admin)) =
        fence_testkit::sql::the_owner_is_granted_everything::<MySqlDialect>().await
    else {
        return;
    };

    // A worker granted SELECT on the database, the marks' row privileges on the table, and
    // the op ids' through a role enabled by default.
    let db = fence.database().to_owned();
    let tail = &db[db.len().saturating_sub(24)..];
    let (user, role) = (format!("w{tail}"), format!("r{tail}"));
    let setup = [
        format!("CREATE USER `{user}`@'127.0.0.1' IDENTIFIED BY 'pw'"),
        format!("GRANT SELECT ON `{db}`.* TO `{user}`@'127.0.0.1'"),
        format!("GRANT INSERT, UPDATE ON `{db}`.fence_marks TO `{user}`@'127.0.0.1'"),
        format!("CREATE ROLE `{role}`"),
        format!("GRANT INSERT, DELETE ON `{db}`.fence_ops TO `{role}`"),
        format!("GRANT `{role}` TO `{user}`@'127.0.0.1'"),
        format!("SET DEFAULT ROLE `{role}` FOR `{user}`@'127.0.0.1'"),
    ];
    for statement in &setup {
        sqlx::query(statement).execute(&admin).await.unwrap();
    }
    // The user's URL names the fence's database: it may not use the test user's own.
    let shared = shared_url().unwrap();
    let (server, _) = shared.rsplit_once('/').unwrap();
    let url = format!("{server}/{db}").replace("fence:fence@", &format!("{user}:pw@"));
    let limited = MySqlFence::builder(pool(&url).await, &db).build().unwrap();
    let report = limited.check_permissions().await;
    limited.pool().close().await;
    for statement in [
        format!("DROP USER `{user}`@'127.0.0.1'"),
        format!("DROP ROLE `{role}`"),
    ] {
        sqlx::query(&statement).execute(&admin).await.unwrap();
    }
    let report = report.unwrap();
    println!("{report}");
    let access = |name: &str| {
        let found = report.permissions.iter().find(|p| p.name == name);
        found.map_or_else(|| panic!("{name} not in {report}"), |p| p.access.clone())
    };
    assert_eq!(
        access(&format!("SELECT, INSERT, UPDATE on {db}.fence_marks")),
        Access::Granted,
        "database and table grants together"
    );
    assert_eq!(
        access(&format!("SELECT, INSERT, DELETE on {db}.fence_ops")),
        Access::Granted,
        "the role's grants count"
    );
    assert_eq!(
        access(&format!("SELECT, INSERT, UPDATE on {db}.fence_counters")),
        Access::Denied("the user lacks INSERT, UPDATE".into())
    );
    assert_eq!(
        access(&format!(
            "SELECT, INSERT, UPDATE, DELETE on {db}.fence_leases"
        )),
        Access::Denied("the user lacks INSERT, UPDATE, DELETE".into())
    );
    // Retirement's DELETEs, which a worker's user must never have on the counters.
    assert_eq!(
        access(&format!("DELETE on {db}.fence_counters")),
        Access::Denied("the user lacks DELETE".into())
    );
    assert_eq!(
        access(&format!("SELECT on {db}.fence_settings")),
        Access::Granted
    );
    assert_eq!(report.denied().count(), 6, "{report}");
    let operators: Vec<&str> = report.names_for(Role::Operator).collect();
    assert_eq!(
        operators,
        [
            format!("DELETE on {db}.fence_marks"),
            format!("DELETE on {db}.fence_counters"),
            format!("UPDATE, LOCK TABLES on {db}.fence_settings"),
            format!("SELECT, INSERT on {db}.fence_rebases"),
        ],
        "{report}"
    );
    assert!(!report.granted_for(Role::Worker), "{report}");
}

#[tokio::test]
async fn a_namespace_not_migrated_is_unknown_not_granted() {
    fence_testkit::sql::unmigrated_privileges_are_unknown::<MySqlDialect>().await;
}
