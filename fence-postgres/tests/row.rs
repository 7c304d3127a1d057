//! The seeds' per-row form on a user table against the shared server: the update's own
//! condition fences, zero affected rows become `Fenced` (or a missing row), a token column at
//! 0 has accepted no token yet, and a race of holders on one row ends with the newest token's
//! data.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::services::{assert_fenced, token as t};
use fence_core::{BackendErrorKind, EqualTokenPolicy, FenceError, FencingToken};
use fence_postgres::RowFence;
use fence_testkit::postgres::{pool, shared_url, unique_schema};
use sqlx::PgPool;

/// A fresh `accounts(id bigint, balance bigint, fence_token <token_type>)` with rows 1..=3
/// (row 3 with a corrupt token, -1), and its row fence.
async fn accounts(test: &str, token_type: &str) -> Option<(PgPool, RowFence, String)> {
    let url = shared_url()?;
    let pool = pool(&url).await;
    let schema = unique_schema(test);
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.accounts (id bigint PRIMARY KEY, balance bigint NOT NULL,
                                         fence_token {token_type});
         INSERT INTO {schema}.accounts VALUES (1, 100, NULL), (2, 100, NULL), (3, 100, -1);"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let rows = RowFence::new(&schema, "accounts", "id", "fence_token").unwrap();
    Some((pool, rows, format!("{schema}.accounts")))
}

async fn set_balance(
    pool: &PgPool,
    rows: &RowFence,
    id: i64,
    token: FencingToken,
    balance: i64,
) -> Result<(), FenceError> {
    let mut conn = pool.acquire().await.unwrap();
    rows.update(&mut conn, id, token, |set| {
        set.push("balance = ").push_bind(balance);
    })
    .await
}

async fn row(pool: &PgPool, table: &str, id: i64) -> (i64, Option<String>) {
    sqlx::query_as(&format!(
        "SELECT balance, fence_token::text FROM {table} WHERE id = $1"
    ))
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_update_fences_by_the_rows_own_token() {
    let Some((pool, rows, table)) = accounts("row_rule", "numeric(20,0)").await else {
        return;
    };
    set_balance(&pool, &rows, 1, t(5), 90).await.unwrap();
    set_balance(&pool, &rows, 1, t(5), 80).await.unwrap();
    assert_fenced(set_balance(&pool, &rows, 1, t(4), 0).await, 4, 5);
    assert_eq!(row(&pool, &table, 1).await, (80, Some("5".into())));

    let strict = rows.clone().with_policy(EqualTokenPolicy::Strict);
    assert_fenced(set_balance(&pool, &strict, 1, t(5), 0).await, 5, 5);
    set_balance(&pool, &strict, 1, t(6), 70).await.unwrap();

    // u64 tokens are exact in a numeric(20,0) column.
    set_balance(&pool, &rows, 2, FencingToken::MAX, 1)
        .await
        .unwrap();
    assert_fenced(
        set_balance(&pool, &rows, 2, t(u64::MAX - 1), 0).await,
        u64::MAX - 1,
        u64::MAX,
    );
    assert_eq!(row(&pool, &table, 2).await, (1, Some(u64::MAX.to_string())));
}

#[tokio::test]
async fn a_missing_row_and_a_corrupt_token_are_typed_and_change_nothing() {
    let Some((pool, rows, table)) = accounts("row_bad", "bigint").await else {
        return;
    };
    let missing = set_balance(&pool, &rows, 99, t(1), 0).await.unwrap_err();
    assert_eq!(
        missing.backend_kind(),
        Some(BackendErrorKind::NotFound),
        "{missing}"
    );
    assert!(missing.to_string().contains(&table), "{missing}");

    let corrupt = set_balance(&pool, &rows, 3, t(7), 0).await;
    assert!(
        matches!(corrupt, Err(FenceError::CorruptState { .. })),
        "{corrupt:?}"
    );
    assert_eq!(row(&pool, &table, 3).await, (100, Some("-1".into())));

    // A bigint column cannot hold 2^63: an error, and the row keeps its data.
    let too_big = set_balance(&pool, &rows, 1, t(1 << 63), 0).await;
    assert!(too_big.is_err(), "{too_big:?}");
    assert_eq!(row(&pool, &table, 1).await, (100, None));

    // An empty SET list is refused before any I/O; a key too long for a domain still updates.
    let mut conn = pool.acquire().await.unwrap();
    let empty = rows.update(&mut conn, 1_i64, t(9), |_| {}).await;
    assert!(
        matches!(empty, Err(FenceError::InvalidInput(_))),
        "{empty:?}"
    );
    assert_eq!(rows.domain("k".repeat(300)).as_str(), table);
    for (table, key, token) in [
        ("Accounts", "id", "fence_token"),
        ("accounts", "id; --", "fence_token"),
        ("accounts", "id", ""),
    ] {
        assert!(RowFence::new("public", table, key, token).is_err());
    }
}

/// A column made `DEFAULT 0` before Fence (MIGRATION.md) holds no token yet: its first fenced
/// update is admitted under either policy, and the column then fences as any other.
#[tokio::test]
async fn a_zero_token_column_has_accepted_no_token_yet() {
    let Some((pool, rows, table)) = accounts("row_zero", "numeric(20,0)").await else {
        return;
    };
    sqlx::query(&format!(
        "INSERT INTO {table} VALUES (4, 100, 0), (5, 100, 0)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    set_balance(&pool, &rows, 4, t(1), 90).await.unwrap();
    assert_eq!(row(&pool, &table, 4).await, (90, Some("1".into())));
    let strict = rows.clone().with_policy(EqualTokenPolicy::Strict);
    set_balance(&pool, &strict, 5, t(1), 80).await.unwrap();
    assert_fenced(set_balance(&pool, &strict, 5, t(1), 0).await, 1, 1);
    assert_eq!(row(&pool, &table, 5).await, (80, Some("1".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_holders_leave_the_newest_tokens_data() {
    let Some((pool, rows, table)) = accounts("row_race", "numeric(20,0)").await else {
        return;
    };
    let mut tasks = tokio::task::JoinSet::new();
    for holder in 1..=12_u64 {
        let (pool, rows) = (pool.clone(), rows.clone());
        tasks.spawn(async move {
            let mut accepted = Vec::new();
            for round in 0..8_u64 {
                let token = 1 + (holder * 5 + round * 11) % 40;
                match set_balance(&pool, &rows, 1, t(token), token as i64).await {
                    Ok(()) => accepted.push(token),
                    Err(FenceError::Fenced {
                        presented, current, ..
                    }) => assert!(presented < current, "{presented} fenced by {current}"),
                    Err(other) => panic!("token {token}: {other}"),
                }
            }
            accepted
        });
    }
    let mut newest = 0;
    while let Some(accepted) = tasks.join_next().await {
        newest = newest.max(accepted.unwrap().into_iter().max().unwrap_or(0));
    }
    assert_eq!(
        row(&pool, &table, 1).await,
        (newest as i64, Some(newest.to_string())),
        "the row holds the newest accepted token's data"
    );
}

/// The `RowFence` statement is a copy of the rule in SQL: on every combination of the row's
/// token (none, small, 2^63 − 1, `u64::MAX`), the presented token and the policy, the update
/// applies exactly when fence-core's rule admits the token, and a refusal names the row's token
/// and changes nothing.
#[tokio::test]
async fn the_statement_agrees_with_the_rule_on_every_vector() {
    let Some((pool, rows, table)) = accounts("row_vectors", "numeric(20,0)").await else {
        return;
    };
    let marks = [
        None,
        Some(1),
        Some(2),
        Some(i64::MAX as u64),
        Some(u64::MAX),
    ];
    let presented = [1, 2, 3, i64::MAX as u64, 1u64 << 63, u64::MAX];
    let mut id = 100;
    for mark in marks {
        for token in presented {
            for policy in [EqualTokenPolicy::SameOwner, EqualTokenPolicy::Strict] {
                id += 1;
                sqlx::query(&format!(
                    "INSERT INTO {table} VALUES ($1, 100, $2::numeric)"
                ))
                .bind(id)
                .bind(mark.map(|m| m.to_string()))
                .execute(&pool)
                .await
                .unwrap();
                let fence = rows.clone().with_policy(policy);
                let rule = fence_core::raw::rule::check_token(
                    &fence.domain(id),
                    mark.map(t),
                    t(token),
                    policy,
                );
                let got = set_balance(&pool, &fence, id, t(token), 1).await;
                let stored = row(&pool, &table, id).await;
                let what = format!("row token {mark:?}, presented {token}, {policy:?}");
                match (rule, got) {
                    (Ok(()), Ok(())) => {
                        assert_eq!(stored, (1, Some(token.to_string())), "{what}")
                    }
                    (
                        Err(FenceError::Fenced {
                            presented: p,
                            current: a,
                            ..
                        }),
                        Err(FenceError::Fenced {
                            presented: q,
                            current: b,
                            ..
                        }),
                    ) => {
                        assert_eq!((p, a), (q, b), "{what}");
                        assert_eq!(stored, (100, mark.map(|m| m.to_string())), "{what}");
                    }
                    (rule, got) => panic!("{what}: the rule says {rule:?}, the statement {got:?}"),
                }
            }
        }
    }
}
