//! PostgreSQL-specific behaviour against the shared server: exact u64 tokens, rows that are
//! not Fence's, the bounded op-id memory, a missing schema.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use fence_conformance::services::{assert_fenced, domain as d, put, token as t};
use fence_core::{BackendErrorKind, Fence, FenceError, FencedStore, FencingToken};
use fence_core::{OperationId, WriteRequest};
use fence_postgres::{PostgresFence, TransactionRequest};
use fence_testkit::postgres::{pool, shared_url, unique_schema};
use support::shared;

#[tokio::test]
async fn tokens_are_exact_across_the_bigint_limit() {
    let Some((fence, _)) = shared("exact").await else {
        return;
    };
    let domain = d("exact");
    let (below, limit, max) = (i64::MAX as u64, 1u64 << 63, u64::MAX);
    put(&fence, &domain, limit, "2^63").await.unwrap();
    assert_fenced(put(&fence, &domain, below, "2^63 - 1").await, below, limit);
    assert_eq!(
        fence.high_water_mark(&domain).await.unwrap(),
        Some(FencingToken::new(limit).unwrap())
    );
    put(&fence, &domain, max, "max").await.unwrap();
    assert_fenced(put(&fence, &domain, max - 1, "max - 1").await, max - 1, max);
    let snapshot = fence.read(&domain).await.unwrap();
    assert_eq!(snapshot.high_water_mark, Some(FencingToken::MAX));
    assert_eq!(snapshot.written_by(), Some(FencingToken::MAX));
}

#[tokio::test]
async fn rows_that_are_not_fences_fail_closed_and_stay_as_they_are() {
    let Some((fence, pool)) = shared("corrupt").await else {
        return;
    };
    let marks = format!("{}.fence_marks", fence.schema());
    let rows = [
        ("null-mark", "NULL, NULL, NULL, NULL"),
        ("negative", "-1, NULL, NULL, NULL"),
        ("too-big", "18446744073709551616, NULL, NULL, NULL"),
        ("writer-above", "5, 'v', 1, 6"),
        ("odd-state", "5, 'x', 1, 5"),
        ("half-entry", "5, 'v', NULL, 5"),
        ("writer-zero", "5, 'v', 1, 0"),
    ];
    // The schema's checks keep tokens in range; a table written by another tool may not have
    // them, and then reads must still fail closed.
    sqlx::query(&format!(
        "ALTER TABLE {marks} DROP CONSTRAINT fence_marks_hwm_u64, \
         DROP CONSTRAINT fence_marks_writer_u64"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let refused = sqlx::query(&format!(
        "INSERT INTO {}.fence_ops (domain, token, op_id, kind) VALUES ('x', 0, 'op', 'write')",
        fence.schema()
    ))
    .execute(&pool)
    .await;
    assert!(refused.is_err(), "the schema refuses token 0: {refused:?}");
    for (name, values) in rows {
        sqlx::query(&format!(
            "INSERT INTO {marks} (domain, hwm, state, revision, writer) VALUES ('{name}', {values})"
        ))
        .execute(&pool)
        .await
        .unwrap();
    }
    for (name, _) in rows {
        let domain = d(name);
        for (what, result) in [
            ("write", put(&fence, &domain, 9, "x").await.map(|_| ())),
            ("read", fence.read(&domain).await.map(|_| ())),
            ("claim", fence.claim(&domain, t(9)).await.map(|_| ())),
            ("mark", fence.high_water_mark(&domain).await.map(|_| ())),
        ] {
            assert!(
                matches!(result, Err(FenceError::CorruptState { .. })),
                "{what} on `{name}`: {result:?}"
            );
        }
    }
    let unchanged: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {marks} WHERE value IS NULL AND (hwm IS NULL OR hwm <> 9)"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(unchanged, rows.len() as i64, "nothing was overwritten");
}

#[tokio::test]
async fn the_op_id_memory_keeps_the_newest_ids() {
    let Some((fence, pool)) = shared("retention").await else {
        return;
    };
    let fence = fence.to_builder().op_id_retention(4).build().unwrap();
    let other = PostgresFence::builder(pool, fence.schema())
        .op_id_retention(4)
        .build()
        .unwrap();
    fence_conformance::retention::store_keeps_the_last_op_ids(&fence, &other, &d("retention"))
        .await;
}

#[tokio::test]
async fn a_missing_schema_and_a_bad_schema_name_are_typed_errors() {
    let Some(url) = shared_url() else {
        return;
    };
    let pool = pool(&url).await;
    let never_migrated = PostgresFence::builder(pool.clone(), &unique_schema("missing"))
        .build()
        .unwrap();
    let error = put(&never_migrated, &d("x"), 1, "v").await.unwrap_err();
    assert_eq!(
        error.backend_kind(),
        Some(BackendErrorKind::NotFound),
        "{error}"
    );
    assert!(!error.is_retryable());
    for bad in [
        "",
        "Fence",
        "fence-x",
        "1fence",
        "fence;drop",
        &"x".repeat(64),
    ] {
        assert!(
            PostgresFence::builder(pool.clone(), bad).build().is_err(),
            "{bad:?}"
        );
        assert!(
            fence_postgres::migrate(&pool, bad).await.is_err(),
            "{bad:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retries_queued_behind_the_lock_replay_the_first_outcome() {
    let Some((fence, pool)) = shared("queued").await else {
        return;
    };
    let domain = d("queued");
    // Another holder's open transaction holds the mark row; two submissions of one write (a
    // request and its retry after a lost answer) queue behind it.
    let holder = support::admitted(&fence, &TransactionRequest::new(domain.clone(), t(1))).await;
    let request = WriteRequest::put(domain.clone(), t(2), "paid")
        .with_op_id(OperationId::new("pay-7").unwrap());
    let submissions: Vec<_> = (0..2)
        .map(|_| {
            let (fence, request) = (fence.clone(), request.clone());
            tokio::spawn(async move { fence.write(&request).await })
        })
        .collect();
    support::wait_for_lock_waiters(&pool, fence.schema(), 2).await;
    holder.commit().await.unwrap();
    let mut outcomes = Vec::new();
    for submission in submissions {
        outcomes.push(submission.await.unwrap().unwrap());
    }
    let accepted = outcomes.iter().filter(|o| !o.is_duplicate()).count();
    assert_eq!(accepted, 1, "one applies, the other replays: {outcomes:?}");
    assert_eq!(outcomes[0].accepted(), outcomes[1].accepted());
    let snapshot = fence.read(&domain).await.unwrap();
    assert_eq!(snapshot.revision(), Some(fence_core::Revision::new(1)));
    assert_eq!(snapshot.written_by(), Some(t(2)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_connection_is_ambiguous_and_learnable() {
    let Some((fence, _)) = shared("cut").await else {
        return;
    };
    let url = shared_url().unwrap();
    let upstream = fence_testkit::postgres::address(&url).parse().unwrap();
    let proxy = fence_conformance::proxy::TcpProxy::start(upstream)
        .await
        .unwrap();
    let proxied = url.replace(&upstream.to_string(), &proxy.address().to_string());
    // One connection, no ping before each use: the cut lands on the write itself, whose
    // statement that connection has already prepared (a first use would send a Parse first,
    // and a cut there loses a request that never ran).
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect(&proxied)
        .await
        .unwrap();
    let through = PostgresFence::builder(pool, fence.schema())
        .build()
        .unwrap();
    fence_conformance::ambiguity::cut_connections_are_ambiguous_and_learnable(
        &through,
        &proxy,
        &d("cut"),
    )
    .await;
}

#[tokio::test]
async fn a_refused_write_on_a_new_domain_leaves_nothing_behind() {
    let Some((fence, _)) = shared("fresh_refusal").await else {
        return;
    };
    let domain = d("fresh");
    let conditional = WriteRequest::put(domain.clone(), t(1), "v").with_condition(
        fence_core::WriteCondition::Revision(fence_core::Revision::new(3)),
    );
    let refused = fence.write(&conditional).await;
    assert!(
        matches!(
            refused,
            Err(FenceError::RevisionMismatch { actual: None, .. })
        ),
        "{refused:?}"
    );
    let snapshot = fence.read(&domain).await.unwrap();
    assert_eq!(snapshot.high_water_mark, None);
    assert!(
        matches!(snapshot.entry, fence_core::Entry::Absent),
        "{snapshot:?}"
    );
    put(&fence, &domain, 1, "then a plain write").await.unwrap();
}
