//! `PostgresFence::check_permissions` against the shared server: the owner of a migrated schema
//! has every privilege, a role granted only some is told which it lacks, by name, and a schema
//! not migrated is reported as such.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_core::permissions::{Access, Role};
use fence_postgres::{PostgresDialect, PostgresFence};
use fence_testkit::postgres::{pool, shared_url};

#[tokio::test]
async fn the_check_names_each_missing_privilege() {
    let Some((fence, admin)) =
        fence_testkit::sql::the_owner_is_granted_everything::<PostgresDialect>().await
    else {
        return;
    };

    // A role with USAGE on the schema and SELECT on the marks only.
    let schema = fence.schema().to_owned();
    let role = format!("{schema}_worker");
    for statement in [
        format!("CREATE ROLE {role} LOGIN"),
        format!("GRANT USAGE ON SCHEMA {schema} TO {role}"),
        format!("GRANT SELECT ON {schema}.fence_marks TO {role}"),
    ] {
        sqlx::query(&statement).execute(&admin).await.unwrap();
    }
    let url = shared_url().unwrap().replace("fence@", &format!("{role}@"));
    let limited = PostgresFence::builder(pool(&url).await, &schema)
        .build()
        .unwrap();
    let report = limited.check_permissions().await;
    let cleanup = format!("DROP OWNED BY {role}; DROP ROLE {role}");
    limited.pool().close().await;
    sqlx::raw_sql(&cleanup).execute(&admin).await.unwrap();
    let report = report.unwrap();
    println!("{report}");
    let access = |name: &str| {
        let found = report.permissions.iter().find(|p| p.name == name);
        found.map_or_else(|| panic!("{name} not in {report}"), |p| p.access.clone())
    };
    assert_eq!(
        access(&format!("USAGE on schema {schema}")),
        Access::Granted
    );
    assert_eq!(
        access(&format!(
            "SELECT, INSERT, UPDATE, DELETE on {schema}.fence_marks"
        )),
        Access::Denied("the role lacks INSERT, UPDATE, DELETE".into())
    );
    // PostgreSQL grants EXECUTE on new functions to PUBLIC unless revoked.
    assert_eq!(
        access(&format!("EXECUTE on {schema}.fence_write")),
        Access::Granted
    );
    assert_eq!(
        access(&format!(
            "EXECUTE on {schema}.fence_lock, {schema}.fence_raise"
        )),
        Access::Granted
    );
    assert!(matches!(
        access(&format!("USAGE on the sequence of {schema}.fence_ops")),
        Access::Denied(_)
    ));
    assert!(matches!(
        access(&format!("SELECT on {schema}.fence_settings")),
        Access::Denied(_)
    ));
    // Retirement's DELETE on the counters, which a worker's role must never have.
    assert_eq!(
        access(&format!("DELETE on {schema}.fence_counters")),
        Access::Denied("the role lacks DELETE".into())
    );
    assert_eq!(report.denied().count(), 8, "{report}");
    // Retirement's and re-bases' rows are the operators' alone.
    let operators: Vec<&str> = report.names_for(Role::Operator).collect();
    assert_eq!(
        operators,
        [
            format!("DELETE on {schema}.fence_counters"),
            format!("SELECT, INSERT on {schema}.fence_rebases")
        ],
        "{report}"
    );
}

#[tokio::test]
async fn a_namespace_not_migrated_is_unknown_not_granted() {
    fence_testkit::sql::unmigrated_privileges_are_unknown::<PostgresDialect>().await;
}
