//! `MySqlFenceBuilder::from_env` against the shared MariaDB (fence-conformance's `from_env`
//! checks).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::from_env::{
    a_fence_from_the_variables_obeys_them,
    an_unreachable_server_is_unavailable_without_its_password,
    bad_sql_settings_are_refused_before_any_connection,
};
use fence_core::env::Env;
use fence_mysql::env::{ACQUIRE_TIMEOUT_MS, DATABASE, MAX_CONNECTIONS, URL};
use fence_mysql::MySqlFenceBuilder;
use fence_testkit::mysql as support;

#[tokio::test]
async fn a_fence_from_the_mysql_variables_writes() {
    let Some(url) = support::shared_url() else {
        return;
    };
    let database = support::unique_database("from_env");
    fence_mysql::migrate(&support::pool(&url).await, &database)
        .await
        .unwrap();
    let env = Env::from_pairs([
        (URL, url.as_str()),
        (DATABASE, database.as_str()),
        (MAX_CONNECTIONS, "2"),
        ("FENCE_MAX_TOKEN_STEP", "10"),
    ]);
    let fence = MySqlFenceBuilder::from_env_with(&env)
        .await
        .and_then(MySqlFenceBuilder::build)
        .unwrap();
    assert_eq!(fence.database(), database);
    a_fence_from_the_variables_obeys_them(&fence).await;
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_its_password_is_not_shown() {
    let env = Env::from_pairs([
        (URL, "mysql://app:s3cret@127.0.0.1:1/fence"),
        (ACQUIRE_TIMEOUT_MS, "500"),
    ]);
    an_unreachable_server_is_unavailable_without_its_password(
        MySqlFenceBuilder::from_env_with(&env).await,
    );
}

#[tokio::test]
async fn bad_settings_are_refused_before_any_connection() {
    bad_sql_settings_are_refused_before_any_connection(
        &fence_mysql::env::VARIABLES,
        "database name",
        "mysql://app:s3cret@127.0.0.1:1/db",
        "postgres://app:s3cret@127.0.0.1:1/db",
        |env| async move { MySqlFenceBuilder::from_env_with(&env).await },
    )
    .await;
}
