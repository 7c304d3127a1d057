//! Bad input and failing infrastructure against the shared server: each is a typed error that
//! says whether a retry can help, and nothing is lost or overwritten.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use fence_conformance::services::{
    domain as d, oversized_value_is_refused_before_io, put, value_of,
};
use fence_core::{
    BackendErrorKind, Domain, Fence, FenceError, FencedStore, Observed, MAX_DOMAIN_BYTES,
};
use fence_postgres::{PostgresFence, TransactionRequest};
use fence_testkit::postgres::{pool, shared_url, unique_schema};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use support::shared;

/// A migrated schema on the shared server, a fence on the test pool, and the server's URL.
async fn migrated(test: &str) -> Option<(Observed<PostgresFence>, PgPool, String)> {
    let (fence, pool) = shared(test).await?;
    Some((fence, pool, shared_url()?))
}

/// A fence on the same schema through a pool of its own options.
async fn through(
    options: PgPoolOptions,
    url: &str,
    fence: &Observed<PostgresFence>,
) -> Observed<PostgresFence> {
    let pool = options.connect_lazy(url).unwrap();
    PostgresFence::builder(pool, fence.schema())
        .build()
        .unwrap()
}

/// Pool options that run `set` on every new connection.
fn with_setting(set: &'static str) -> PgPoolOptions {
    PgPoolOptions::new().after_connect(move |conn, _| {
        Box::pin(async move { sqlx::query(set).execute(conn).await.map(|_| ()) })
    })
}

fn assert_kind(error: &FenceError, kind: BackendErrorKind, retryable: bool) {
    assert_eq!(error.backend_kind(), Some(kind), "{error}");
    assert_eq!(error.is_retryable(), retryable, "{error}");
}

#[tokio::test]
async fn a_table_of_another_shape_fails_closed() {
    let Some(url) = shared_url() else {
        return;
    };
    let pool = pool(&url).await;
    let schema = unique_schema("shape");
    // fence_marks with a text mark: the values would parse, the shape is still not Fence's.
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.fence_marks (domain text PRIMARY KEY, hwm text, state \"char\",
             revision bigint, writer numeric(20,0), value bytea);
         INSERT INTO {schema}.fence_marks (domain, hwm) VALUES ('d', '5');"
    ))
    .execute(&pool)
    .await
    .unwrap();
    // Migration creates the missing tables, keeps the foreign one and says so.
    let migrated = fence_postgres::migrate(&pool, &schema).await.unwrap_err();
    assert!(migrated.to_string().contains("hwm text"), "{migrated}");
    assert!(!migrated.is_retryable());
    let fence = PostgresFence::builder(pool.clone(), &schema)
        .build()
        .unwrap();
    for (what, result) in [
        ("write", put(&fence, &d("d"), 9, "x").await.map(|_| ())),
        ("read", fence.read(&d("d")).await.map(|_| ())),
        (
            "claim",
            fence
                .claim(&d("d"), fence_core::FencingToken::new(9).unwrap())
                .await
                .map(|_| ()),
        ),
    ] {
        match result {
            Err(FenceError::CorruptState { detail, .. }) => {
                assert!(detail.contains("hwm text"), "{what}: {detail}")
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    let hwm: String = sqlx::query_scalar(&format!("SELECT hwm FROM {schema}.fence_marks"))
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(hwm, "5", "nothing was overwritten");
}

#[tokio::test]
async fn oversized_values_and_long_domains() {
    let Some((fence, _, _)) = migrated("sizes").await else {
        return;
    };
    let fence = fence.to_builder().max_value_bytes(1024).build().unwrap();
    oversized_value_is_refused_before_io(&fence, &d("big"), 1024, None).await;
    let longest = Domain::new("d".repeat(MAX_DOMAIN_BYTES)).unwrap();
    put(&fence, &longest, 1, "v").await.unwrap();
    assert_eq!(value_of(&fence, &longest).await.as_deref(), Some("v"));
}

#[tokio::test]
async fn a_read_only_transaction_is_refused_and_writes_nothing() {
    let Some((fence, _, url)) = migrated("read_only").await else {
        return;
    };
    let read_only = through(
        with_setting("SET default_transaction_read_only = on"),
        &url,
        &fence,
    )
    .await;
    let error = put(&read_only, &d("ro"), 1, "v").await.unwrap_err();
    assert_kind(&error, BackendErrorKind::PermissionDenied, false);
    assert_eq!(fence.high_water_mark(&d("ro")).await.unwrap(), None);
}

#[tokio::test]
async fn wrong_credentials_are_a_permission_error() {
    let Some((fence, _, url)) = migrated("credentials").await else {
        return;
    };
    let stranger = url.replace("fence@", "no_such_role@");
    let denied = through(PgPoolOptions::new(), &stranger, &fence).await;
    let error = put(&denied, &d("creds"), 1, "v").await.unwrap_err();
    assert_kind(&error, BackendErrorKind::PermissionDenied, false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_pool_and_a_statement_timeout_are_retryable_and_write_nothing() {
    let Some((fence, _, url)) = migrated("timeouts").await else {
        return;
    };
    let domain = d("held");
    put(&fence, &domain, 1, "first").await.unwrap();

    // One connection, held by an open fenced transaction: the next call times out waiting.
    let single = through(
        PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_millis(300)),
        &url,
        &fence,
    )
    .await;
    let holder = support::admitted(
        &single,
        &TransactionRequest::new(domain.clone(), fence_core::FencingToken::new(2).unwrap()),
    )
    .await;
    let error = put(&single, &d("other"), 1, "v").await.unwrap_err();
    assert_kind(&error, BackendErrorKind::Unavailable, true);

    // The mark row is locked by that transaction: a statement timeout cancels the wait.
    let impatient = through(
        with_setting("SET statement_timeout = '300ms'"),
        &url,
        &fence,
    )
    .await;
    let error = put(&impatient, &domain, 3, "third").await.unwrap_err();
    assert_kind(&error, BackendErrorKind::Unavailable, true);
    holder.rollback().await.unwrap();
    assert_eq!(value_of(&fence, &domain).await.as_deref(), Some("first"));
    put(&impatient, &domain, 3, "third").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_gone_mid_transaction_commits_nothing() {
    let Some((fence, pool, _)) = migrated("gone").await else {
        return;
    };
    let domain = d("gone");
    put(&fence, &domain, 1, "first").await.unwrap();
    let mut tx = support::admitted(
        &fence,
        &TransactionRequest::new(domain.clone(), fence_core::FencingToken::new(2).unwrap()),
    )
    .await;
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(backend)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(terminated);
    // The commit's connection is gone: an error a retry may cure, never a success.
    let commit = tx.commit().await;
    assert!(
        matches!(&commit, Err(e) if e.is_retryable()),
        "a commit on a terminated connection: {commit:?}"
    );
    // Reading back shows it did not apply; the mark and value are intact.
    assert_eq!(
        fence.high_water_mark(&domain).await.unwrap(),
        Some(fence_core::FencingToken::new(1).unwrap())
    );
    assert_eq!(value_of(&fence, &domain).await.as_deref(), Some("first"));
}

#[tokio::test]
async fn a_schema_without_the_write_function_is_not_migrated_until_migrate_runs() {
    let Some((fence, pool, _)) = migrated("old_schema").await else {
        return;
    };
    // As a schema migrated by an older version, before the function existed.
    sqlx::query(&format!("DROP FUNCTION {}.fence_write", fence.schema()))
        .execute(&pool)
        .await
        .unwrap();
    let fresh = PostgresFence::builder(pool.clone(), fence.schema())
        .build()
        .unwrap();
    let error = put(&fresh, &d("old"), 1, "v").await.unwrap_err();
    assert_kind(&error, BackendErrorKind::NotFound, false);
    assert!(error.to_string().contains("fence_write"), "{error}");
    fence_postgres::migrate(&pool, fence.schema())
        .await
        .unwrap();
    let again = PostgresFence::builder(pool, fence.schema())
        .build()
        .unwrap();
    put(&again, &d("old"), 1, "v").await.unwrap();
}
