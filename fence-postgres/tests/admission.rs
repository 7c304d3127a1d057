//! Issued-only acceptance and the bounded step on real PostgreSQL (fence-conformance's SQL
//! admission suite): the counter row is read and the step checked in the write's own statement
//! (`fence_write`) or transaction (claims, fenced transactions); plus the schema's upgrades.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use fence_conformance::services::domain as d;
use fence_core::BackendErrorKind;
use fence_postgres::PostgresFence;
use support::shared;

fence_testkit::sql_admission_tests!(PostgresFence, fence_postgres::PostgresDialect);

/// Settings the schema cannot hold are refused by the table itself (a step of 0).
#[tokio::test]
async fn a_step_of_zero_cannot_be_stored() {
    let Some((fence, pool)) = shared("adm_zero").await else {
        return;
    };
    let refused = sqlx::query(&format!(
        "INSERT INTO {}.fence_settings (max_step) VALUES (0)",
        fence.schema()
    ))
    .execute(&pool)
    .await;
    assert!(refused.is_err(), "a step of zero was stored");
}

#[tokio::test]
async fn a_schema_from_before_the_admission_checks_must_be_migrated_again() {
    // Version 1's function took nine arguments.
    must_be_migrated_again(
        "adm_upgrade",
        "CREATE FUNCTION fence_schema.fence_write(text, numeric, boolean, text, text, bigint, \
         \"char\", bytea, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true'",
    )
    .await;
}

#[tokio::test]
async fn a_schema_from_before_the_schema_settings_must_be_migrated_again() {
    // Version 2's, as it was: eleven arguments, no bounds returned, fence_settings never read.
    must_be_migrated_again("adm_upgrade2", include_str!("fixtures/fence_write_v2.sql")).await;
}

/// Replaces the schema's `fence_write` with an older one (`old_function`, with `fence_schema`
/// for the schema): a write is refused as not migrated, and `migrate` repairs the schema.
async fn must_be_migrated_again(name: &str, old_function: &str) {
    let Some((fence, pool)) = shared(name).await else {
        return;
    };
    let schema = fence.schema().to_owned();
    sqlx::raw_sql(&format!(
        "DROP FUNCTION {schema}.fence_write(text, numeric, boolean, text, text, bigint, \"char\", \
         bytea, bigint, numeric, boolean); {}",
        old_function.replace("fence_schema", &schema)
    ))
    .execute(&pool)
    .await
    .unwrap();
    let stale = fence_postgres::PostgresFence::builder(pool.clone(), &schema)
        .build()
        .unwrap();
    let refused = fence_conformance::services::put(&stale, &d("x"), 1, "v").await;
    match &refused {
        Err(error) => {
            assert_eq!(
                error.backend_kind(),
                Some(BackendErrorKind::NotFound),
                "{error}"
            );
            assert!(error.to_string().contains("fence_write"), "{error}");
        }
        Ok(outcome) => panic!("a write on the old schema: {outcome:?}"),
    }
    fence_postgres::migrate(&pool, &schema).await.unwrap();
    let fresh = fence_postgres::PostgresFence::builder(pool, &schema)
        .build()
        .unwrap();
    fence_conformance::services::put(&fresh, &d("x"), 1, "v")
        .await
        .unwrap();
}
