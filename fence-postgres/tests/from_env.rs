//! `PostgresFenceBuilder::from_env` against the shared PostgreSQL (fence-conformance's
//! `from_env` checks).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::from_env::{
    a_fence_from_the_variables_obeys_them,
    an_unreachable_server_is_unavailable_without_its_password,
    bad_sql_settings_are_refused_before_any_connection,
};
use fence_core::env::Env;
use fence_postgres::env::{ACQUIRE_TIMEOUT_MS, MAX_CONNECTIONS, SCHEMA, URL};
use fence_postgres::PostgresFenceBuilder;
use fence_testkit::postgres as support;

#[tokio::test]
async fn a_fence_from_the_postgres_variables_writes() {
    let Some(url) = support::shared_url() else {
        return;
    };
    let schema = support::unique_schema("from_env");
    fence_postgres::migrate(&support::pool(&url).await, &schema)
        .await
        .unwrap();
    let env = Env::from_pairs([
        (URL, url.as_str()),
        (SCHEMA, schema.as_str()),
        (MAX_CONNECTIONS, "2"),
        ("FENCE_MAX_TOKEN_STEP", "10"),
    ]);
    let fence = PostgresFenceBuilder::from_env_with(&env)
        .await
        .and_then(PostgresFenceBuilder::build)
        .unwrap();
    assert_eq!(fence.schema(), schema);
    a_fence_from_the_variables_obeys_them(&fence).await;
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_its_password_is_not_shown() {
    let env = Env::from_pairs([
        (URL, "postgres://app:s3cret@127.0.0.1:1/postgres"),
        (ACQUIRE_TIMEOUT_MS, "500"),
    ]);
    an_unreachable_server_is_unavailable_without_its_password(
        PostgresFenceBuilder::from_env_with(&env).await,
    );
}

#[tokio::test]
async fn bad_settings_are_refused_before_any_connection() {
    bad_sql_settings_are_refused_before_any_connection(
        &fence_postgres::env::VARIABLES,
        "schema name",
        "postgres://app:s3cret@127.0.0.1:1/db",
        "mysql://app:s3cret@127.0.0.1:1/db",
        |env| async move { PostgresFenceBuilder::from_env_with(&env).await },
    )
    .await;
}
